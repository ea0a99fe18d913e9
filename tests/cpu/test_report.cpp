// `cnnscale report` on synthetic runs written with write_run_results: grouping of repeats, mean and
// sample std read back from the CSV equal to the inputs', speedup/efficiency, best EDP, null
// handling ("—" in Markdown, empty in CSV, a note on an all-null table), partial folders ignored,
// the variant column (keys that vary within a network) and the wide by_gpus table (1/2/4/8 GPUs).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_data.hpp"
#include "experiment/report_table.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::CsvRow;
using testing::read_csv;
using testing::report_without_plots;
using testing::scaling_run;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

const CsvRow& row_of(const std::vector<CsvRow>& rows, const std::string& net, int gpus, int batch) {
  for (const CsvRow& r : rows)
    if (r.at("net") == net && r.at("gpus") == std::to_string(gpus) && r.at("batch") == std::to_string(batch)) return r;
  throw std::runtime_error(fmt::format("no row {} {} {}", net, gpus, batch));
}

double sample_std(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  double s = 0;
  for (double x : v) s += (x - mean) * (x - mean);
  return std::sqrt(s / (v.size() - 1));
}

TEST(ReportStats, MeanSampleStdAndCountSkipNulls) {
  report::Stat s = report::stat_of({1.0, 2.0, 3.0, kMissing});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.std, 1.0);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 3.0);
  report::Stat one = report::stat_of({5.0});
  EXPECT_EQ(one.n, 1);
  EXPECT_TRUE(std::isnan(one.std));
  EXPECT_EQ(report::format_stat(one), "5.000");
  EXPECT_TRUE(report::stat_of({kMissing}).null());
  EXPECT_EQ(report::format_stat(report::stat_of({})), "—");
  EXPECT_EQ(report::format_stat(report::stat_of({0.1, 0.3})), "0.2000 ± 0.1414");
  EXPECT_EQ(report::format_number(123456.7), "123457");
  EXPECT_EQ(report::csv_number(0.1), "0.1");
  EXPECT_EQ(report::csv_field("H100,H100"), "\"H100,H100\"");
}

TEST(Report, RepeatsAreGroupedAndCsvHoldsTheirMeanAndStd) {
  TempDir dir;
  const std::vector<double> spb = {0.125, 0.25, 0.2};
  for (int rep = 0; rep < 3; ++rep)
    write_run(dir.str(), synthetic_run("lenet", 64, 1, rep,
                                       {{"seconds_per_batch", spb[rep]},
                                        {"samples_per_s", 64 / spb[rep]},
                                        {"whole_training_seconds", spb[rep] * 1000},
                                        {"whole_iterations", 1000.0},
                                        {"time_forward_s", spb[rep] / 4},
                                        {"time_backward_s", spb[rep] / 2}}));
  write_run(dir.str(), synthetic_run("lenet", 128, 1, 0, {{"seconds_per_batch", 0.5}, {"samples_per_s", 256.0}}));
  const report::ReportOutcome out = report_without_plots(dir.str());
  EXPECT_EQ(out.runs, 4);
  EXPECT_EQ(out.configurations, 2);
  EXPECT_EQ(out.out_dir, (fs::path(dir.str()) / "report").string());

  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 2u);
  const CsvRow& r = row_of(rows, "lenet", 1, 64);
  EXPECT_EQ(r.at("runs"), "3");
  const double mean = (spb[0] + spb[1] + spb[2]) / 3;
  EXPECT_DOUBLE_EQ(std::stod(r.at("seconds_per_batch_mean")), mean);
  EXPECT_DOUBLE_EQ(std::stod(r.at("seconds_per_batch_std")), sample_std(spb));
  EXPECT_DOUBLE_EQ(std::stod(r.at("samples_per_s_mean")), (64 / spb[0] + 64 / spb[1] + 64 / spb[2]) / 3);
  EXPECT_DOUBLE_EQ(std::stod(r.at("forward_seconds_per_batch_mean")), mean / 4);
  EXPECT_DOUBLE_EQ(std::stod(r.at("backward_whole_seconds_mean")), mean / 2 * 1000);
  // One run: a mean and no spread.
  const CsvRow& single = row_of(rows, "lenet", 1, 128);
  EXPECT_EQ(single.at("runs"), "1");
  EXPECT_EQ(single.at("seconds_per_batch_mean"), "0.5");
  EXPECT_EQ(single.at("seconds_per_batch_std"), "");
  EXPECT_EQ(single.at("forward_seconds_per_batch_mean"), "");  // null -> empty

  const std::string md = slurp(dir.file("report/time.md"));
  // Markdown in the unit that fits the column (up to 0.5 s: ms); the CSV above in seconds.
  EXPECT_NE(md.find("step ms/batch"), std::string::npos) << md;
  EXPECT_NE(md.find(report::format_stat(report::stat_of({125, 250, 200}))), std::string::npos) << md;
  EXPECT_NE(md.find("time_forward_s"), std::string::npos) << "the note says where forward/backward came from";
  EXPECT_EQ(md.find("variant"), std::string::npos) << "no variant column when only net/batch/GPUs vary";
}

