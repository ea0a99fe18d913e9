// A running train (one process, label mpi for its background job): progress.json in the run's
// partial folder is valid JSON at every read and advances as the run trains; a run stopped by a
// signal and resumed keeps one training curve, the interrupted run's display steps up to the resume
// point followed by the resumed run's, and the interrupted run's start time, its resume recorded apart.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/temp_dir.hpp"
#include "io/results_writer.hpp"
#include "mpi/mpi_runner.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::kRequeue;

std::vector<std::string> train_args(const std::string& root, int64_t iterations, const std::string& ckpt = "") {
  std::vector<std::string> a = {"train",      "--net",          "lenet", "--data",    "synthetic",
                                "--iterations", std::to_string(iterations), "--batch", "8",
                                "--display",  "5",              "--results", root,   "--experiment",
                                "e",          "--run-id",       "r",     "--min-window", "0",
                                "--lr",       "0.001"};  // lenet on gaussian noise diverges at 0.01
  if (!ckpt.empty()) a.insert(a.end(), {"--checkpoint-dir", ckpt, "--checkpoint-every", "10"});
  return a;
}

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Progress, FileIsValidJsonAtEveryReadAndAdvancesWhileTraining) {
  testing::TempDir w;
  const std::string root = w.file("results");
  const fs::path file = fs::path(root) / "e" / "r.partial" / "progress.json";
  // Far more iterations than the test waits for: it stops the run once it has seen it advance.
  testing::MpiJob job(0, train_args(root, 1000000));
  std::vector<int64_t> seen;
  int reads = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  while (Clock::now() < deadline && !job.poll() && seen.size() < 4) {
    if (const auto text = read_text(file)) {
      ++reads;
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(*text)) << "read " << reads << ": " << *text;
      EXPECT_EQ(j["format"], "cnnscale-progress-1");
      EXPECT_EQ(j["status"], "running");
      EXPECT_EQ(j["run_id"], "r");
      EXPECT_EQ(j["total"], 1000000);
      for (const char* key : {"iteration", "loss", "lr", "samples_per_s", "watts", "time", "elapsed_s"})
        EXPECT_TRUE(j.contains(key)) << key;
      const int64_t it = j["iteration"].get<int64_t>();
      if (!seen.empty()) {
        EXPECT_GE(it, seen.back()) << "progress went back";
      }
      if (seen.empty() || it > seen.back()) seen.push_back(it);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(seen.size(), 4u) << "the progress file did not advance (" << reads << " reads)";
  EXPECT_FALSE(fs::exists(fs::path(root) / "e" / "r")) << "a running run has no run folder";
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  const testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
  ASSERT_EQ(stopped.exit_code, kRequeue) << stopped.err;
  // The interrupted run's results hold its last record; the partial folder is gone.
  const auto last = read_text(fs::path(root) / "e" / "r" / "progress.json");
  ASSERT_TRUE(last.has_value());
  const nlohmann::json j = nlohmann::json::parse(*last);
  EXPECT_EQ(j["status"], "interrupted");
  EXPECT_GE(j["iteration"].get<int64_t>(), seen.back());
  EXPECT_FALSE(fs::exists(fs::path(root) / "e" / "r.partial"));
}

TEST(Progress, AResumedRunKeepsOneCurve) {
  testing::TempDir w;
  const std::string root = w.file("results"), ckpt = w.file("ckpt");
  constexpr int64_t kIterations = 400;
  testing::MpiJob job(0, train_args(root, kIterations, ckpt));
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && !job.poll() && CheckpointDir(ckpt).list().empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(CheckpointDir(ckpt).list().empty()) << "training never got under way";
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  const testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
  ASSERT_EQ(stopped.exit_code, kRequeue) << stopped.err;
  const fs::path run = fs::path(root) / "e" / "r";
  const RunResults interrupted = read_run_results(run.string());
  ASSERT_EQ(interrupted.status, "interrupted");
  EXPECT_EQ(interrupted.curve.start_iteration, 0);

  std::vector<std::string> again = train_args(root, kIterations, ckpt);
  again.insert(again.end(), {"--resume", "auto"});
  const testing::MpiResult done = testing::run_mpi(0, again, {}, 300);
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const RunResults resumed = read_run_results(run.string());
  EXPECT_EQ(resumed.status, "complete");
  // The run's start is the interrupted run's; the resume is recorded on its own (run.h5, summary.json
  // and summary.csv alike).
  ASSERT_TRUE(interrupted.provenance.has_value() && resumed.provenance.has_value());
  EXPECT_TRUE(interrupted.provenance->resumed_at.empty());
  EXPECT_EQ(resumed.provenance->start_time, interrupted.provenance->start_time);
  ASSERT_EQ(resumed.provenance->resumed_at.size(), 1u);
  EXPECT_GE(resumed.provenance->resumed_at[0], interrupted.provenance->end_time);  // ISO 8601 sorts as time
  const nlohmann::json summary = nlohmann::json::parse(*read_text(run / "summary.json"));
  EXPECT_EQ(summary["provenance"]["start_time"], interrupted.provenance->start_time);
  EXPECT_EQ(summary["provenance"]["resumed_at"], nlohmann::json(resumed.provenance->resumed_at));
  const std::string csv = *read_text(run / "summary.csv");
  EXPECT_NE(csv.find(interrupted.provenance->start_time + "," + resumed.provenance->end_time), std::string::npos)
      << csv;
  EXPECT_NE(csv.find(resumed.provenance->resumed_at[0]), std::string::npos) << csv;
  // Every display step of the whole run once, in order: 5, 10, ..., 400.
  const TrainingCurve& c = resumed.curve;
  EXPECT_EQ(c.start_iteration, 0);
  std::vector<int64_t> expected;
  for (int64_t i = 5; i <= kIterations; i += 5) expected.push_back(i);
  EXPECT_EQ(c.iteration, expected);
  // The part before the resume point is the interrupted run's own.
  for (size_t i = 0; i < interrupted.curve.iteration.size() && i < c.iteration.size(); ++i) {
    if (interrupted.curve.iteration[i] > c.iteration.back()) break;
    if (c.iteration[i] != interrupted.curve.iteration[i]) break;
    EXPECT_EQ(c.loss[i], interrupted.curve.loss[i]) << i;
    EXPECT_EQ(c.lr[i], interrupted.curve.lr[i]) << i;
  }
}

}  // namespace
}  // namespace cnnscale
