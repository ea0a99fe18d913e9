// The sweep's run loop against a fake `train`: skip done runs, redo partial and damaged ones, go on
// after a failure, quote the run's own error line, and leave a run locked by another process alone.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/sweep_test_util.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/log_tail.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using namespace sweep_test;
using testing::TempDir;

const char* kFakeTrain = R"(#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --results) root=$2; shift ;; --experiment) exp=$2; shift ;; --run-id) id=$2; shift ;;
    --batch) batch=$2; shift ;; --tag) case "$2" in config_hash=*) hash=${2#config_hash=} ;; esac; shift ;;
  esac
  shift
done
[ "$batch" = 8 ] && { echo "fake train: batch 8 fails"; exit 3; }
[ -e "$root/$exp/$id.partial" ] && { echo "partial folder still there"; exit 4; }
[ -e "$root/$exp/$id" ] && { echo "fake train: $root/$exp/$id: results of this run id exist already"; exit 5; }
mkdir -p "$root/$exp/$id" && cp "$FAKE_TRAIN_H5" "$root/$exp/$id/run.h5"
printf '{"status": "complete", "summary": {"tag.config_hash": "%s"}}' "$hash" > "$root/$exp/$id/summary.json"
)";

// The fake train's executable in `dir`, with the run.h5 it copies; $FAKE_TRAIN_H5 set while it lives.
class FakeTrain {
 public:
  explicit FakeTrain(const TempDir& dir, const char* script = kFakeTrain)
      : path_(dir.file("fake")), h5_(dir.file("template/e/r/run.h5")), env_("FAKE_TRAIN_H5", h5_.c_str()) {
    write_script(path_, script);
    RunResults res = testing::synthetic_run("lenet", 4, 1, 1, {});
    res.run_id.assign(1, 'r');  // not = "r": GCC 12 warns falsely there (-Wrestrict, bug 105329)
    ResultsWriteOptions o;
    o.root = dir.file("template");
    write_run_results(res, o);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_, h5_;
  ScopedEnv env_;
};

// What a runner test sweeps: load(overrides), its runs, its folder ROOT/s (ROOT = dir/res) and the
// launch environment that runs `fake` in place of train.
struct FakeSweep {
  Experiment e;
  std::vector<RunSpec> runs;
  fs::path exp;
  LaunchEnv env;
};
FakeSweep fake_sweep(const TempDir& dir, const FakeTrain& fake, const std::vector<std::string>& overrides = {}) {
  FakeSweep s{load(overrides), {}, fs::path(dir.file("res")) / "s", {}};
  s.runs = expand_runs(s.e);
  s.env.self = fake.path();
  return s;
}

TEST(SweepRunner, SkipsDoneRedoesPartialAndGoesOnAfterAFailure) {
  TempDir dir;
  FakeTrain fake(dir);
  auto [e, runs, exp, env] = fake_sweep(dir, fake, {"matrix.batch=[4,8,12]"});
  ASSERT_EQ(runs.size(), 3u);
  fake_done(exp, runs[0], runs[0].config_hash);
  const auto done_time = fs::last_write_time(exp / runs[0].id / "summary.json");
  fs::create_directories(exp / (runs[2].id + ".partial") / "junk");
  SweepResult r = run_sweep(e, runs, dir.file("res"), env);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(r.ran, 1);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.failed_ids, std::vector<std::string>{runs[1].id});
  EXPECT_EQ(fs::last_write_time(exp / runs[0].id / "summary.json"), done_time);  // never rewritten
  EXPECT_FALSE(fs::exists(exp / (runs[2].id + ".partial")));
  EXPECT_EQ(run_status(exp.string(), runs[2]).state, RunState::Done);
  EXPECT_NE(slurp(exp / "logs" / (runs[1].id + ".log")).find("batch 8 fails"), std::string::npos);
}

// A run counted done is sealed; a later sweep finds one damaged, says so, moves it aside and redoes it.
TEST(SweepRunner, DamagedRunIsMovedAsideAndRedoneWithAWarning) {
  TempDir dir;
  FakeTrain fake(dir);
  auto [e, runs, exp, env] = fake_sweep(dir, fake, {"matrix.batch=[4,12]"});
  ASSERT_EQ(runs.size(), 2u);
  fake_done(exp, runs[1], runs[1].config_hash);  // an older sweep's run: no marker
  ::testing::internal::CaptureStderr();
  SweepResult first = run_sweep(e, runs, dir.file("res"), env);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(first.ran, 1) << err;
  EXPECT_EQ(first.skipped, 1) << err;
  EXPECT_NE(err.find("already complete (verified; done marker written), skipped"), std::string::npos) << err;
  for (const auto& r : runs) {
    EXPECT_TRUE(fs::exists(exp / r.id / "done.json")) << r.id;
    EXPECT_EQ(check_done_marker((exp / r.id).string()), "") << r.id;
  }

  // run.h5 cut short after the fact (a partial copy, a full disk during a sync).
  const fs::path h5 = exp / runs[0].id / "run.h5";
  const auto size = fs::file_size(h5);
  fs::resize_file(h5, size - 1000);
  ::testing::internal::CaptureStderr();
  SweepResult second = run_sweep(e, runs, dir.file("res"), env);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(second.ran, 1) << err;
  EXPECT_EQ(second.skipped, 1) << err;
  EXPECT_EQ(second.failed, 0) << err;
  const fs::path aside = exp / (runs[0].id + ".corrupt-1.partial");
  EXPECT_NE(err.find(runs[0].id + ": warning: the run's folder is damaged (run.h5 has " + std::to_string(size - 1000) +
                     " bytes, done.json recorded " + std::to_string(size) + " (truncated)); moved to " +
                     aside.string() + ", running it again"),
            std::string::npos)
      << err;
  EXPECT_EQ(fs::file_size(aside / "run.h5"), size - 1000);  // kept as it was, for a look
  EXPECT_EQ(fs::file_size(h5), size);                       // written again
  EXPECT_EQ(run_status(exp.string(), runs[0]).state, RunState::Done);
  EXPECT_EQ(check_done_marker((exp / runs[0].id).string()), "");
}

