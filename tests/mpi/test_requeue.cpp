// Launch paths and requeue (label mpi): a 2-rank training started through launch/mpirun.sh or
// `cnnscale sweep`, stopped by SIGTERM to the launcher or to mpirun itself once it trains, ends
// with 75 and a checkpoint the same command resumes from. mpirun told to stop reports 1 whatever
// its ranks return: the launchers read the requeue record rank 0 leaves (io/requeue_record.hpp).
// A real failure through the same paths is not turned into 75.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/sweep.hpp"
#include "mpi/mpi_runner.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::MpiJob;
using testing::kRequeue;
constexpr int kTrainIterations = 8000;

// mpirun told to stop (SIGTERM, SIGINT) passes the signal on to its ranks after
// odls_base_sigkill_timeout seconds (default 1) and kills them as long again later: the ranks'
// stop (a step, the checkpoint, the results of this small net, each an fsync'd write) must fit in
// that second period. These tests check the exit code given to a job that did stop in time, not
// how fast a stop is, so the period is sized for a CI machine whose cores are taken by other jobs
// (a write may wait seconds for the disk there): 5 s. Its cost: 5 s per stop, and the longer
// run below, which the resumed jobs finish.
const std::string kGrace = "OMPI_MCA_odls_base_sigkill_timeout=5";

