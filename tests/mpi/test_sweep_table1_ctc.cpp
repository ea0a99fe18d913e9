// experiments/table1_ctc.yaml for real on CPU ranks, with the overrides its header gives, so that the
// GPU run of the same file (the study's CTC conclusion) has a working pipeline: each of the four
// networks that reproduce the study's Table 1 trains a few steps from the file, and one of them on 1, 2
// and 4 ranks, whose by_gpus row then names the fastest rank count, a criterion the conclusion is read
// from. Two sweeps of the file, each selecting with --only, run those six of its twelve points: the
// other networks' 2- and 4-rank runs would add minutes on two cores (a 61M-parameter CaffeNet
// exchanged between four ranks) and prove nothing the 1-rank runs and the one series do not. The
// figures themselves mean nothing here (two cores shared by up to four ranks).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

const char* const kSeries = "resnet_gait_study";  // the fewest multiply-adds of the four

TEST(SweepTable1Ctc, EachNetworkTrainsOnACpuRankAndOneOnOneTwoAndFour) {
  testing::TempDir dir;
  const std::string experiment = std::string(CNNSCALE_TEST_DATA) + "/../../experiments/table1_ctc.yaml";
  for (const std::string& only : std::vector<std::string>{"gpus=1", fmt::format("network={},gpus=2|4", kSeries)}) {
    auto run =
        testing::run_job({CNNSCALE_BIN, "sweep", experiment, "--results", dir.str(), "device=cpu", "iterations=2",
                          "matrix.batch=[4]", "measure=steady", "matrix.repeats=1", "--only", only},
                         "OPENBLAS_NUM_THREADS=1", 900);
    ASSERT_EQ(run.exit_code, 0) << only << "\n" << run.err;
  }

  const fs::path results = fs::path(dir.str()) / "table1_ctc";
  std::set<std::string> points;
  for (const auto& entry : fs::directory_iterator(results)) {
    if (!fs::exists(entry.path() / "summary.json")) continue;
    const auto j = nlohmann::json::parse(testing::slurp((entry.path() / "summary.json").string()));
    const auto& s = j["summary"];
    EXPECT_TRUE(s["samples_per_s"].is_number()) << entry.path();
    points.insert(s["net"].get<std::string>() + "/" + std::to_string(j["ranks"].size()));
  }
  std::set<std::string> expected = {std::string(kSeries) + "/2", std::string(kSeries) + "/4"};
  for (const char* net : {"caffenet", "resnet_gait_study", "cnn2d_gait_study", "resnetim_study"})
    expected.insert(std::string(net) + "/1");
  EXPECT_EQ(points, expected);

  auto rep = testing::run_cnnscale({"report", results.string()});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const std::string md = testing::slurp((results / "report" / "report.md").string());
  for (const char* net : {"resnet_gait_study", "resnetim_study"}) EXPECT_NE(md.find(net), std::string::npos) << net;
  // The by_gpus row of the series holds every count's samples/s and speedup and names the fastest
  // count; a network run on one count has no choice to name.
  const auto rows = testing::read_csv((results / "report" / "by_gpus.csv").string());
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    if (row.at("net") != kSeries) {
      EXPECT_EQ(row.at("fastest_count"), "—") << row.at("net");
      continue;
    }
    EXPECT_EQ(row.at("runs"), "1/1/1");
    for (const char* column : {"samples_per_s_g1_mean", "samples_per_s_g2_mean", "samples_per_s_g4_mean",
                               "speedup_g2_mean", "speedup_g4_mean"})
      EXPECT_GT(std::stod(row.at(column)), 0) << column;
    EXPECT_TRUE(std::set<std::string>({"1", "2", "4"}).count(row.at("fastest_count"))) << row.at("fastest_count");
  }
}

}  // namespace
}  // namespace cnnscale
