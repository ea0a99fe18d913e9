// Stop signals (label mpi): SIGTERM, SIGUSR1 or SIGINT mid-run stop training at a step boundary
// on every rank together, leave a checkpoint and a results folder marked interrupted, and exit 75
// (requeue); the same command with --resume auto then finishes the run in the same results
// folder, bit for bit the weights of an uninterrupted run on the CPU. A second signal aborts.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/temp_dir.hpp"
#include "mpi/mpi_runner.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::kRequeue;
constexpr int kIterations = 300;

// 300 iterations of dist_convnet at batch 32, a checkpoint every 10: the signal comes once the
// first checkpoint exists, with hundreds of steps still to go on any machine.
std::vector<std::string> train_args(const testing::TempDir& w, const std::string& name,
                                    const std::string& run_id = "") {
  std::vector<std::string> a = {"train",
                                "--net",
                                std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml",
                                "--data",
                                "fashion-mnist",
                                "--train-samples",
                                "1280",
                                "--test-samples",
                                "100",
                                "--batch",
                                "32",
                                "--iterations",
                                std::to_string(kIterations),
                                "--display",
                                "10",
                                "--checkpoint-every",
                                "10",
                                "--checkpoint-dir",
                                w.file(name + "_ckpt"),
                                "--results",
                                w.file(name + "_results"),
                                "--experiment",
                                "e",
                                "--min-window",
                                "0",
                                "--json"};
  if (!run_id.empty()) a.insert(a.end(), {"--run-id", run_id});
  return a;
}

// Waits until the run's first checkpoint exists (training is well under way); false on timeout or
// if the run ended first.
bool wait_for_checkpoint(testing::MpiJob& job, const std::string& ckpt_dir) {
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && !job.poll()) {
    if (!CheckpointDir(ckpt_dir).list().empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

double max_abs_diff(const CheckpointContents& a, const CheckpointContents& b) {
  double worst = 0;
  auto compare = [&](const std::vector<CheckpointArray>& x, const std::vector<CheckpointArray>& y) {
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      EXPECT_EQ(x[i].values.size(), y[i].values.size());
      for (size_t k = 0; k < std::min(x[i].values.size(), y[i].values.size()); ++k)
        worst = std::max(worst, std::fabs(static_cast<double>(x[i].values[k]) - y[i].values[k]));
    }
  };
  compare(a.weights, b.weights);
  compare(a.history, b.history);
  return worst;
}

nlohmann::json summary_of(const fs::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  return nlohmann::json::parse(in);
}

// The one run folder under <results>/e/ (a resumed run must not leave a second one).
fs::path only_run(const std::string& results) {
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(fs::path(results) / "e")) runs.push_back(e.path());
  EXPECT_EQ(runs.size(), 1u);
  return runs.empty() ? fs::path() : runs[0];
}

// The interrupted run's state, then its resumption to the end, compared with `reference` (the
// final checkpoint of the same run uninterrupted).
void expect_interrupted_then_resumed(const testing::MpiResult& stopped, const testing::TempDir& w,
                                     const std::string& name, const char* signal_name,
                                     const std::function<testing::MpiResult()>& resume,
                                     const CheckpointContents& reference) {
  EXPECT_FALSE(stopped.timed_out);
  ASSERT_EQ(stopped.exit_code, kRequeue) << stopped.err;
  EXPECT_NE(stopped.err.find(std::string("stopped by ") + signal_name + " at iteration "), std::string::npos)
      << stopped.err;
  const fs::path run = only_run(w.file(name + "_results"));
  const nlohmann::json s = summary_of(run);
  EXPECT_EQ(s["status"], "interrupted");
  const auto stopped_at = nlohmann::json::parse(stopped.out)["iterations"].get<int64_t>();
  EXPECT_GE(stopped_at, 10);  // the signal may land while checkpoint 10 is written: stop right there
  EXPECT_LT(stopped_at, kIterations);
  EXPECT_EQ(CheckpointDir(w.file(name + "_ckpt")).latest(), CheckpointDir(w.file(name + "_ckpt")).path_for(stopped_at));

  testing::MpiResult done = resume();
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const nlohmann::json j = nlohmann::json::parse(done.out);
  EXPECT_EQ(j["start_iteration"], stopped_at);
  EXPECT_EQ(only_run(w.file(name + "_results")), run) << "the resumed run writes the interrupted run's folder";
  EXPECT_EQ(summary_of(run)["status"], "complete");
  const CheckpointContents final = read_checkpoint(CheckpointDir(w.file(name + "_ckpt")).path_for(kIterations));
  EXPECT_EQ(max_abs_diff(final, reference), 0.0) << "resumed training differs from the uninterrupted one";
}