// 8000 iterations of dist_convnet at batch 32 (a few hundred a second on two loaded cores) with a
// checkpoint every 10. A stop reaches the ranks 5 s after a checkpoint is seen, some 1,500
// iterations on; the sweep test stops its run twice that way before letting it end, so 8000 leave
// it well short of its end at the second stop, also on a machine twice as fast.
std::vector<std::string> requeue_args(const testing::TempDir& w, const std::vector<std::string>& more = {}) {
  std::vector<std::string> a = {"train",
                                "--net",
                                std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml",
                                "--data",
                                "synthetic",
                                "--batch",
                                "32",
                                "--iterations",
                                std::to_string(kTrainIterations),
                                "--display",
                                "10",
                                "--checkpoint-every",
                                "10",
                                "--checkpoint-dir",
                                w.file("ckpt"),
                                "--results",
                                w.file("results"),
                                "--experiment",
                                "e",
                                "--run-id",
                                "r",
                                "--min-window",
                                "0",
                                "--json"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// `launcher` <args> (default launch/mpirun.sh 2), from the source tree, with this build's binary
// and private temporary files (TMPDIR: the launcher's requeue record folder must not outlive it).
MpiJob launch(const testing::TempDir& w, const std::vector<std::string>& args, std::vector<std::string> env = {},
              std::vector<std::string> launcher = {"launch/mpirun.sh", "2"}) {
  std::vector<std::string> argv = std::move(launcher);
  argv.insert(argv.end(), args.begin(), args.end());
  env.insert(env.end(), {std::string("CNNSCALE_BIN=") + CNNSCALE_BIN, "TMPDIR=" + w.file("tmp")});
  fs::create_directories(w.file("tmp"));
  return MpiJob(MpiJob::Command{argv}, env);
}

// Polls until `dir` holds a checkpoint other than `before` (training is under way); false when the
// job ends first or 2 minutes pass.
bool wait_for_new_checkpoint(MpiJob& job, const std::string& dir, const std::string& before = "") {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && !job.poll()) {
    if (CheckpointDir(dir).latest().value_or(before) != before) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// The one child process of `parent` (mpirun under the launch script).
pid_t only_child(pid_t parent) {
  std::ifstream in(fmt::format("/proc/{}/task/{}/children", parent, parent));
  pid_t child = 0, other = 0;
  in >> child >> other;
  EXPECT_EQ(other, 0) << "more than one child of " << parent;
  return child;
}

// The job's processes as a scheduler's cgroup holds them: `root` and every descendant (mpirun
// and the ranks, which Open MPI starts in process groups of their own), children of any thread.
std::vector<pid_t> job_processes(pid_t root) {
  std::vector<pid_t> all = {root};
  for (size_t i = 0; i < all.size(); ++i) {
    std::error_code ec;
    for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", all[i]), ec)) {
      std::ifstream in(task.path() / "children");
      for (pid_t child; in >> child;) all.push_back(child);
    }
  }
  return all;
}

nlohmann::json summary_json(const fs::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  return nlohmann::json::parse(in);
}

// The stopped job's state: exit 75, results marked interrupted (the ranks stopped by one of
// `signals`), a checkpoint at the stop; then the same launch with --resume auto continues from it
// to the end.
void expect_stopped_then_resumed(const testing::MpiResult& stopped, const testing::TempDir& w,
                                 const std::vector<std::string>& signals = {"SIGTERM"}) {
  EXPECT_FALSE(stopped.timed_out);
  ASSERT_EQ(stopped.exit_code, kRequeue) << stopped.err;
  bool named = false;
  for (const auto& s : signals) named = named || stopped.err.find("stopped by " + s + " at iteration ") != std::string::npos;
  EXPECT_TRUE(named) << stopped.err;
  EXPECT_EQ(summary_json(w.file("results/e/r"))["status"], "interrupted");
  const int64_t at = nlohmann::json::parse(stopped.out)["iterations"].get<int64_t>();
  EXPECT_LT(at, kTrainIterations);
  EXPECT_EQ(CheckpointDir(w.file("ckpt")).latest(), CheckpointDir(w.file("ckpt")).path_for(at));
  EXPECT_TRUE(fs::is_empty(w.file("tmp"))) << "the launcher's record folder is removed";

  MpiJob again = launch(w, requeue_args(w, {"--resume", "auto"}));
  const testing::MpiResult done = again.wait(std::chrono::seconds(300));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(nlohmann::json::parse(done.out)["start_iteration"], at);
  EXPECT_EQ(summary_json(w.file("results/e/r"))["status"], "complete");
}

TEST(Requeue, LaunchScriptStoppedBySigtermEndsWith75) {
  testing::TempDir w;
  MpiJob job = launch(w, requeue_args(w), {kGrace});
  ASSERT_TRUE(wait_for_new_checkpoint(job, w.file("ckpt"))) << "training never got under way\n" << job.err_so_far();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);  // the launch script, which passes it to mpirun
  expect_stopped_then_resumed(job.wait(std::chrono::seconds(120)), w);
}

// Slurm's --signal=B:USR1 reaches the batch script; the launch script passes it on to mpirun as
// SIGTERM, since Open MPI's mpirun does not pass SIGUSR1 on everywhere.
TEST(Requeue, LaunchScriptPassesUsr1OnAsSigterm) {
  testing::TempDir w;
  MpiJob job = launch(w, requeue_args(w), {kGrace});
  ASSERT_TRUE(wait_for_new_checkpoint(job, w.file("ckpt"))) << job.err_so_far();
  ASSERT_EQ(::kill(job.pid(), SIGUSR1), 0);
  expect_stopped_then_resumed(job.wait(std::chrono::seconds(120)), w);
}

// A scheduler at its time limit (or scancel) signals every process of the job at once: the launch
// script, mpirun and the ranks all get SIGTERM. The ranks stop at a step boundary and write their
// checkpoint and results within mpirun's grace period (launch/common.sh: 10 s unless set; not set
// here: the launchers' own). The launch script passes no SIGTERM on inside a batch job: mpirun
// has its own, and a second one would make it kill the ranks at once (as it did).
TEST(Requeue, WholeJobSignalledAtOnceEndsWith75) {
  testing::TempDir w;
  // A batch job as Slurm's or PBS's (whose variables would send mpirun to the batch system here).
  MpiJob job = launch(w, requeue_args(w), {"CNNSCALE_PASS_TERM=0"});
  ASSERT_TRUE(wait_for_new_checkpoint(job, w.file("ckpt"))) << job.err_so_far();
  const std::vector<pid_t> all = job_processes(job.pid());
  ASSERT_GE(all.size(), 4u) << "the script, mpirun and two ranks";
  for (pid_t p : all) ::kill(p, SIGTERM);  // one may have ended meanwhile: no check
  const testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
  EXPECT_EQ(stopped.err.find("second stop signal"), std::string::npos) << stopped.err;
  expect_stopped_then_resumed(stopped, w);
}

TEST(Requeue, MpirunStoppedBySigtermEndsWith75) {
  testing::TempDir w;
  MpiJob job = launch(w, requeue_args(w), {kGrace});
  ASSERT_TRUE(wait_for_new_checkpoint(job, w.file("ckpt"))) << job.err_so_far();
  const pid_t mpirun = only_child(job.pid());
  ASSERT_GT(mpirun, 0);
  ASSERT_EQ(::kill(mpirun, SIGTERM), 0);  // as scancel or a time limit signals every process
  const testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
  // mpirun itself said 1; the launcher read the ranks' record.
  EXPECT_NE(stopped.err.find("launch/mpirun.sh: mpirun exited with 1 after every rank stopped for requeue (stopped "
                             "for requeue: 2 rank(s), rank 0 on host "),
            std::string::npos)
      << stopped.err;
  expect_stopped_then_resumed(stopped, w);
}

// The batch scripts run their launcher the same way: launch/slurm.sbatch with mpirun inside an
// allocation (as CNNSCALE_LAUNCHER=mpirun; the allocation's variables made up, without a job id,
// which would send mpirun to Slurm), launch/pbs.sh over a node file of this host.
TEST(Requeue, BatchScriptsStoppedBySigtermEndWith75) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::vector<std::pair<std::string, std::vector<std::string>>> scripts = {
      {"launch/slurm.sbatch", {"SLURM_NTASKS=2", "SLURM_JOB_NUM_NODES=1", "CNNSCALE_LAUNCHER=mpirun"}},
      {"launch/pbs.sh", {"PBS_NODEFILE=node-file"}}};
  for (const auto& [script, env] : scripts) {
    SCOPED_TRACE(script);
    testing::TempDir w;
    std::vector<std::string> vars = {kGrace};
    for (const auto& v : env) vars.push_back(v == "PBS_NODEFILE=node-file" ? "PBS_NODEFILE=" + w.file("nodes") : v);
    std::ofstream(w.file("nodes")) << host << "\n" << host << "\n";
    MpiJob job = launch(w, requeue_args(w), vars, {"bash", script});
    ASSERT_TRUE(wait_for_new_checkpoint(job, w.file("ckpt"))) << job.err_so_far();
    ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
    const testing::MpiResult stopped = job.wait(std::chrono::seconds(120));
    EXPECT_EQ(stopped.exit_code, kRequeue) << stopped.err;
    EXPECT_NE(stopped.err.find(script + ": mpirun exited with 1 after every rank stopped for requeue"),
              std::string::npos)
        << stopped.err;
    EXPECT_EQ(summary_json(w.file("results/e/r"))["status"], "interrupted");
    EXPECT_TRUE(CheckpointDir(w.file("ckpt")).latest().has_value());
    EXPECT_TRUE(fs::is_empty(w.file("tmp"))) << "the record folder and host file are removed";
  }
}