TEST(Report, SpeedupAndEfficiencyAgainstTheOneGpuRun) {
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.str(), synthetic_run("net_a", 64, 1, rep, {{"samples_per_s", 100.0 + rep * 10}}));
    write_run(dir.str(), synthetic_run("net_a", 64, 2, rep, {{"samples_per_s", 180.0 + rep * 10}}));
  }
  write_run(dir.str(), synthetic_run("net_a", 128, 4, 0, {{"samples_per_s", 400.0}}));  // no 1-GPU run
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  ASSERT_EQ(rows.size(), 3u);
  const CsvRow& two = row_of(rows, "net_a", 2, 64);
  EXPECT_DOUBLE_EQ(std::stod(two.at("speedup_mean")), 185.0 / 105.0);
  EXPECT_DOUBLE_EQ(std::stod(two.at("efficiency_mean")), 185.0 / 105.0 / 2);
  EXPECT_DOUBLE_EQ(std::stod(two.at("baseline_samples_per_s_mean")), 105.0);
  const double rel = std::hypot(sample_std({180, 190}) / 185.0, sample_std({100, 110}) / 105.0);
  EXPECT_NEAR(std::stod(two.at("speedup_std")), 185.0 / 105.0 * rel, 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "net_a", 1, 64).at("speedup_mean")), 1.0);
  const CsvRow& orphan = row_of(rows, "net_a", 4, 128);
  EXPECT_EQ(orphan.at("speedup_mean"), "");
  EXPECT_EQ(orphan.at("efficiency_mean"), "");
  const std::string md = slurp(dir.file("report/scaling.md"));
  EXPECT_NE(md.find("| net_a | 4 | 128 | 1 | 400.0 | — | — | — |"), std::string::npos) << md;
}

