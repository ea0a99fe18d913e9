// An inference experiment swept end to end on CPU ranks: each run is one `cnnscale infer` (under
// mpirun for two ranks) whose result file the sweep counts done, so a second sweep runs nothing;
// a damaged file is moved aside and its run redone; `report` tables every run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

const std::string kInferExperiment = std::string(CNNSCALE_TEST_DATA) + "/experiments/tiny_infer.yaml";

TEST(SweepInferMpi, RunsEachInferOnceAndReportsThem) {
  testing::TempDir dir;
  const fs::path exp = fs::path(dir.str()) / "tiny_infer";
  const auto runs = expand_runs(load_experiment(kInferExperiment, {}, HostInfo{std::nullopt, "", true}));
  ASSERT_EQ(runs.size(), 2u);
  const std::string env = "OPENBLAS_NUM_THREADS=1";
  const std::vector<std::string> sweep = {CNNSCALE_BIN, "sweep", kInferExperiment, "--results", dir.str()};
  auto first = testing::run_job(sweep, env, 600);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("2 ran, 0 already complete, 0 failed"), std::string::npos) << first.err;
  for (const RunSpec& r : runs) {
    SCOPED_TRACE(r.id);
    std::ifstream in(infer_run_file(exp.string(), r));
    ASSERT_TRUE(in);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["run_id"], r.id);
    EXPECT_EQ(j["world_size"], r.ranks);
    ASSERT_EQ(j["batches"].size(), 2u);
    EXPECT_EQ(j["batches"][1]["batch"], 2);
    if (r.ranks == 2) {
      EXPECT_EQ(j["batches"][0]["ranks"].size(), 2u);
    }
  }

  auto again = testing::run_job(sweep, env, 600);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("0 ran, 2 already complete, 0 failed"), std::string::npos) << again.err;

  // A torn result is not a finished run: kept aside, and the run made again.
  const std::string torn = infer_run_file(exp.string(), runs[0]);
  fs::resize_file(torn, 20);
  auto redo = testing::run_job(sweep, env, 600);
  ASSERT_EQ(redo.exit_code, 0) << redo.err;
  EXPECT_NE(redo.err.find("1 ran, 1 already complete, 0 failed"), std::string::npos) << redo.err;
  EXPECT_EQ(fs::file_size(torn + ".corrupt-1.partial"), 20u);
  EXPECT_EQ(run_status(exp.string(), runs[0]).state, RunState::Done);

  auto rep = testing::run_job({CNNSCALE_BIN, "report", exp.string(), "--no-plots"}, "", 120);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  std::ifstream md(exp / "report" / "inference.md");
  ASSERT_TRUE(md) << rep.out << rep.err;
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  // One row per batch size and rank count: the 2-rank job's images/s are its ranks' sum.
  for (const char* row : {"| lenet | cpu | fp32 | 1 | 1 |", "| lenet | cpu | fp32 | 2 | 1 |",
                          "| lenet | cpu | fp32 | 1 | 2 |", "| lenet | cpu | fp32 | 2 | 2 |"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  const RunSpec& job = runs[0].ranks == 2 ? runs[0] : runs[1];
  const RunSpec& alone = runs[0].ranks == 2 ? runs[1] : runs[0];
  std::ifstream in(infer_run_file(exp.string(), job)), in1(infer_run_file(exp.string(), alone));
  const nlohmann::json j = nlohmann::json::parse(in), j1 = nlohmann::json::parse(in1);
  bool found = false;
  for (const auto& row : testing::read_csv((exp / "report" / "inference.csv").string())) {
    if (row.at("batch") != "1") continue;
    if (row.at("ranks") == "1") {
      EXPECT_EQ(row.at("vs_ranks_x_one_rank"), "");  // nothing to set a single rank against
      continue;
    }
    found = true;
    const double job_ips = j["batches"][0]["job_images_per_s"].get<double>();
    EXPECT_DOUBLE_EQ(std::stod(row.at("images_per_s_mean")), job_ips);
    // The job's rate against twice the 1-rank job's (printed to 3 decimals).
    EXPECT_NEAR(std::stod(row.at("vs_ranks_x_one_rank")),
                job_ips / (2 * j1["batches"][0]["images_per_s"].get<double>()), 5e-4);
  }
  EXPECT_TRUE(found) << "no 2-rank batch-1 row in inference.csv";
}

}  // namespace
}  // namespace cnnscale