// A rank that dies (kill -9) while training, alone or after a stop was asked for, is a failure:
// mpirun's code, not 75, and no record left to mistake for one.
TEST(Requeue, FailuresThroughTheLauncherAreNot75) {
  testing::TempDir w;
  fs::create_directories(w.file("pids"));
  MpiJob job = launch(w, requeue_args(w), {"CNNSCALE_PID_DIR=" + w.file("pids")});
  ASSERT_TRUE(wait_for_new_checkpoint(job, w.file("ckpt"))) << job.err_so_far();
  pid_t rank1 = 0;
  std::ifstream(w.file("pids/rank-1.pid")) >> rank1;
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  const testing::MpiResult killed = job.wait(std::chrono::seconds(120));
  EXPECT_FALSE(killed.timed_out);
  EXPECT_NE(killed.exit_code, 0) << killed.err;
  EXPECT_NE(killed.exit_code, kRequeue) << killed.err;
  EXPECT_EQ(killed.err.find("stopped for requeue"), std::string::npos) << killed.err;
  EXPECT_TRUE(fs::is_empty(w.file("tmp")));

  // A usage error of every rank: exit 2 through the launcher. The first rank's MPI_Abort has mpirun
  // stop the other as it stops a job, waiting the grace period twice (launch/common.sh: 10 s unless
  // set) for a rank with nothing to save: 2 s.
  MpiJob bad = launch(w, {"train", "--net", "lenet", "--data", "synthetic", "--batch", "0"},
                      {"OMPI_MCA_odls_base_sigkill_timeout=2"});
  const testing::MpiResult refused = bad.wait(std::chrono::seconds(120));
  EXPECT_NE(refused.exit_code, 0) << refused.err;
  EXPECT_NE(refused.exit_code, kRequeue) << refused.err;
}

