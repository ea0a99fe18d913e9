// `cnnscale report`'s wide by_gpus table on synthetic runs: one column group per GPU count holding
// the long tables' values, null speedups without a one-GPU run, allreduce variants sharing the
// one-GPU run and GPU mixes left out.
#include <gtest/gtest.h>

#include <map>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"

namespace cnnscale {
namespace {

using testing::CsvRow;
using testing::read_csv;
using testing::report_without_plots;
using testing::row_of;
using testing::scaling_run;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

// The scaling study with an 8-GPU point: two networks, two batches, 1/2/4/8 GPUs, two repeats;
// net_bb at batch 128 was not run on 8 GPUs.
TEST(ReportByGpus, OneColumnGroupPerGpuCountHoldingTheLongTablesValues) {
  TempDir dir;
  const std::vector<int> counts = {1, 2, 4, 8};
  auto missing = [](const std::string& net, int batch, int n) { return net == "net_bb" && batch == 128 && n == 8; };
  for (const std::string net : {"net_a", "net_bb"})
    for (int batch : {64, 128})
      for (int n : counts)
        for (int rep = 0; rep < 2; ++rep)
          if (!missing(net, batch, n)) write_run(dir.str(), scaling_run(net, batch, n, rep));
  report_without_plots(dir.str());

  std::vector<std::string> header = {"net", "batch", "runs"};
  for (int n : counts)
    for (const std::string figure : {"samples_per_s", "speedup", "joules_per_batch", "edp_mj_ks"})
      if (figure != "speedup" || n != 1)
        for (const char* part : {"mean", "std"}) header.push_back(fmt::format("{}_g{}_{}", figure, n, part));
  header.insert(header.end(), {"fastest_count", "least_edp_count"});
  const auto records = testing::csv_records(slurp(dir.file("report/by_gpus.csv")));
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0], header);

  const auto rows = read_csv(dir.file("report/by_gpus.csv"));
  const auto time = read_csv(dir.file("report/time.csv"));
  const auto scaling = read_csv(dir.file("report/scaling.csv"));
  const auto energy = read_csv(dir.file("report/energy.csv"));
  const auto whole = read_csv(dir.file("report/whole.csv"));
  const std::vector<std::pair<std::string, int>> order = {
      {"net_a", 64}, {"net_a", 128}, {"net_bb", 64}, {"net_bb", 128}};
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [net, batch] = order[i];
    const CsvRow& row = rows[i];
    ASSERT_EQ(row.at("net"), net);
    ASSERT_EQ(row.at("batch"), std::to_string(batch));
    EXPECT_EQ(row.at("runs"), missing(net, batch, 8) ? "2/2/2/0" : "2/2/2/2");
    for (int n : counts) {
      const std::string g = fmt::format("_g{}_", n);
      const std::string where = fmt::format("{} b{} {} GPUs", net, batch, n);
      if (missing(net, batch, n)) {
        for (const char* figure : {"samples_per_s", "speedup", "joules_per_batch", "edp_mj_ks"})
          EXPECT_EQ(row.at(figure + g + "mean"), "") << where << " " << figure;
        continue;
      }
      for (const char* part : {"mean", "std"}) {
        EXPECT_EQ(row.at("samples_per_s" + g + part),
                  row_of(time, net, n, batch).at(std::string("samples_per_s_") + part))
            << where;
        EXPECT_EQ(row.at("joules_per_batch" + g + part),
                  row_of(energy, net, n, batch).at(std::string("joules_per_batch_") + part))
            << where;
        EXPECT_EQ(row.at("edp_mj_ks" + g + part), row_of(whole, net, n, batch).at(std::string("edp_mj_ks_") + part))
            << where;
        if (n != 1) {
          EXPECT_EQ(row.at("speedup" + g + part), row_of(scaling, net, n, batch).at(std::string("speedup_") + part))
              << where;
        }
      }
      EXPECT_FALSE(row.at("samples_per_s" + g + "std").empty()) << where << ": two repeats have a spread";
    }
  }
  // Speedup is the ratio of the mean rates on 8 GPUs and on 1.
  auto mean_rate = [](int n) {
    double sum = 0;
    for (int rep = 0; rep < 2; ++rep)
      sum += scaling_run("net_a", 64, n, rep).summary.samples_per_s.value();
    return sum / 2;
  };
  EXPECT_DOUBLE_EQ(std::stod(rows[0].at("speedup_g8_mean")), mean_rate(8) / mean_rate(1));
  EXPECT_DOUBLE_EQ(std::stod(rows[0].at("samples_per_s_g8_mean")), mean_rate(8));

  const std::string md = slurp(dir.file("report/by_gpus.md"));
  // CPU runs: ranks; one unit per figure across the counts, fit to its values.
  EXPECT_NE(md.find("| network | batch | runs | samples/s (1 rank) | J/batch (1 rank) | EDP (MJ·s) (1 rank) | "
                    "samples/s (2 ranks) | speedup (2 ranks) | J/batch (2 ranks) | EDP (MJ·s) (2 ranks) | "
                    "samples/s (4 ranks) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| EDP (MJ·s) (8 ranks) | fastest (ranks) | least EDP (ranks) |\n"), std::string::npos) << md;
  const size_t line = md.find("| net_bb | 128 | 2/2/2/0 |");
  ASSERT_NE(line, std::string::npos) << md;
  // No 8-GPU point: its four figures are dashes, and the best of the counts run is 4 GPUs.
  EXPECT_TRUE(md.substr(0, md.find('\n', line)).ends_with(" | — | — | — | — | 4 | 4 |")) << md;
  EXPECT_NE(md.find("1-rank run of the same network, global batch and variant"), std::string::npos) << md;
  EXPECT_EQ(md.find("no 1-rank run"), std::string::npos) << md;
  // In report.md right after the long scaling table.
  const std::string report_md = slurp(dir.file("report/report.md"));
  const size_t long_table = report_md.find("<a id=\"scaling\">"), wide = report_md.find("<a id=\"by_gpus\">");
  ASSERT_NE(wide, std::string::npos);
  EXPECT_LT(long_table, wide);
  EXPECT_LT(wide, report_md.find("<a id=\"phases\">"));
}