TEST(Interrupt, SignalsStopOneProcessWithCheckpointAndResumeFinishesIt) {
  testing::TempDir w;
  testing::MpiResult ref = testing::run_mpi(0, train_args(w, "ref"), {}, 300);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const CheckpointContents reference = read_checkpoint(CheckpointDir(w.file("ref_ckpt")).path_for(kIterations));
  const std::pair<int, const char*> signals[] = {{SIGTERM, "SIGTERM"}, {SIGUSR1, "SIGUSR1"}, {SIGINT, "SIGINT"}};
  for (const auto& [signo, name] : signals) {
    SCOPED_TRACE(name);
    const std::string tag = std::string("s") + std::to_string(signo);
    testing::MpiJob job(0, train_args(w, tag, "fixed-id"));
    ASSERT_TRUE(wait_for_checkpoint(job, w.file(tag + "_ckpt"))) << "training never got under way";
    ASSERT_EQ(::kill(job.pid(), signo), 0);
    testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
    std::vector<std::string> again = train_args(w, tag, "fixed-id");
    again.insert(again.end(), {"--resume", "auto"});
    expect_interrupted_then_resumed(
        stopped, w, tag, name, [&] { return testing::run_mpi(0, again, {}, 300); }, reference);
  }
}

// Two ranks, only rank 1 signalled (as a launcher that forwards to one process would): both stop
// at the same boundary, rank 0 writes the checkpoint and the results.
TEST(Interrupt, SignalToOneRankStopsTheJobTogetherAndResumeFinishesIt) {
  testing::TempDir w;
  testing::MpiResult ref = testing::run_mpi(2, train_args(w, "ref"), {}, 300);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const CheckpointContents reference = read_checkpoint(CheckpointDir(w.file("ref_ckpt")).path_for(kIterations));

  const fs::path pids = w.file("pids");
  fs::create_directories(pids);
  testing::MpiJob job(2, train_args(w, "run"), {"CNNSCALE_PID_DIR=" + pids.string()});
  ASSERT_TRUE(wait_for_checkpoint(job, w.file("run_ckpt"))) << "training never got under way";
  pid_t rank1 = 0;
  std::ifstream(pids / "rank-1.pid") >> rank1;
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(::kill(rank1, SIGUSR1), 0);
  testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
  std::vector<std::string> again = train_args(w, "run");  // default run id: taken from the checkpoint
  again.insert(again.end(), {"--resume", "auto"});
  expect_interrupted_then_resumed(
      stopped, w, "run", "a signal on another rank", [&] { return testing::run_mpi(2, again, {}, 300); }, reference);
}

// timeout(1) delivers its SIGTERM twice, to the child and then to the child's process group: the
// same signal repeated at once is one request, answered by the graceful stop.
TEST(Interrupt, TheSameSignalTwiceAtOnceIsOneRequest) {
  testing::TempDir w;
  testing::MpiJob job(0, train_args(w, "d"));
  ASSERT_TRUE(wait_for_checkpoint(job, w.file("d_ckpt")));
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  // 5 ms apart: the first is handled before the second arrives (two signals at once may merge).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  testing::MpiResult r = job.wait(std::chrono::seconds(120));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, kRequeue) << r.err;
  EXPECT_EQ(r.err.find("second stop signal"), std::string::npos) << r.err;
  EXPECT_EQ(summary_of(only_run(w.file("d_results")))["status"], "interrupted");
}

// Slurm's --signal=USR1 is an early warning and may come beside the scheduler's SIGTERM: a
// SIGUSR1 after a stop is no second signal, and the job stops as after one.
TEST(Interrupt, Usr1AfterAStopIsNoSecondSignal) {
  testing::TempDir w;
  testing::MpiJob job(0, train_args(w, "u"));
  ASSERT_TRUE(wait_for_checkpoint(job, w.file("u_ckpt")));
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // as above: two signals at once may merge
  ASSERT_EQ(::kill(job.pid(), SIGUSR1), 0);
  testing::MpiResult r = job.wait(std::chrono::seconds(120));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, kRequeue) << r.err;
  EXPECT_EQ(r.err.find("second stop signal"), std::string::npos) << r.err;
  EXPECT_EQ(summary_of(only_run(w.file("u_results")))["status"], "interrupted");
}

TEST(Interrupt, SecondSignalAbortsAtOnce) {
  testing::TempDir w;
  testing::MpiJob job(0, train_args(w, "x"));
  ASSERT_TRUE(wait_for_checkpoint(job, w.file("x_ckpt")));
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(job.pid(), SIGINT), 0);
  testing::MpiResult r = job.wait(std::chrono::seconds(60));
  // Whichever of the two the kernel delivers second ends the process by its default action.
  EXPECT_TRUE(r.exit_code == 128 + SIGINT || r.exit_code == 128 + SIGTERM) << r.exit_code << "\n" << r.err;
  EXPECT_NE(r.err.find("cnnscale: second stop signal: aborting now"), std::string::npos) << r.err;
  const std::string exp_dir = w.file("x_results") + "/e";
  std::string left;  // what the abort left, to say in a failure
  if (fs::exists(exp_dir))
    for (const auto& entry : fs::recursive_directory_iterator(exp_dir)) left += " " + entry.path().string();
  EXPECT_TRUE(left.empty()) << "left behind:" << left;
}

}  // namespace
}  // namespace cnnscale