// Strong-scaling efficiency in two factors where one GPU also ran the per-GPU batch: 4 GPUs at
// global 256 against 1 GPU at 256 (400 samples/s) and at 64 (250): one GPU keeps 250 / 400 of its
// rate at 64 samples, 4 GPUs at 64 each keep 900 / (4 x 250) of 4 times that, and the product is the
// efficiency 900 / (4 x 400). 4 GPUs at global 128 (32 each) have no 1-GPU run at 32: —.
TEST(Report, StrongScalingEfficiencyIsTheSmallBatchRatioTimesTheWeakEfficiency) {
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.str(), synthetic_run("net_a", 256, 1, rep, {{"samples_per_s", 390.0 + rep * 20}}));
    write_run(dir.str(), synthetic_run("net_a", 64, 1, rep, {{"samples_per_s", 245.0 + rep * 10}}));
    write_run(dir.str(), synthetic_run("net_a", 256, 4, rep, {{"samples_per_s", 890.0 + rep * 20}}));
  }
  write_run(dir.str(), synthetic_run("net_a", 128, 1, 0, {{"samples_per_s", 330.0}}));
  write_run(dir.str(), synthetic_run("net_a", 128, 4, 0, {{"samples_per_s", 600.0}}));
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  const CsvRow& four = row_of(rows, "net_a", 4, 256);
  EXPECT_DOUBLE_EQ(std::stod(four.at("small_batch_ratio_mean")), 250.0 / 400.0);
  EXPECT_DOUBLE_EQ(std::stod(four.at("weak_efficiency_mean")), 900.0 / (4 * 250.0));
  EXPECT_NEAR(std::stod(four.at("small_batch_ratio_mean")) * std::stod(four.at("weak_efficiency_mean")),
              std::stod(four.at("efficiency_mean")), 1e-15);
  const double rel = std::hypot(sample_std({245, 255}) / 250.0, sample_std({390, 410}) / 400.0);
  EXPECT_NEAR(std::stod(four.at("small_batch_ratio_std")), 250.0 / 400.0 * rel, 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "net_a", 1, 256).at("weak_efficiency_mean")), 1.0);
  const CsvRow& orphan = row_of(rows, "net_a", 4, 128);
  EXPECT_FALSE(orphan.at("efficiency_mean").empty());
  EXPECT_EQ(orphan.at("small_batch_ratio_mean"), "");
  EXPECT_EQ(orphan.at("weak_efficiency_mean"), "");
  const std::string md = slurp(dir.file("report/scaling.md"));
  EXPECT_NE(md.find("Both are — in 1 row(s) without a 1-rank run at the per-rank batch."), std::string::npos) << md;
}

// Weak scaling: 2 GPUs at global 128 against the 1-GPU run at 64 (its per-GPU batch), 4 GPUs at
// 256 likewise; 2 GPUs at 64 (per-GPU 32) have no 1-GPU run at 32 and get no row. Without any such
// pair the report has no weak-scaling table at all.
TEST(Report, WeakScalingAgainstTheOneGpuRunOfThePerGpuBatch) {
  {
    TempDir dir;
    write_run(dir.str(), synthetic_run("net_a", 64, 1, 0, {{"samples_per_s", 100.0}}));
    write_run(dir.str(), synthetic_run("net_a", 64, 2, 0, {{"samples_per_s", 150.0}}));
    report_without_plots(dir.str());
    EXPECT_FALSE(fs::exists(dir.file("report/weak_scaling.csv")));
  }
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.str(), synthetic_run("net_a", 64, 1, rep, {{"samples_per_s", 100.0 + rep * 10}}));
    write_run(dir.str(), synthetic_run("net_a", 128, 2, rep, {{"samples_per_s", 200.0 + rep * 10}}));
  }
  write_run(dir.str(), synthetic_run("net_a", 256, 4, 0, {{"samples_per_s", 380.0}}));
  write_run(dir.str(), synthetic_run("net_a", 64, 2, 0, {{"samples_per_s", 150.0}}));
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/weak_scaling.csv"));
  ASSERT_EQ(rows.size(), 2u);
  const CsvRow& two = row_of(rows, "net_a", 2, 128);
  EXPECT_EQ(two.at("batch_per_rank"), "64");
  EXPECT_DOUBLE_EQ(std::stod(two.at("baseline_samples_per_s_mean")), 105.0);
  EXPECT_DOUBLE_EQ(std::stod(two.at("scaled_speedup_mean")), 205.0 / 105.0);
  EXPECT_DOUBLE_EQ(std::stod(two.at("efficiency_mean")), 205.0 / 105.0 / 2);
  const double rel = std::hypot(sample_std({200, 210}) / 205.0, sample_std({100, 110}) / 105.0);
  EXPECT_NEAR(std::stod(two.at("scaled_speedup_std")), 205.0 / 105.0 * rel, 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "net_a", 4, 256).at("efficiency_mean")), 380.0 / 105.0 / 4);
  const std::string md = slurp(dir.file("report/weak_scaling.md"));
  EXPECT_NE(md.find("per-rank batch"), std::string::npos) << md;  // CPU runs: ranks, not GPUs
  EXPECT_NE(md.find("Weak scaling"), std::string::npos) << md;
}

