// Faults (label mpi): a rank killed with SIGKILL, or stopped with SIGSTOP (a hang), mid-run in a
// 3-rank job must end the whole job within 30 s with a non-zero exit and a line naming the rank
// (killed: mpirun names it; hung: the peers' watchdog line names them, exit 3), and no rank may be
// left running. Ranks write their pid to CNNSCALE_PID_DIR/rank-<R>.pid once their first step is
// done: a signal after every file exists lands mid-training, not in the collective set-up before.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "mpi/mpi_runner.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Long enough that the job is still training when the test strikes (a few minutes at least).
std::vector<std::string> endless_args(const std::string& watchdog) {
  return {"train",     "--net",        std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml",
          "--data",    "synthetic",    "--batch",
          "24",        "--iterations", "100000000",
          "--display", "100000000",    "--watchdog-timeout",
          watchdog};
}

// Waits for every rank's pid file; 0 on timeout or if the job ended first.
pid_t wait_for_pid(testing::MpiJob& job, const fs::path& dir, int ranks, int wanted) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && !job.poll()) {
    bool all = true;
    for (int r = 0; r < ranks; ++r) all &= fs::exists(dir / ("rank-" + std::to_string(r) + ".pid"));
    if (all) {
      std::ifstream in(dir / ("rank-" + std::to_string(wanted) + ".pid"));
      pid_t pid = 0;
      in >> pid;
      return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

// A process that still runs: not gone, and not a zombie waiting to be reaped (ranks are children
// of mpirun; once it exits, whoever inherits them reaps them in its own time).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// Every rank but `except` is gone within a few seconds of mpirun's exit.
void expect_ranks_gone(const std::vector<pid_t>& pids, pid_t except = 0) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (pid_t p : pids) {
    if (p == except) continue;
    while (running(p) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(running(p)) << "rank pid " << p << " survived the job";
  }
}

struct PidDir {
  fs::path path;
  explicit PidDir(const std::string& name) {
    path = fs::temp_directory_path() / ("cnnscale_pids_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~PidDir() { fs::remove_all(path); }
  std::vector<pid_t> pids(int ranks) const {
    std::vector<pid_t> out;
    for (int r = 0; r < ranks; ++r) {
      std::ifstream in(path / ("rank-" + std::to_string(r) + ".pid"));
      pid_t p = 0;
      if (in >> p) out.push_back(p);
    }
    return out;
  }
};

TEST(Faults, KilledRankEndsTheJobAndIsNamed) {
  PidDir dir("kill");
  testing::MpiJob job(3, endless_args("300"), {"CNNSCALE_PID_DIR=" + dir.path.string()});
  const pid_t victim = wait_for_pid(job, dir.path, 3, 1);
  ASSERT_GT(victim, 0) << "the job never started training";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed_at = Clock::now();
  testing::MpiResult r = job.wait(std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  std::printf("job ended %.2f s after SIGKILL of rank 1, exit %d\n", seconds, r.exit_code);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_LT(seconds, 30.0);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 1 with PID [0-9]+ on node .* exited on signal 9"))) << r.err;
  EXPECT_EQ(dir.pids(3).size(), 3u);
  expect_ranks_gone(dir.pids(3));
}

TEST(Faults, HungRankTriggersTheWatchdog) {
  PidDir dir("hang");
  testing::MpiJob job(3, endless_args("5"), {"CNNSCALE_PID_DIR=" + dir.path.string()});
  const pid_t victim = wait_for_pid(job, dir.path, 3, 1);
  ASSERT_GT(victim, 0) << "the job never started training";
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const auto stopped_at = Clock::now();
  testing::MpiResult r = job.wait(std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  ::kill(victim, SIGKILL);  // in case the launcher left it stopped
  std::printf("job ended %.2f s after SIGSTOP of rank 1, exit %d\n", seconds, r.exit_code);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_LT(seconds, 30.0);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // A peer of the stopped rank reports, after the 5 s timeout (counted from the start of its wait,
  // which may have begun a moment before the stop).
  EXPECT_GE(seconds, 4.5);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("cnnscale: error: rank [02] \\(host [^)]+\\): [a-z ()]+ at iteration [0-9]+ did not complete "
                        "within 5 s; a peer rank failed or hung")))
      << r.err;
  EXPECT_EQ(dir.pids(3).size(), 3u);
  expect_ranks_gone(dir.pids(3), victim);
}

// A rank that stops arriving (CNNSCALE_INJECT_HANG_AT=1:5: rank 1 blocks for good as it begins
// iteration 5, outside any collective) is named by its peers' watchdog line, not only the waiting
// rank: each rank publishes how many collectives it started (parallel/progress_board.hpp), and rank
// 1's count stays behind those of ranks 0 and 2, which go on into iteration 5's allreduces.
TEST(Faults, WatchdogNamesTheRankThatDidNotArrive) {
  testing::MpiJob job(3, endless_args("5"), {"CNNSCALE_INJECT_HANG_AT=1:5"});
  testing::MpiResult r = job.wait(std::chrono::seconds(90));
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 1: CNNSCALE_INJECT_HANG_AT: hanging at iteration 5"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("cnnscale: error: rank [02] \\(host [^)]+\\): [a-z ()]+ at iteration 5 did not complete "
                        "within 5 s; a peer rank failed or hung: rank 1 did not arrive \\(collectives it started: "
                        "[0-9]+, this rank: [0-9]+\\)")))
      << r.err;
  // Only the hung rank is named: the other waiting rank arrived.
  EXPECT_FALSE(std::regex_search(r.err, std::regex("rank [02] did not arrive"))) << r.err;
}

// Where a put needs the target's MPI progress (Open MPI over TCP without true RMA), a rank that
// publishes its count while a peer is stuck outside MPI waits in the board's flush. That wait is
// marked on the watchdog like any collective's: the job ends with 3 and the stuck rank is named.
// Shared memory applies puts without the peer, so the test hook CNNSCALE_INJECT_BOARD_STALL_AT=0:5
// makes rank 0's publication at iteration 5 wait for good, as such a flush would for rank 1.
TEST(Faults, WatchdogCoversThePublishingOfProgress) {
  testing::MpiJob job(2, endless_args("5"), {"CNNSCALE_INJECT_HANG_AT=1:5", "CNNSCALE_INJECT_BOARD_STALL_AT=0:5"});
  testing::MpiResult r = job.wait(std::chrono::seconds(90));
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 0: CNNSCALE_INJECT_BOARD_STALL_AT: publishing stalls at iteration 5"), std::string::npos)
      << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("cnnscale: error: rank 0 \\(host [^)]+\\): progress board at iteration 5 did not complete "
                        "within 5 s; a peer rank failed or hung: rank 1 did not arrive \\(collectives it started: "
                        "[0-9]+, this rank: [0-9]+\\)")))
      << r.err;
}

}  // namespace
}  // namespace cnnscale
