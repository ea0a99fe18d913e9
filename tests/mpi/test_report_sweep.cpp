// The report of a small real CPU sweep (issues 5, 12): tiny `cnnscale train` runs on 1 rank (plain)
// and 2 ranks (mpirun) written with --results, then `cnnscale report`: every table and PNG with data
// exists, every number in the CSV tables equals the mean of the runs' summary.json values, the phase
// parts of real multi-rank steps add up to the measured total, and the runs' counts are integers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_phases.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CsvRow;

struct SweepRun {
  std::string id;
  int ranks;
  std::vector<std::string> args;
};

std::vector<std::string> train_args(const std::string& root, const SweepRun& run) {
  std::vector<std::string> a = {"train",
                                "--device",
                                "cpu",
                                "--timing-warmup",
                                "2",
                                "--results",
                                root,
                                "--experiment",
                                "e",
                                "--run-id",
                                run.id,
                                "--tag",
                                "repeat=" + run.id.substr(run.id.size() - 1)};
  a.insert(a.end(), run.args.begin(), run.args.end());
  return a;
}

double value(const json& summary, const std::string& key) {
  if (!summary.contains(key) || !summary[key].is_number()) return NAN;
  return summary[key].get<double>();
}

// Mean over the runs' non-null values of key × scale; NaN when every one is null.
double expected_mean(const std::vector<json>& runs, const std::string& key, double scale) {
  double sum = 0;
  int n = 0;
  for (const json& s : runs)
    if (double v = value(s, key); !std::isnan(v)) sum += v * scale, ++n;
  return n ? sum / n : NAN;
}

void expect_column(const CsvRow& row, const std::string& column, double expected, const std::string& where) {
  const std::string& got = row.at(column + "_mean");
  if (std::isnan(expected)) {
    EXPECT_EQ(got, "") << where << " " << column;
  } else {
    ASSERT_FALSE(got.empty()) << where << " " << column << " expected " << expected;
    EXPECT_NEAR(std::stod(got), expected, 1e-9 * std::max(1.0, std::abs(expected))) << where << " " << column;
  }
}