TEST(Report, NullEnergyIsADashAnEmptyFieldAndANoteSayingWhy) {
  TempDir dir;
  RunResults r = synthetic_run("lenet", 64, 1, 0,
                               {{"seconds_per_batch", 0.1},
                                {"joules_per_batch", std::monostate{}},
                                {"watts", std::monostate{}},
                                {"whole_training_joules", std::monostate{}},
                                {"test_top1", std::monostate{}}});
  r.methods["joules_per_batch"] = "unavailable: no NVML and RAPL not readable";
  write_run(dir.str(), r);
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/energy.csv"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("joules_per_batch_mean"), "");
  EXPECT_EQ(rows[0].at("joules_per_batch_std"), "");
  EXPECT_EQ(rows[0].count("forward_joules_per_batch_mean"), 0u) << "optional columns only when present";
  const std::string md = slurp(dir.file("report/energy.md"));
  EXPECT_NE(md.find("| lenet | 1 | 64 | 1 | — | — | — |"), std::string::npos) << md;
  EXPECT_NE(md.find("Every value in this table is null"), std::string::npos) << md;
  EXPECT_NE(md.find("CPU run without NVML/RAPL"), std::string::npos) << md;
  EXPECT_NE(md.find("unavailable: no NVML and RAPL not readable"), std::string::npos) << md;
  EXPECT_NE(slurp(dir.file("report/accuracy.md")).find("—"), std::string::npos);
  EXPECT_EQ(read_csv(dir.file("report/accuracy.csv"))[0].at("top1_percent_mean"), "");
}

TEST(Report, LowestEdpPerNetworkIsMarkedAndUnitsAreKsAndMj) {
  TempDir dir;
  auto run = [&](const std::string& net, int batch, int n, double s, double j) {
    write_run(dir.str(),
              synthetic_run(net, batch, n, 0,
                            {{"whole_training_seconds", s}, {"whole_training_joules", j}, {"edp_training_js", s * j}}));
  };
  run("a", 64, 1, 2000, 3e6);
  run("a", 128, 1, 1000, 2e6);  // best of a
  run("b", 64, 1, 5000, 1e6);   // only one of b: best
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/whole.csv"));
  EXPECT_EQ(row_of(rows, "a", 1, 64).at("best_edp"), "0");
  EXPECT_EQ(row_of(rows, "a", 1, 128).at("best_edp"), "1");
  EXPECT_EQ(row_of(rows, "b", 1, 64).at("best_edp"), "1");
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "a", 1, 64).at("whole_ks_mean")), 2.0);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "a", 1, 64).at("whole_mj_mean")), 3.0);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "a", 1, 64).at("edp_mj_ks_mean")), 6.0);
  const std::string md = slurp(dir.file("report/whole.md"));
  EXPECT_NE(md.find("| a | 1 | 128 | 1 | 1.000 | 2.000 | 2.000 | ★ |"), std::string::npos) << md;
}

