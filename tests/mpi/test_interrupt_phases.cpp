// A stop signal during the loops that run after training (label mpi): the phase-isolated loops of
// `--measure phases`, the final test and --mfu's matmul peak end within a pass, a batch or a call,
// the run is recorded as interrupted (not complete) and exits 75 for requeue, one process alone and
// a 2-rank job signalled on one rank alike; and during the test between epochs, which then gets no
// accuracy. Each test waits for a log line before it signals, so the signal lands inside.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::kRequeue;
const char* const kLoopsLine = "measure phases: phase-isolated loops after training";

// A short LeNet run whose phase loops would take minutes: each of the three loops is sized to
// last --phase-window 40 s. Uninterrupted it outlasts the test's wait, so only a stop that works
// passes.
std::vector<std::string> phases_args(const testing::TempDir& w) {
  return {"train",
          "--net",
          "lenet",
          "--data",
          "synthetic",
          "--iterations",
          "4",
          "--batch",
          "8",
          "--measure",
          "phases",
          "--phase-window",
          "40",
          "--phase-repeats",
          "1",
          "--min-window",
          "0",
          "--results",
          w.file("results"),
          "--experiment",
          "e",
          "--run-id",
          "stopped"};
}

nlohmann::json summary_of(const testing::TempDir& w) {
  std::ifstream in(fs::path(w.file("results")) / "e" / "stopped" / "summary.json");
  EXPECT_TRUE(in.good()) << "no summary.json in the run folder";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
}

// Signals `target` once the loops have begun, and checks a prompt, interrupted, requeueable end.
void expect_stopped_in_loops(testing::MpiJob& job, pid_t target, int signo, const testing::TempDir& w,
                             const std::string& who) {
  ASSERT_TRUE(job.wait_for_err(kLoopsLine, std::chrono::seconds(120))) << "the phase loops never began:\n"
                                                                       << job.err_so_far();
  ASSERT_EQ(::kill(target, signo), 0);
  const auto signalled = Clock::now();
  testing::MpiResult r = job.wait(std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, kRequeue) << r.err;
  // A pass of LeNet at batch 8 takes milliseconds; the rest is writing the results. 20 s leaves
  // room for a loaded two-core machine and is far below one 40 s loop.
  EXPECT_LT(seconds, 20.0) << r.err;
  EXPECT_NE(r.err.find("stopped by " + who + " during the phase-isolated loops of measure phases after training"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(in the phase-isolated loops of measure phases after training)"), std::string::npos) << r.err;
  const nlohmann::json s = summary_of(w);
  EXPECT_EQ(s.value("status", ""), "interrupted");
}

TEST(InterruptPhases, SigintDuringThePhaseLoopsStopsOneProcess) {
  testing::TempDir w;
  testing::MpiJob job(0, phases_args(w));
  expect_stopped_in_loops(job, job.pid(), SIGINT, w, "SIGINT");
}

// Two ranks, only rank 1 signalled: both leave the loops at the same pass (the full-step loop has
// collectives: a rank going on alone would hang), and rank 0 records the run as interrupted.
TEST(InterruptPhases, SigtermToOneRankStopsTheJobTogether) {
  testing::TempDir w;
  const fs::path pids = w.file("pids");
  fs::create_directories(pids);
  testing::MpiJob job(2, phases_args(w), {"CNNSCALE_PID_DIR=" + pids.string()});
  ASSERT_TRUE(job.wait_for_err(kLoopsLine, std::chrono::seconds(120))) << job.err_so_far();
  pid_t rank1 = 0;
  std::ifstream(pids / "rank-1.pid") >> rank1;
  ASSERT_GT(rank1, 0);
  expect_stopped_in_loops(job, rank1, SIGTERM, w, "a signal on another rank");
}

// The final test after training: a small ResNet's forward passes over Fashion-MNIST's 10,000 test
// images take seconds on the CPU, begun right after the last iteration's loss line; a SIGTERM then
// ends the test within a batch, and the run is interrupted (its accuracy would cover part of the set).
TEST(InterruptPhases, SigtermDuringTheFinalTestStopsIt) {
  testing::TempDir w;
  testing::MpiJob job(0, {"train",
                          "--net",
                          "resnet_fmnist",
                          "--data",
                          "fashion-mnist",
                          "--train-samples",
                          "64",
                          "--iterations",
                          "4",
                          "--batch",
                          "8",
                          "--display",
                          "4",
                          "--min-window",
                          "0",
                          "--results",
                          w.file("results"),
                          "--experiment",
                          "e",
                          "--run-id",
                          "stopped"});
  ASSERT_TRUE(job.wait_for_err("iter 4/4", std::chrono::seconds(120))) << job.err_so_far();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  testing::MpiResult r = job.wait(std::chrono::seconds(60));
  EXPECT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, kRequeue) << r.err;
  EXPECT_NE(r.err.find("stopped by SIGTERM during the final test after training"), std::string::npos) << r.err;
  EXPECT_EQ(summary_of(w).value("status", ""), "interrupted");
}

// --mfu after training: rank 0 alone times square matmuls (1024^3 on the CPU, a tenth of a second
// or so a call), here in windows of 60 s that only a stop that works cuts short; the run is then
// interrupted and exits 75, with no peak and no MFU in the summary.
TEST(InterruptPhases, SigintDuringTheMatmulPeakStopsIt) {
  testing::TempDir w;
  testing::MpiJob job(0, {"train",
                          "--net",
                          "lenet",
                          "--data",
                          "synthetic",
                          "--iterations",
                          "4",
                          "--batch",
                          "8",
                          "--min-window",
                          "0",
                          "--mfu",
                          "--mfu-window",
                          "60",
                          "--results",
                          w.file("results"),
                          "--experiment",
                          "e",
                          "--run-id",
                          "stopped"});
  ASSERT_TRUE(job.wait_for_err("--mfu: measuring the device's matmul peak", std::chrono::seconds(120)))
      << job.err_so_far();
  ASSERT_EQ(::kill(job.pid(), SIGINT), 0);
  testing::MpiResult r = job.wait(std::chrono::seconds(60));  // uninterrupted: 3 windows of 60 s
  EXPECT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, kRequeue) << r.err;
  EXPECT_NE(r.err.find("stopped by SIGINT during the matmul peak measurement of --mfu after training"),
            std::string::npos)
      << r.err;
  const nlohmann::json s = summary_of(w);
  EXPECT_EQ(s.value("status", ""), "interrupted");
  ASSERT_TRUE(s.contains("summary") && s.contains("methods")) << s.dump();
  for (const char* key : {"matmul_peak_tflops", "mfu"}) {
    EXPECT_TRUE(s["summary"].contains(key) && s["summary"][key].is_null()) << key << ": " << s.dump();
    EXPECT_NE(s["methods"].value(key, "").find("a stop signal ended"), std::string::npos) << key << ": " << s.dump();
  }
}