TEST(ReportSweep, TablesAndFiguresOfARealCpuSweepEqualTheRunsSummaries) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib, numpy, h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py (scripts/setup.sh installs them)";
  testing::TempDir dir;
  const std::vector<std::string> synthetic = {"--net", "lenet", "--data", "synthetic", "--iterations", "6"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const std::vector<SweepRun> runs = {{"lenet-b16-n1-r0", 1, with(synthetic, {"--batch", "16"})},
                                      {"lenet-b16-n1-r1", 1, with(synthetic, {"--batch", "16"})},
                                      {"lenet-b32-n1-r0", 1, with(synthetic, {"--batch", "32"})},
                                      {"lenet-b16-n2-r0", 2, with(synthetic, {"--batch", "16"})},
                                      {"lenet-b32-n2-r0", 2, with(synthetic, {"--batch", "32"})},
                                      {"fmnist-b32-n1-r0",
                                       1,
                                       // 250 samples: a last partial batch of 26, dropped by the trainer.
                                       {"--net", "lenet", "--data", "fashion-mnist", "--train-samples", "250",
                                        "--test-samples", "256", "--epochs", "1", "--batch", "32"}}};
  for (const SweepRun& run : runs) {
    if (run.ranks == 1) {
      auto r = testing::run_cnnscale(train_args(dir.str(), run));
      ASSERT_EQ(r.exit_code, 0) << run.id << ": " << r.err;
    } else {
      auto r = testing::run_mpi(run.ranks, train_args(dir.str(), run), {}, 300);
      ASSERT_EQ(r.exit_code, 0) << run.id << ": " << r.err;
    }
  }

  auto rep = testing::run_cnnscale({"report", dir.str()});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const fs::path out = fs::path(dir.str()) / "report";
  const std::string md = testing::slurp((out / "report.md").string());
  // Drawn, or (no data: CPU runs have no power samples, energy only where RAPL is readable) left out
  // with a line instead of an image.
  for (const std::string& name : report::kFigureNames) {
    const bool drawn = fs::exists(out / name);
    EXPECT_EQ(drawn, md.find("](" + name + ")") != std::string::npos) << name;
    EXPECT_NE(drawn, md.find("- `" + name + "` not drawn: ") != std::string::npos) << name;
    if (drawn) {
      EXPECT_GT(fs::file_size(out / name), 100u) << name;
    }
    if (name != "power_trace.png" && name != "joules_per_batch.png") {
      EXPECT_TRUE(drawn) << name;
    }
  }
  EXPECT_FALSE(fs::exists(out / "power_trace.png"));
  EXPECT_NE(md.find("- `power_trace.png` not drawn: no power samples"), std::string::npos) << md;
  EXPECT_NE(md.find("| network | ranks | threads/rank | batch |"), std::string::npos) << md;
  EXPECT_EQ(md.find("GPU"), std::string::npos) << "CPU runs are counted in ranks";

  // Expected values straight from summary.json, grouped as the report groups (repeats together).
  std::map<std::string, std::vector<json>> by_config;  // "net gpus batch data" -> summaries
  for (const SweepRun& run : runs) {
    json j = json::parse(testing::slurp((fs::path(dir.str()) / "e" / run.id / "summary.json").string()));
    const json& s = j["summary"];
    for (const char* count : {"world_size", "global_batch", "iterations", "iterations_per_epoch", "whole_epochs",
                              "whole_iterations", "threads_per_rank"})
      EXPECT_TRUE(s[count].is_number_integer()) << run.id << " " << count << " = " << s[count];
    EXPECT_EQ(s["world_size"].get<int64_t>(), run.ranks) << run.id;
    // whole_iterations counts a last partial batch; where that differs from the run's epoch, the
    // method says so.
    const int64_t per_epoch = s["iterations_per_epoch"].get<int64_t>();
    if (s["whole_iterations"].get<int64_t>() != per_epoch * s["whole_epochs"].get<int64_t>()) {
      EXPECT_NE(j["methods"]["whole_iterations"].get<std::string>().find(
                    fmt::format("iterations_per_epoch {} is the run's own epoch", per_epoch)),
                std::string::npos)
          << run.id << ": " << j["methods"]["whole_iterations"];
    }
    if (run.id.starts_with("fmnist")) {
      EXPECT_EQ(per_epoch, 250 / 32);
      EXPECT_EQ(s["whole_iterations"].get<int64_t>(), (250 + 31) / 32);
    }
    by_config[fmt::format("{} {} {} {}", s["net"].get<std::string>(), value(s, "world_size"), value(s, "global_batch"),
                          s["data"].get<std::string>())]
        .push_back(s);
  }
  const std::map<std::string, std::vector<std::pair<std::string, std::pair<std::string, double>>>> columns = {
      {"time",
       {{"seconds_per_batch", {"seconds_per_batch", 1}},
        {"samples_per_s", {"samples_per_s", 1}},
        {"whole_training_seconds", {"whole_training_seconds", 1}},
        {"forward_seconds_per_batch", {"time_forward_s", 1}},
        {"backward_seconds_per_batch", {"time_backward_s", 1}}}},
      {"energy", {{"joules_per_batch", {"joules_per_batch", 1}}, {"watts", {"watts", 1}}}},
      {"whole",
       {{"whole_ks", {"whole_training_seconds", 1e-3}},
        {"whole_mj", {"whole_training_joules", 1e-6}},
        {"edp_mj_ks", {"edp_training_js", 1e-9}}}},
      {"efficiency", {{"gflops", {"gflops", 1}}, {"gflops_per_watt", {"gflops_per_watt", 1}}}},
      {"accuracy",
       {{"top1_percent", {"test_top1", 100}}, {"top5_percent", {"test_top5", 100}}, {"final_loss", {"final_loss", 1}}}},
      {"phases", {{"total_ms", {"time_total_s", 1e3}}}}};
  for (const auto& [table, cols] : columns) {
    EXPECT_TRUE(fs::exists(out / (table + ".md"))) << table;
    EXPECT_NE(md.find("<a id=\"" + table + "\">"), std::string::npos) << table;
    const auto rows = testing::read_csv((out / (table + ".csv")).string());
    ASSERT_EQ(rows.size(), by_config.size()) << table;
    for (const CsvRow& row : rows) {
      const std::string data = row.at("variant").substr(row.at("variant").find('=') + 1);
      const std::string key =
          fmt::format("{} {} {} {}", row.at("net"), std::stod(row.at("gpus")), std::stod(row.at("batch")), data);
      ASSERT_TRUE(by_config.count(key)) << table << ": unexpected row " << key;
      const auto& group = by_config.at(key);
      EXPECT_EQ(row.at("runs"), std::to_string(group.size())) << key;
      for (const auto& [column, source] : cols)
        expect_column(row, column, expected_mean(group, source.first, source.second), table + " " + key);
    }
  }
  // The phase parts are the slowest rank's: each at most the slowest-of-all-ranks figure of its
  // phase in summary.json, and together exactly the measured total.
  int multi_rank = 0;
  for (const CsvRow& row : testing::read_csv((out / "phases.csv").string())) {
    const std::string data = row.at("variant").substr(row.at("variant").find('=') + 1);
    const std::string key =
        fmt::format("{} {} {} {}", row.at("net"), std::stod(row.at("gpus")), std::stod(row.at("batch")), data);
    multi_rank += row.at("gpus") == "2" ? 1 : 0;
    double sum = 0;
    for (const char* part : report::kStepParts) {
      const double v = std::stod(row.at(std::string(part) + "_ms_mean"));
      EXPECT_GE(v, 0) << key << " " << part;
      sum += v;
      if (std::string(part) != "other") {
        EXPECT_LE(v, expected_mean(by_config.at(key), std::string("time_") + part + "_s", 1e3) * (1 + 1e-9) + 1e-12)
            << key << " " << part;
      }
    }
    const double total = std::stod(row.at("total_ms_mean"));
    EXPECT_NEAR(sum, total, 1e-9 * total) << key;
  }
  EXPECT_EQ(multi_rank, 2);
  EXPECT_EQ(testing::slurp((out / "phases.md").string()).find("scaled to the total"), std::string::npos)
      << "phase marks on one CPU rank are consecutive: nothing to scale";

  // Strong scaling: 2 ranks against 1 at the same batch.
  const auto scaling = testing::read_csv((out / "scaling.csv").string());
  for (int batch : {16, 32}) {
    auto synthetic_runs = [&](int gpus) {  // the data key reads e.g. "synthetic(gaussian)"
      for (const auto& [key, group] : by_config)
        if (key.starts_with(fmt::format("lenet {} {} synthetic", gpus, batch))) return group;
      ADD_FAILURE() << "no synthetic lenet run on " << gpus << " rank(s), batch " << batch;
      return std::vector<json>{};
    };
    const double one = expected_mean(synthetic_runs(1), "samples_per_s", 1);
    const double two = expected_mean(synthetic_runs(2), "samples_per_s", 1);
    for (const CsvRow& row : scaling)
      if (row.at("gpus") == "2" && row.at("batch") == std::to_string(batch)) {
        expect_column(row, "speedup", two / one, "scaling");
        expect_column(row, "efficiency", two / one / 2, "scaling");
      }
  }
  // The fashion-mnist run has accuracy; the synthetic ones show "—".
  EXPECT_NE(testing::slurp((out / "accuracy.md").string()).find("—"), std::string::npos);
}

}  // namespace
}  // namespace cnnscale