// What train writes: a single rank has no allreduce (algo ""), the multi-rank runs say "ring" and
// run with overlap on and off. Both multi-rank variants scale against the one 1-GPU run, and the
// 1-GPU row carries no allreduce variant.
TEST(Report, OneGpuBaselineIgnoresAllreduceSettings) {
  TempDir dir;
  RunResults one = synthetic_run("net_b", 64, 1, 0, {{"samples_per_s", 100.0}});
  one.summary.allreduce_algo = std::string("");
  write_run(dir.str(), one);
  write_run(dir.str(), synthetic_run("net_b", 64, 2, 0, {{"samples_per_s", 190.0}}));
  RunResults serial = synthetic_run("net_b", 64, 2, 1, {{"samples_per_s", 170.0}});
  serial.run_id = "serial";
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), serial);
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  ASSERT_EQ(rows.size(), 3u);
  for (const CsvRow& r : rows) {
    if (r.at("gpus") == "1") {
      EXPECT_EQ(r.at("variant"), "");
      EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), 1.0);
    } else {
      EXPECT_DOUBLE_EQ(std::stod(r.at("baseline_samples_per_s_mean")), 100.0) << r.at("variant");
      EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), std::stod(r.at("samples_per_s_mean")) / 100.0);
    }
  }
}

// A one-rank job kept on the data-parallel path (--one-rank-exchange) measured that path: a
// configuration of its own, set against the GPU alone, and never the baseline of the multi-rank
// runs: not where it is the only 1-GPU run, nor where its GPU would rank it first (the plain run's
// is another model). Two such runs with other exchange settings stay two labelled rows.
TEST(Report, OneRankExchangeRunsAreSetAgainstTheGpuAloneAndAreNoBaseline) {
  for (const bool with_alone : {true, false}) {
    SCOPED_TRACE(with_alone ? "with a one-process run" : "without one");
    TempDir dir;
    if (with_alone) {
      RunResults one = testing::gpu_run(synthetic_run("net_b", 64, 1, 0, {{"samples_per_s", 100.0}}));
      one.summary.allreduce_algo = std::string("");
      one.summary.gpu_names = std::string("NVIDIA H100 NVL");
      write_run(dir.str(), one);
    }
    RunResults exchange = testing::gpu_run(synthetic_run("net_b", 64, 1, 1, {{"samples_per_s", 95.0}}));
    exchange.run_id = "exchange";
    exchange.summary.one_rank_exchange = 1.0;
    write_run(dir.str(), exchange);
    RunResults after = exchange;
    after.run_id = "after";
    after.summary.allreduce_overlap = 0.0;
    after.summary.samples_per_s = 90.0;
    write_run(dir.str(), after);
    write_run(dir.str(), testing::gpu_run(synthetic_run("net_b", 64, 2, 0, {{"samples_per_s", 190.0}})));
    const auto out = report_without_plots(dir.str());
    EXPECT_EQ(out.configurations, with_alone ? 4 : 3);
    const auto rows = read_csv(dir.file("report/scaling.csv"));
    ASSERT_EQ(rows.size(), with_alone ? 4u : 3u);
    std::set<std::string> exchange_variants;
    int multi_rank = 0;
    for (const CsvRow& r : rows) {
      if (r.at("variant").find("one_rank_exchange=1") != std::string::npos) {
        exchange_variants.insert(r.at("variant"));
        const double own = std::stod(r.at("samples_per_s_mean"));
        if (with_alone)
          EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), own / 100.0) << "the path's cost against the GPU alone";
        else
          EXPECT_EQ(r.at("speedup_mean"), "");
      } else if (r.at("gpus") == "2") {
        ++multi_rank;
        EXPECT_EQ(r.at("baseline_samples_per_s_mean"), with_alone ? "100" : "") << r.at("variant");
      } else {
        EXPECT_EQ(r.at("variant").find("one_rank_exchange"), std::string::npos) << r.at("variant");
      }
    }
    EXPECT_EQ(exchange_variants.size(), 2u) << "one label per exchange configuration";
    EXPECT_EQ(multi_rank, 1);
  }
}

