// The report of a small real CPU sweep (issue 5): tiny `cnnscale train` runs on 1 rank (plain) and
// 2 ranks (mpirun) written with --results, then `cnnscale report`: every table and PNG exists and
// every number in the CSV tables equals the mean of the runs' summary.json values.
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
                                       {"--net", "lenet", "--data", "fashion-mnist", "--train-samples", "256",
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
  for (const std::string& name : report::kFigureNames) {
    EXPECT_TRUE(fs::file_size(out / name) > 100) << name;
    EXPECT_NE(md.find("](" + name + ")"), std::string::npos) << name;
  }

  // Expected values straight from summary.json, grouped as the report groups (repeats together).
  std::map<std::string, std::vector<json>> by_config;  // "net gpus batch data" -> summaries
  for (const SweepRun& run : runs) {
    json j = json::parse(testing::slurp((fs::path(dir.str()) / "e" / run.id / "summary.json").string()));
    const json& s = j["summary"];
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
      {"phases",
       {{"data_ms", {"time_data_s", 1e3}},
        {"forward_ms", {"time_forward_s", 1e3}},
        {"backward_ms", {"time_backward_s", 1e3}},
        {"allreduce_ms", {"time_allreduce_s", 1e3}},
        {"update_ms", {"time_update_s", 1e3}},
        {"total_ms", {"time_total_s", 1e3}}}}};
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