TEST(ReportByGpus, WithoutAOneGpuRunSpeedupsAreNullAndANoteSaysSo) {
  TempDir dir;
  for (int n : {8, 2})
    for (int rep = 0; rep < 2; ++rep) write_run(dir.str(), scaling_run("net_a", 64, n, rep));
  report_without_plots(dir.str());
  const auto records = testing::csv_records(slurp(dir.file("report/by_gpus.csv")));
  ASSERT_EQ(records.size(), 2u);
  std::vector<std::string> header = {"net", "batch", "runs"};
  for (int n : {2, 8})
    for (const std::string figure : {"samples_per_s", "speedup", "joules_per_batch", "edp_mj_ks"})
      for (const char* part : {"mean", "std"}) header.push_back(fmt::format("{}_g{}_{}", figure, n, part));
  header.insert(header.end(), {"fastest_count", "least_edp_count"});
  EXPECT_EQ(records[0], header);
  const CsvRow row = read_csv(dir.file("report/by_gpus.csv")).at(0);
  EXPECT_EQ(row.at("runs"), "2/2");
  EXPECT_FALSE(row.at("samples_per_s_g2_mean").empty());
  EXPECT_FALSE(row.at("samples_per_s_g8_mean").empty());
  EXPECT_EQ(row.at("speedup_g2_mean"), "");
  EXPECT_EQ(row.at("speedup_g8_mean"), "");
  EXPECT_NE(slurp(dir.file("report/by_gpus.md")).find("The data holds no 1-rank run: every speedup is —."),
            std::string::npos);
}

