// experiments/table1_ctc.yaml for real on CPU ranks, with the overrides its header gives: the four
// networks that reproduce the study's Table 1 train a few steps on 1, 2 and 4 ranks and report their
// time and energy, so that the GPU run of the same file (the study's CTC conclusion) has a working
// pipeline. The figures themselves mean nothing here (two cores shared by up to four ranks).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

TEST(SweepTable1Ctc, TheFourNetworksTrainOnOneTwoAndFourCpuRanks) {
  testing::TempDir dir;
  const std::string experiment = std::string(CNNSCALE_TEST_DATA) + "/../../experiments/table1_ctc.yaml";
  auto run = testing::run_job({CNNSCALE_BIN, "sweep", experiment, "--results", dir.str(), "device=cpu", "iterations=2",
                               "matrix.batch=[4]", "measure=steady", "matrix.repeats=1"},
                              "OPENBLAS_NUM_THREADS=1", 900);
  ASSERT_EQ(run.exit_code, 0) << run.err;

  std::set<std::string> points;
  for (const auto& entry : fs::directory_iterator(fs::path(dir.str()) / "table1_ctc")) {
    if (!fs::exists(entry.path() / "summary.json")) continue;
    const auto j = nlohmann::json::parse(testing::slurp((entry.path() / "summary.json").string()));
    const auto& s = j["summary"];
    EXPECT_TRUE(s["samples_per_s"].is_number()) << entry.path();
    points.insert(s["net"].get<std::string>() + "/" + std::to_string(j["ranks"].size()));
  }
  std::set<std::string> expected;
  for (const char* net : {"caffenet", "resnet_gait_study", "cnn2d_gait_study", "resnetim_study"})
    for (int ranks : {1, 2, 4}) expected.insert(std::string(net) + "/" + std::to_string(ranks));
  EXPECT_EQ(points, expected);

  auto rep = testing::run_cnnscale({"report", (fs::path(dir.str()) / "table1_ctc").string()});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const std::string md = testing::slurp((fs::path(dir.str()) / "table1_ctc" / "report" / "report.md").string());
  for (const char* net : {"resnet_gait_study", "resnetim_study"}) EXPECT_NE(md.find(net), std::string::npos) << net;
}

}  // namespace
}  // namespace cnnscale
