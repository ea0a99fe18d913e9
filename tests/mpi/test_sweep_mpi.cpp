// `cnnscale sweep` end to end on CPU ranks (it spawns `cnnscale train` directly or under mpirun):
// a sweep interrupted after part of its runs, with a killed run's leftover .partial folder, is
// resumed and finishes only the remaining runs, leaving the finished ones untouched.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

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

TEST(SweepMpi, FailedRunsAreReportedAndTheSweepGoesOnThenExitsNonZero) {
  testing::TempDir dir;
  // train refuses an unknown flag: every run fails, each one is reported, the sweep ends with exit 1.
  auto r = sweep({"--results", dir.str(), "extra_args=[--no-such-flag]"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("0 ran, 0 already complete, 4 failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cnnscale: error: 4 of 4 run(s) failed"), std::string::npos) << r.err;
  size_t failed_lines = 0;
  for (size_t p = r.err.find(": FAILED (exit "); p != std::string::npos; p = r.err.find(": FAILED (exit ", p + 1))
    ++failed_lines;
  EXPECT_EQ(failed_lines, 4u) << r.err;
}

// SIGTERM to the sweep while a run trains: the run is ended, the sweep stops (exit 1, "interrupted"),
// and the same command later finishes the rest without touching what was complete.
TEST(SweepMpi, KilledSweepContinuesWhereItStopped) {
  testing::TempDir dir;
  const fs::path exp = fs::path(dir.str()) / "tiny_cpu";
  const std::vector<std::string> longer = {"iterations=1500"};  // long enough to be caught running
  auto runs = expand_runs(load_experiment(kExperiment, longer, HostInfo{std::nullopt, "", true}));
  ASSERT_EQ(runs.size(), 4u);
  const std::string err_file = dir.file("sweep.err");
  const std::string cmd = "cd " + testing::shell_quote(CNNSCALE_SOURCE_DIR) +
                          " && exec env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          "OPENBLAS_NUM_THREADS=1 " +
                          testing::shell_quote(CNNSCALE_BIN) + " sweep " + testing::shell_quote(kExperiment) +
                          " --results " + testing::shell_quote(dir.str()) + " iterations=1500 2>" +
                          testing::shell_quote(err_file) + " >/dev/null </dev/null";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the first run to finish, then stop the sweep (only the sweep: it passes the signal on).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!fs::exists(exp / runs[0].id / "run.h5") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(exp / runs[0].id / "run.h5"));
  const auto first_time = fs::last_write_time(exp / runs[0].id / "run.h5");
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::kill(-pid, SIGKILL);  // nothing of it may outlive the test
  std::ifstream in(err_file);
  const std::string err((std::istreambuf_iterator<char>(in)), {});
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_NE(err.find("sweep interrupted by signal 15"), std::string::npos) << err;
  size_t done = 0;
  for (const auto& r : runs) done += run_status(exp.string(), r).state == RunState::Done;
  EXPECT_GE(done, 1u);
  EXPECT_LT(done, 4u) << err;

  auto resumed = sweep({"--results", dir.str(), "iterations=1500"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find(fmt::format("{} ran, {} already complete, 0 failed", 4 - done, done)), std::string::npos)
      << resumed.err;
  for (const auto& r : runs) EXPECT_EQ(run_status(exp.string(), r).state, RunState::Done) << r.id;
  EXPECT_EQ(fs::last_write_time(exp / runs[0].id / "run.h5"), first_time);
}

}  // namespace
}  // namespace cnnscale
