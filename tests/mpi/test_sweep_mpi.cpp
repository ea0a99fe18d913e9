// `cnnscale sweep` end to end on CPU ranks (it spawns `cnnscale train` directly or under mpirun):
// a sweep interrupted after part of its runs, with a killed run's leftover .partial folder, is
// resumed and finishes only the remaining runs, leaving the finished ones untouched.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

const std::string kExperiment = std::string(CNNSCALE_TEST_DATA) + "/experiments/tiny_cpu.yaml";

testing::JobResult sweep(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CNNSCALE_BIN, "sweep", kExperiment};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_job(argv, "OPENBLAS_NUM_THREADS=1", 600);
}

TEST(SweepMpi, InterruptedSweepResumesWithTheRemainingRunsOnly) {
  testing::TempDir dir;
  const fs::path exp = fs::path(dir.str()) / "tiny_cpu";
  auto runs = expand_runs(load_experiment(kExperiment, {}, HostInfo{std::nullopt, "", true}));
  ASSERT_EQ(runs.size(), 4u);  // batch 4/8 x 1/2 ranks

  // First part: the batch-4 runs only (one of them on 2 ranks under mpirun).
  auto first = sweep({"--results", dir.str(), "--only", "batch=4"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::map<std::string, fs::file_time_type> finished;
  for (const auto& r : runs) {
    if (r.batch != 4) {
      EXPECT_FALSE(fs::exists(exp / r.id)) << r.id;
      continue;
    }
    ASSERT_TRUE(fs::exists(exp / r.id / "run.h5")) << r.id << "\n" << first.err;
    EXPECT_EQ(run_status(exp.string(), r).state, RunState::Done) << r.id;
    finished[r.id] = fs::last_write_time(exp / r.id / "run.h5");
  }
  // A run killed while writing its results leaves <run-id>.partial/ behind.
  const RunSpec* killed = nullptr;
  for (const auto& r : runs)
    if (r.batch == 8 && r.ranks == 2) killed = &r;
  ASSERT_NE(killed, nullptr);
  fs::create_directories(exp / (killed->id + ".partial"));
  std::ofstream(exp / (killed->id + ".partial") / "run.h5") << "truncated";

  // The same sweep again, whole: only the two remaining runs run.
  auto resumed = sweep({"--results", dir.str()});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("2 ran, 2 already complete, 0 failed"), std::string::npos) << resumed.err;
  for (const auto& r : runs) {
    EXPECT_EQ(run_status(exp.string(), r).state, RunState::Done) << r.id;
    if (finished.count(r.id)) {
      EXPECT_EQ(fs::last_write_time(exp / r.id / "run.h5"), finished[r.id]) << r.id;
    }
  }
  EXPECT_FALSE(fs::exists(exp / (killed->id + ".partial")));

  // Nothing left: a third invocation runs nothing; a changed configuration is refused (exit 2).
  auto again = sweep({"--results", dir.str()});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("0 ran, 4 already complete"), std::string::npos) << again.err;
  auto changed = sweep({"--results", dir.str(), "iterations=4"});
  EXPECT_EQ(changed.exit_code, 2) << changed.err;
  EXPECT_NE(changed.err.find("was run with another configuration (changed: length.iterations)"), std::string::npos)
      << changed.err;
}

}  // namespace
}  // namespace cnnscale