// Runs whose NCCL read another environment (NCCL_MAX_CTAS, say) measured another thing: separate
// configurations with the environment as their variant, each scaling against the one 1-GPU run,
// which exchanged nothing and carries no NCCL environment.
TEST(Report, NcclEnvironmentSeparatesMultiRankRunsNotTheirBaseline) {
  TempDir dir;
  RunResults one = synthetic_run("net_b", 64, 1, 0, {{"samples_per_s", 100.0}});
  one.summary.allreduce_algo = std::string("");
  write_run(dir.str(), one);
  RunResults plain = synthetic_run("net_b", 64, 2, 0, {{"samples_per_s", 190.0}});
  plain.system.nccl_env = "NCCL_ALGO=Ring";
  write_run(dir.str(), plain);
  RunResults limited = synthetic_run("net_b", 64, 2, 1, {{"samples_per_s", 180.0}});
  limited.run_id = "limited";
  limited.system.nccl_env = "NCCL_ALGO=Ring NCCL_MAX_CTAS=4";
  write_run(dir.str(), limited);
  const auto out = report_without_plots(dir.str());
  EXPECT_EQ(out.configurations, 3);
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  ASSERT_EQ(rows.size(), 3u);
  std::set<std::string> variants;
  for (const CsvRow& r : rows) {
    variants.insert(r.at("variant"));
    if (r.at("gpus") != "1") {
      EXPECT_DOUBLE_EQ(std::stod(r.at("baseline_samples_per_s_mean")), 100.0) << r.at("variant");
    }
  }
  EXPECT_EQ(variants, (std::set<std::string>{"", "nccl_env=NCCL_ALGO=Ring", "nccl_env=NCCL_ALGO=Ring NCCL_MAX_CTAS=4"}));
}

TEST(Report, DifferentIdentityKeysAreSeparateConfigurationsWithAVariantColumn) {
  TempDir dir;
  RunResults overlap = synthetic_run("lenet", 64, 2, 0, {{"samples_per_s", 100.0}});
  RunResults serial = synthetic_run("lenet", 64, 2, 1, {{"samples_per_s", 80.0}});
  serial.run_id = "serial";
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), overlap);
  write_run(dir.str(), serial);
  const auto out = report_without_plots(dir.str());
  EXPECT_EQ(out.configurations, 2);
  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("variant"), "allreduce_overlap=0");
  EXPECT_EQ(rows[1].at("variant"), "allreduce_overlap=1");
  EXPECT_EQ(rows[0].at("samples_per_s_mean"), "80");
}

// The variant column lists keys that vary within a network: each network on its own dataset is none...
TEST(Report, KeysThatDifferOnlyBetweenNetworksAreNoVariant) {
  TempDir dir;
  for (int n : {1, 2}) {
    write_run(dir.str(), synthetic_run("net_a", 64, n, 0, {{"samples_per_s", 100.0 * n}}));
    RunResults b = synthetic_run("net_b", 64, n, 0, {{"samples_per_s", 50.0 * n}});
    b.summary.data = std::string("fashion-mnist");
    write_run(dir.str(), b);
  }
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 4);
  for (const char* table : {"time", "scaling", "by_gpus"}) {
    const auto rows = read_csv(dir.file(std::string("report/") + table + ".csv"));
    ASSERT_FALSE(rows.empty()) << table;
    EXPECT_EQ(rows[0].count("variant"), 0u) << table;
  }
  EXPECT_EQ(slurp(dir.file("report/report.md")).find("| variant |"), std::string::npos);
}