// GPU runs as a sweep writes them: a 1-GPU run, 2 GPUs with overlap on and off, an explicit
// gpu_mix [0, 2] (same GPU model, so the same gpu_names as the plain run) and a run on two models.
TEST(ReportByGpus, AllreduceVariantsShareTheOneGpuRunAndGpuMixesStayOut) {
  TempDir dir;
  auto gpu_run = [&](int n, int rep, double rate, const std::string& names) {
    RunResults r = synthetic_run("net_a", 64, n, rep, {{"samples_per_s", rate}});
    r.run_id += fmt::format("-{}", rate);
    r.summary.device = std::string("gpu");
    r.summary.gpu_names = names;
    if (n == 1) r.summary.allreduce_algo = std::string("");
    return r;
  };
  const std::string h100 = "NVIDIA H100";
  write_run(dir.str(), gpu_run(1, 0, 100, h100));
  write_run(dir.str(), gpu_run(2, 0, 190, h100 + "," + h100));
  RunResults serial = gpu_run(2, 0, 170, h100 + "," + h100);
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), serial);
  RunResults mix = gpu_run(2, 0, 150, h100 + "," + h100);
  mix.summary.tags["gpu_mix"] = std::string("0.2");
  write_run(dir.str(), mix);
  write_run(dir.str(), gpu_run(2, 0, 140, h100 + ",NVIDIA A100"));
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 5) << "the gpu_mix run is no repeat of the plain one";

  const auto time = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(time.size(), 5u);
  std::map<std::string, std::string> variant;  // samples/s -> variant
  for (const CsvRow& r : time) variant[r.at("samples_per_s_mean")] = r.at("variant");
  EXPECT_EQ(variant.at("190"), "allreduce_overlap=1 gpu=NVIDIA H100 gpu_mix=none");
  EXPECT_EQ(variant.at("150"), "allreduce_overlap=1 gpu=NVIDIA H100 gpu_mix=0.2");
  EXPECT_EQ(variant.at("140"), "allreduce_overlap=1 gpu=NVIDIA H100,NVIDIA A100 gpu_mix=none");
  // The long scaling table still scales the mixes against the plain 1-GPU run.
  for (const CsvRow& r : read_csv(dir.file("report/scaling.csv")))
    EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), std::stod(r.at("samples_per_s_mean")) / 100) << r.at("variant");

  const auto wide = read_csv(dir.file("report/by_gpus.csv"));
  ASSERT_EQ(wide.size(), 2u);
  EXPECT_EQ(wide[0].at("variant"), "allreduce_overlap=0");
  EXPECT_EQ(wide[1].at("variant"), "allreduce_overlap=1");
  for (const CsvRow& r : wide) {
    EXPECT_EQ(r.at("samples_per_s_g1_mean"), "100");
    EXPECT_EQ(r.at("runs"), "1/1");
  }
  EXPECT_EQ(wide[0].at("samples_per_s_g2_mean"), "170");
  EXPECT_DOUBLE_EQ(std::stod(wide[0].at("speedup_g2_mean")), 1.7);
  EXPECT_EQ(wide[1].at("samples_per_s_g2_mean"), "190");
  EXPECT_DOUBLE_EQ(std::stod(wide[1].at("speedup_g2_mean")), 1.9);
  const std::string md = slurp(dir.file("report/by_gpus.md"));
  EXPECT_NE(md.find("2 configuration(s) on an explicit GPU selection (gpu_mix) or on GPUs of different models"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("show the same 1-GPU run"), std::string::npos) << md;
}

}  // namespace
}  // namespace cnnscale

namespace cnnscale {
namespace {

// The columns the study's CTC conclusion is read from: the GPU count of the highest mean samples/s and
// that of the lowest mean EDP, which need not be the same count; one count with the figure is no choice.
TEST(ReportByGpus, FastestAndLeastEdpCountsAreEachFiguresBestCount) {
  TempDir dir;
  // net_c: 4 GPUs fastest, 2 GPUs the least EDP; net_d: only its 2-GPU runs have an EDP.
  const std::map<int, std::pair<double, double>> c = {{1, {100, 50}}, {2, {180, 40}}, {4, {200, 60}}};
  for (const auto& [n, figures] : c)
    for (int rep = 0; rep < 2; ++rep) {
      write_run(dir.str(), testing::synthetic_run("net_c", 64, n, rep,
                                                  {{"samples_per_s", figures.first + rep},
                                                   {"edp_training_js", 1e9 * (figures.second + rep)}}));
      write_run(dir.str(), testing::synthetic_run("net_d", 64, n, rep,
                                                  {{"samples_per_s", 300.0 - 50 * n},
                                                   {"edp_training_js", n == 2 ? 1e9 : kMissing}}));
    }
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/by_gpus.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("net"), "net_c");
  EXPECT_EQ(rows[0].at("fastest_count"), "4");
  EXPECT_EQ(rows[0].at("least_edp_count"), "2");
  EXPECT_EQ(rows[1].at("net"), "net_d");
  EXPECT_EQ(rows[1].at("fastest_count"), "1");
  EXPECT_EQ(rows[1].at("least_edp_count"), "—");
  const std::string md = slurp(dir.file("report/by_gpus.md"));
  EXPECT_NE(md.find("| fastest (ranks) | least EDP (ranks) |"), std::string::npos) << md;
  EXPECT_NE(md.find("the lowest mean whole-training EDP"), std::string::npos) << md;
}

TEST(ReportByGpus, OneGpuCountHasNoBestCountColumns) {
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) write_run(dir.str(), scaling_run("net_a", 64, 2, rep));
  report_without_plots(dir.str());
  EXPECT_EQ(slurp(dir.file("report/by_gpus.csv")).find("fastest_count"), std::string::npos);
}

}  // namespace
}  // namespace cnnscale