// What a failed run's line quotes: our error, not the launcher's banner after it.
const char* kMpirunLog = R"(iteration 1/3 loss 2.30
cnnscale: error: rank 1 (host node7): data: cannot open /data/fmnist/train-images-idx3-ubyte: No such file
--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
with errorcode 1.

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[52311,1],1]
  Exit code:    1
--------------------------------------------------------------------------
)";

TEST(SweepLog, ErrorLineIsOursNotTheLaunchersBanner) {
  TempDir dir;
  write(dir.file("mpirun.log"), kMpirunLog);
  EXPECT_EQ(error_line(dir.file("mpirun.log")),
            "cnnscale: error: rank 1 (host node7): data: cannot open /data/fmnist/train-images-idx3-ubyte: No such "
            "file");
  // Without our format (a crash, another program): the last line outside the banner blocks.
  write(dir.file("crash.log"), "loading\nSegmentation fault (core dumped)\n" +
                                   std::string(kMpirunLog).substr(std::string(kMpirunLog).find("-----")) +
                                   "srun: error: node7: task 1: Exited with exit code 1\n");
  EXPECT_EQ(error_line(dir.file("crash.log")), "Segmentation fault (core dumped)");
  write(dir.file("plain.log"), "one\ntwo\n\n");
  EXPECT_EQ(error_line(dir.file("plain.log")), "two");
  // The launcher refused to start (mpirun as root): its banner's headline, never a rule line.
  write(dir.file("banner.log"), "-----------------\nmpirun has detected an attempt to run as root.\n\nRunning "
                                "as root is *strongly* discouraged\n-----------------\n");
  EXPECT_EQ(error_line(dir.file("banner.log")), "mpirun has detected an attempt to run as root.");
}

TEST(SweepRunner, FailedRunQuotesItsErrorNotTheMpirunBanner) {
  TempDir dir;
  write(dir.file("banner.log"), kMpirunLog);
  FakeTrain fake(dir, ("#!/bin/sh\ncat " + dir.file("banner.log") + "\nexit 1\n").c_str());
  auto [e, runs, exp, env] = fake_sweep(dir, fake, {"matrix.batch=[4]"});
  ::testing::internal::CaptureStderr();
  SweepResult r = run_sweep(e, runs, dir.file("res"), env);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.failed, 1) << err;
  const std::string failed = [&] {
    for (const auto& l : lines_of(err))
      if (l.find(": FAILED (exit 1, log ") != std::string::npos) return l;
    return std::string();
  }();
  EXPECT_NE(failed.find("): cnnscale: error: rank 1 (host node7): data: cannot open"), std::string::npos) << err;
}

// A run another process holds (an array task) is left to it: skipped, counted busy, named.
TEST(SweepRunner, RunLockedByAnotherProcessIsLeftToIt) {
  TempDir dir;
  FakeTrain fake(dir);
  auto [e, runs, exp, env] = fake_sweep(dir, fake);
  ASSERT_EQ(runs.size(), 2u);
  fs::create_directories(exp);
  std::string holder;
  auto held = FileLock::try_lock(run_lock_path(exp, runs[0].id), &holder);
  ASSERT_TRUE(held);
  EXPECT_EQ(slurp(run_lock_path(exp, runs[0].id)), fmt::format(
                                                       "host {} pid {}\n",
                                                       [] {
                                                         char h[256] = "";
                                                         ::gethostname(h, sizeof h - 1);
                                                         return std::string(h);
                                                       }(),
                                                       ::getpid()));
  EXPECT_FALSE(FileLock::try_lock(run_lock_path(exp, runs[0].id), &holder));  // even from this process
  EXPECT_EQ(holder, slurp(run_lock_path(exp, runs[0].id)).substr(0, holder.size()));
  ::testing::internal::CaptureStderr();
  SweepResult r = run_sweep(e, {runs[0]}, dir.file("res"), env);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.busy, 1) << err;
  EXPECT_EQ(r.ran, 0) << err;
  ASSERT_EQ(r.busy_lines.size(), 1u);
  EXPECT_NE(r.busy_lines[0].find("run " + runs[0].id + " is being run by " + holder), std::string::npos)
      << r.busy_lines[0];
  EXPECT_FALSE(fs::exists(fs::path(exp) / runs[0].id));
  held.reset();
  EXPECT_EQ(run_sweep(e, {runs[0]}, dir.file("res"), env).ran, 1);
}

// ---- the CLI -------------------------------------------------------------------------------------

}  // namespace
}  // namespace cnnscale