// ... but two allreduce modes of one network are, and only that network's rows name them.
TEST(Report, KeysThatDifferWithinANetworkAreItsVariant) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("net_a", 64, 1, 0, {{"samples_per_s", 100.0}}));
  write_run(dir.str(), synthetic_run("net_a", 64, 2, 0, {{"samples_per_s", 190.0}}));
  RunResults serial = synthetic_run("net_a", 64, 2, 1, {{"samples_per_s", 170.0}});
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), serial);
  for (int n : {1, 2}) {
    RunResults b = synthetic_run("net_b", 64, n, 0, {{"samples_per_s", 50.0 * n}});
    b.summary.data = std::string("fashion-mnist");
    write_run(dir.str(), b);
  }
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 5u);
  std::map<std::string, std::string> variants;  // "net gpus samples/s" -> variant
  for (const CsvRow& r : rows)
    variants[r.at("net") + " " + r.at("gpus") + " " + r.at("samples_per_s_mean")] = r.at("variant");
  EXPECT_EQ(variants.at("net_a 1 100"), "");  // a single rank has no allreduce mode
  EXPECT_EQ(variants.at("net_a 2 190"), "allreduce_overlap=1");
  EXPECT_EQ(variants.at("net_a 2 170"), "allreduce_overlap=0");
  EXPECT_EQ(variants.at("net_b 1 50"), "");
  EXPECT_EQ(variants.at("net_b 2 100"), "") << "net_b has one mode and one dataset";

  const auto wide = read_csv(dir.file("report/by_gpus.csv"));
  ASSERT_EQ(wide.size(), 3u);
  EXPECT_EQ(wide[0].at("variant"), "allreduce_overlap=0");
  EXPECT_EQ(wide[1].at("variant"), "allreduce_overlap=1");
  EXPECT_EQ(wide[2].at("net"), "net_b");
  EXPECT_EQ(wide[2].at("variant"), "");
}

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
  EXPECT_NE(md.find("| EDP (MJ·s) (8 ranks) |\n"), std::string::npos) << md;
  const size_t line = md.find("| net_bb | 128 | 2/2/2/0 |");
  ASSERT_NE(line, std::string::npos) << md;
  EXPECT_TRUE(md.substr(0, md.find('\n', line)).ends_with(" | — | — | — | — |")) << md;
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

TEST(Report, PartialAndUnrelatedFoldersAreIgnored) {
  TempDir dir;
  const std::string done = write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  fs::copy(done, dir.file("e/killed.partial"), fs::copy_options::recursive);
  fs::create_directories(dir.file("e/notes"));
  const auto out = report_without_plots(dir.str());
  EXPECT_EQ(out.runs, 1);
  // A second report over the same folder does not read its own output as runs.
  EXPECT_EQ(report_without_plots(dir.str()).runs, 1);
}

TEST(Report, BadResultsDirIsAConfigError) {
  TempDir dir;
  EXPECT_THROW(report_without_plots(dir.file("missing")), ConfigError);
  EXPECT_THROW(report_without_plots(dir.str()), ConfigError);  // no runs
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.formats = {"xlsx"};
  EXPECT_THROW(report::write_report(o), ConfigError);
}

TEST(Report, ReportMdLinksEveryTableAndCsvOnlyWritesNoMarkdownTables) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.out_dir = dir.file("out");
  o.plots = false;
  o.formats = {"csv"};
  report::write_report(o);
  const std::string md = slurp(dir.file("out/report.md"));
  for (const char* t : {"time", "energy", "whole", "efficiency", "accuracy", "scaling", "by_gpus", "phases"}) {
    EXPECT_TRUE(fs::exists(dir.file(std::string("out/") + t + ".csv"))) << t;
    EXPECT_FALSE(fs::exists(dir.file(std::string("out/") + t + ".md"))) << t;
    EXPECT_NE(md.find(std::string("(") + t + ".csv)"), std::string::npos) << t;
    EXPECT_NE(md.find(std::string("<a id=\"") + t + "\">"), std::string::npos) << t;
  }
  EXPECT_NE(md.find("--no-plots"), std::string::npos);
}

TEST(Report, MissingPythonFailsAfterWritingTheTables) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.python = dir.file("no-such-python3");
  try {
    report::write_report(o);
    FAIL() << "expected a RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("--no-plots"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir.file("report/time.md")));
  EXPECT_TRUE(fs::exists(dir.file("report/report.md")));
}

}  // namespace
}  // namespace cnnscale