// One 2-rank run of the sweep, checkpointed every 10 iterations and resumed with --resume auto.
struct SweepSetup {
  std::string yaml, results, log;
  RunSpec run;
  explicit SweepSetup(const testing::TempDir& w) {
    yaml = w.file("rq.yaml");
    results = w.file("results");
    std::ofstream(yaml) << "name: rq\ndevice: cpu\ndataset: synthetic\nseed: 3\niterations: " << kTrainIterations
                        << "\nextra_args: [--display, '10', --checkpoint-every, '10', --checkpoint-dir, '"
                        << w.file("ckpt") << "', --resume, auto, --min-window, '0']\n"
                        << "matrix: {network: ['" << CNNSCALE_TEST_DATA << "/dist_convnet.yaml'], batch: [32], "
                        << "gpus: [2], repeats: 1}\n";
    run = expand_runs(load_experiment(yaml, {}, HostInfo{std::nullopt, "", true}))[0];
    log = results + "/rq/logs/" + run.id + ".log";
  }
  MpiJob start(const testing::TempDir& w) const {
    fs::create_directories(w.file("tmp"));
    return MpiJob(MpiJob::Command{{CNNSCALE_BIN, "sweep", yaml, "--results", results}},
                  {kGrace, "TMPDIR=" + w.file("tmp")});
  }
};

// SIGTERM to the sweep (passed on to mpirun), then to a sweep's mpirun alone (the sweep learns
// of it from the run): the sweep ends with 75 each time, its run resumes from its checkpoint, and
// the third sweep completes it.
TEST(Requeue, SweepOfMpirunRunsEndsWith75AndResumes) {
  testing::TempDir w;
  const SweepSetup s(w);
  MpiJob first = s.start(w);
  ASSERT_TRUE(wait_for_new_checkpoint(first, w.file("ckpt"))) << first.err_so_far();
  ASSERT_EQ(::kill(first.pid(), SIGTERM), 0);
  const testing::MpiResult a = first.wait(std::chrono::seconds(120));
  ASSERT_EQ(a.exit_code, kRequeue) << a.err;
  EXPECT_NE(a.err.find(s.run.id + ": stopped for requeue (signal 15, exit "), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("sweep: stopped for requeue after 0 run(s) (signal 15)"), std::string::npos) << a.err;
  EXPECT_EQ(a.err.find("FAILED"), std::string::npos) << a.err;
  EXPECT_EQ(run_status(s.results + "/rq", s.run).state, RunState::Partial);
  ASSERT_FALSE(CheckpointDir(w.file("ckpt")).list().empty());
  const std::string first_stop = CheckpointDir(w.file("ckpt")).latest().value_or("");

  MpiJob second = s.start(w);
  ASSERT_TRUE(wait_for_new_checkpoint(second, w.file("ckpt"), first_stop)) << second.err_so_far();
  const pid_t mpirun = only_child(second.pid());
  ASSERT_GT(mpirun, 0);
  ASSERT_EQ(::kill(mpirun, SIGTERM), 0);
  const testing::MpiResult b = second.wait(std::chrono::seconds(120));
  if (run_status(s.results + "/rq", s.run).state == RunState::Done) {
    // mpirun can act on a signal only after its ranks have ended (seen on a loaded 2-core
    // machine): the ranks then trained to the end, mpirun said 1, and the whole, verified result
    // is the run's, said so, not a failure.
    EXPECT_EQ(b.exit_code, 0) << b.err;
    EXPECT_NE(b.err.find(s.run.id + ": done in "), std::string::npos) << b.err;
    EXPECT_NE(b.err.find("(its launcher exited 1 after the result was complete)"), std::string::npos) << b.err;
    return;
  }
  ASSERT_EQ(b.exit_code, kRequeue) << b.err << "\nthe run's log:\n" << testing::slurp(s.log);
  // mpirun said 1; the record says the ranks stopped for requeue.
  EXPECT_NE(b.err.find(s.run.id + ": stopped for requeue (a signal to its ranks, exit 1: stopped for requeue: 2 "
                                  "rank(s)"),
            std::string::npos)
      << b.err;
  EXPECT_NE(testing::slurp(s.log).find("resumed from " + first_stop), std::string::npos) << testing::slurp(s.log);
  EXPECT_TRUE(fs::is_empty(w.file("tmp")));

  MpiJob third = s.start(w);
  const testing::MpiResult c = third.wait(std::chrono::seconds(300));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("1 ran, 0 already complete, 0 failed"), std::string::npos) << c.err;
  EXPECT_EQ(run_status(s.results + "/rq", s.run).state, RunState::Done);
  EXPECT_NE(testing::slurp(s.log).find("resumed from "), std::string::npos);
}

}  // namespace
}  // namespace cnnscale