// The test between epochs: 16 training samples at batch 8 make an epoch of 2 iterations, and the
// small ResNet's test over Fashion-MNIST's 10,000 images begins right after iteration 2's loss line.
// A SIGTERM then ends that test within a batch: the epoch gets no accuracy (a part of the test set is
// none) and training stops at that boundary with exit 75. Before, the whole test ran first and the
// epoch's accuracy line was printed.
TEST(InterruptPhases, SigtermDuringAnEpochsTestStopsIt) {
  testing::TempDir w;
  testing::MpiJob job(0, {"train",
                          "--net",
                          "resnet_fmnist",
                          "--data",
                          "fashion-mnist",
                          "--train-samples",
                          "16",
                          "--epochs",
                          "3",
                          "--batch",
                          "8",
                          "--display",
                          "2",
                          "--min-window",
                          "0",
                          "--results",
                          w.file("results"),
                          "--experiment",
                          "e",
                          "--run-id",
                          "stopped"});
  ASSERT_TRUE(job.wait_for_err("iter 2/6", std::chrono::seconds(120))) << job.err_so_far();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  testing::MpiResult r = job.wait(std::chrono::seconds(60));
  EXPECT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, kRequeue) << r.err;
  EXPECT_EQ(r.err.find("epoch 1 (iter 2): test"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopped by SIGTERM at iteration 2 of 6"), std::string::npos) << r.err;
  EXPECT_EQ(summary_of(w).value("status", ""), "interrupted");
}

}  // namespace
}  // namespace cnnscale
