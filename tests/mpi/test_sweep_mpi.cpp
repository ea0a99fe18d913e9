// `cnnscale sweep` end to end on CPU ranks (it spawns `cnnscale train` directly or under mpirun):
// a sweep interrupted after part of its runs, with a killed run's leftover .partial folder, is
// resumed and finishes only the remaining runs, leaving the finished ones untouched; finished runs
// are sealed with done markers and a damaged one is redone; failed runs quote train's error; the study's
// 1/2/4/8-rank matrix is planned, launched (8 ranks oversubscribed on CI's 2 cores) and reported.
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

const std::string kExperiment = std::string(CNNSCALE_TEST_DATA) + "/experiments/tiny_cpu.yaml";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  return lines;
}

testing::JobResult sweep(const std::vector<std::string>& args, const std::string& env = "OPENBLAS_NUM_THREADS=1") {
  std::vector<std::string> argv = {CNNSCALE_BIN, "sweep", kExperiment};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_job(argv, env, 600);
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
  // train refuses --display 0 as it parses (the sweep checks extra_args' flags, not their values):
  // every run fails, each one is reported, the sweep ends with exit 1.
  // A 2-rank run that fails ends in MPI_Abort, after which mpirun stops the other rank as it stops
  // a job: SIGTERM after odls_base_sigkill_timeout seconds, SIGKILL as long again later (the sweep's
  // 10 unless set: 18 s of waiting per failed run). 2, as the stop test below has it.
  auto r = sweep({"--results", dir.str(), "extra_args=[--display=0]"},
                 "OMPI_MCA_odls_base_sigkill_timeout=2 OPENBLAS_NUM_THREADS=1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("0 ran, 0 already complete, 4 failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cnnscale: error: 4 of 4 run(s) failed"), std::string::npos) << r.err;
  size_t failed_lines = 0;
  for (size_t p = r.err.find(": FAILED (exit "); p != std::string::npos; p = r.err.find(": FAILED (exit ", p + 1))
    ++failed_lines;
  EXPECT_EQ(failed_lines, 4u) << r.err;
  // Each quotes train's own error, also the 2-rank runs whose logs end in mpirun's banner.
  for (const auto& line : lines_of(r.err)) {
    if (line.find(": FAILED (exit ") == std::string::npos) continue;
    EXPECT_NE(line.find("): cnnscale: error: "), std::string::npos) << line;
    EXPECT_NE(line.find("--display: must be at least 1, got 0"), std::string::npos) << line;
  }
}

// Real runs: the results root comes from $CNNSCALE_RESULTS, every finished run is sealed with its
// done marker, and a run whose run.h5 was cut short afterwards is moved aside and run again (the
// report then counts the new run only).
TEST(SweepMpi, FinishedRunsAreSealedAndADamagedOneIsRedone) {
  testing::TempDir dir;
  const fs::path exp = fs::path(dir.str()) / "tiny_cpu";
  auto runs = expand_runs(load_experiment(kExperiment, {}, HostInfo{std::nullopt, "", true}));
  const std::string env = "OPENBLAS_NUM_THREADS=1 CNNSCALE_RESULTS=" + testing::shell_quote(dir.str());
  auto first = testing::run_job({CNNSCALE_BIN, "sweep", kExperiment, "--only", "batch=4"}, env, 600);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::vector<const RunSpec*> done;
  for (const auto& r : runs) {
    if (r.batch != 4) continue;
    done.push_back(&r);
    ASSERT_TRUE(fs::exists(exp / r.id / "done.json")) << r.id << "\n" << first.err;
    EXPECT_EQ(check_done_marker((exp / r.id).string()), "") << r.id;
  }
  ASSERT_EQ(done.size(), 2u);
  const RunSpec& two = done[0]->ranks == 2 ? *done[0] : *done[1];
  const fs::path h5 = exp / two.id / "run.h5";
  const auto size = fs::file_size(h5);
  fs::resize_file(h5, size / 2);

  auto again = testing::run_job({CNNSCALE_BIN, "sweep", kExperiment, "--only", "batch=4"}, env, 600);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("1 ran, 1 already complete, 0 failed"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find(two.id + ": warning: the run's folder is damaged (run.h5 has "), std::string::npos)
      << again.err;
  EXPECT_EQ(fs::file_size(exp / (two.id + ".corrupt-1.partial") / "run.h5"), size / 2);
  EXPECT_EQ(run_status(exp.string(), two).state, RunState::Done);
  EXPECT_EQ(check_done_marker((exp / two.id).string()), "");

  auto rep = testing::run_job({CNNSCALE_BIN, "report", exp.string(), "--no-plots"}, "", 120);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(rep.err.find("corrupt"), std::string::npos) << rep.err;
}

// SIGTERM to the sweep while a run trains: the run stops for requeue (not failed), the sweep stops
// for requeue too (exit 75), and the same command later finishes the rest without touching what was
// complete.
TEST(SweepMpi, KilledSweepContinuesWhereItStopped) {
  testing::TempDir dir;
  const fs::path exp = fs::path(dir.str()) / "tiny_cpu";
  const std::vector<std::string> longer = {"iterations=4000"};  // long enough to be caught running
  auto runs = expand_runs(load_experiment(kExperiment, longer, HostInfo{std::nullopt, "", true}));
  ASSERT_EQ(runs.size(), 4u);
  const std::string err_file = dir.file("sweep.err");
  const std::string cmd = "cd " + testing::shell_quote(CNNSCALE_SOURCE_DIR) +
                          " && exec env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          // mpirun passes a stop on after this many seconds and kills its ranks as
                          // long again later: 2, not 1, for a loaded machine (tests/mpi/test_requeue.cpp).
                          "OMPI_MCA_odls_base_sigkill_timeout=2 OPENBLAS_NUM_THREADS=1 " +
                          testing::shell_quote(CNNSCALE_BIN) + " sweep " + testing::shell_quote(kExperiment) +
                          " --results " + testing::shell_quote(dir.str()) + " iterations=4000 2>" +
                          testing::shell_quote(err_file) + " >/dev/null </dev/null";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the first run to finish and the second to report a loss from its training loop (its
  // log's first "iter 50/4000" line), then stop the sweep (only the sweep: it passes the signal on)
  // while the second trains.
  auto text = [](const fs::path& file) {
    std::ifstream in(file);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const fs::path second_log = exp / "logs" / (runs[1].id + ".log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (text(second_log).find("iter ") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(exp / runs[0].id / "run.h5")) << text(err_file);
  const auto first_time = fs::last_write_time(exp / runs[0].id / "run.h5");
  if (text(second_log).find("iter ") == std::string::npos) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    FAIL() << "the second run never reported a loss\n" << text(err_file) << text(second_log);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::kill(-pid, SIGKILL);  // nothing of it may outlive the test
  const std::string err = text(err_file);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 75) << err;
  EXPECT_NE(err.find("sweep: stopped for requeue after "), std::string::npos) << err;
  EXPECT_EQ(err.find("FAILED"), std::string::npos) << "the run the stop ended is not a failed run\n" << err;
  // Stopped in its training loop, or, where mpirun passed the signal on only after its ranks had
  // finished, complete and said to be kept.
  const RunStatus second = run_status(exp.string(), runs[1]);
  if (second.state == RunState::Done) {
    EXPECT_NE(err.find(runs[1].id + ": done in "), std::string::npos) << err;
  } else {
    EXPECT_NE(err.find(runs[1].id + ": stopped for requeue (signal 15"), std::string::npos) << err;
    EXPECT_EQ(second.state, RunState::Partial) << second.detail;
    EXPECT_EQ(second.detail, "an interrupted run (status interrupted)") << err;
  }
  size_t done = 0;
  for (const auto& r : runs) done += run_status(exp.string(), r).state == RunState::Done;
  EXPECT_GE(done, 1u);
  EXPECT_LT(done, 4u) << err;

  auto resumed = sweep({"--results", dir.str(), "iterations=4000"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find(fmt::format("{} ran, {} already complete, 0 failed", 4 - done, done)), std::string::npos)
      << resumed.err;
  for (const auto& r : runs) EXPECT_EQ(run_status(exp.string(), r).state, RunState::Done) << r.id;
  EXPECT_EQ(fs::last_write_time(exp / runs[0].id / "run.h5"), first_time);
}

// The scaling study's largest point, 8 ranks, end to end on CPU: the plan shows 8 ranks, the sweep
// starts them under mpirun (oversubscribed: more ranks than cores), each rank trains its eighth of
// the global batch, the results folder holds all 8 ranks, and the report's scaling table has the
// 8-rank row with its speedup over the 1-rank run.
TEST(SweepMpi, EightRankRunsArePlannedLaunchedAndReported) {
  testing::TempDir dir;
  const fs::path exp = fs::path(dir.str()) / "tiny_cpu";
  const std::vector<std::string> matrix = {"matrix.batch=[16]", "matrix.gpus=[1,2,4,8]"};
  const Experiment e = load_experiment(kExperiment, matrix, HostInfo{std::nullopt, "", true});
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[3].ranks, 8);

  // The command line of the 8-rank run on a 2-core machine.
  LaunchEnv env;
  env.self = CNNSCALE_BIN;
  env.cores = 2;
  const auto cmd = launch_command(e, runs[3], dir.str(), env);
  const std::string line = fmt::format("{}", fmt::join(cmd, " "));
  EXPECT_NE(line.find("mpirun -np 8 --bind-to none --oversubscribe "), std::string::npos) << line;
  EXPECT_NE(line.find(" --batch 16 "), std::string::npos) << line;

  auto with = [&matrix](std::vector<std::string> a) {
    a.insert(a.end(), matrix.begin(), matrix.end());
    return a;
  };
  auto plan = sweep(with({"--results", dir.str(), "--dry-run"}));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  for (const RunSpec& r : runs) {
    const size_t at = plan.out.find(r.id);
    ASSERT_NE(at, std::string::npos) << plan.out;
    std::istringstream fields(plan.out.substr(at, plan.out.find('\n', at) - at));
    std::string id, network, batch, ranks;
    fields >> id >> network >> batch >> ranks;
    EXPECT_EQ(batch, "16") << r.id;
    EXPECT_EQ(ranks, std::to_string(r.ranks)) << r.id;
  }

  auto ran = sweep(with({"--results", dir.str()}));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.err.find("4 ran, 0 already complete, 0 failed"), std::string::npos) << ran.err;
  for (const RunSpec& r : runs) {
    ASSERT_EQ(run_status(exp.string(), r).state, RunState::Done) << r.id;
    const auto j = nlohmann::json::parse(testing::slurp((exp / r.id / "summary.json").string()));
    EXPECT_EQ(j["summary"]["world_size"].get<double>(), r.ranks) << r.id;
    EXPECT_EQ(j["summary"]["global_batch"].get<double>(), 16) << r.id;
    EXPECT_EQ(j["timeline"]["ranks"].get<int>(), r.ranks) << r.id;
    ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(r.ranks)) << r.id;
    for (int k = 0; k < r.ranks; ++k) {
      EXPECT_EQ(j["ranks"][k]["rank"].get<int>(), k) << r.id;
      EXPECT_EQ(j["ranks"][k]["local_batch"].get<double>(), 16.0 / r.ranks) << r.id;
    }
  }

  auto rep = testing::run_job({CNNSCALE_BIN, "report", exp.string(), "--no-plots"}, "", 120);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  std::map<std::string, testing::CsvRow> scaling;  // gpus -> row
  for (const auto& row : testing::read_csv((exp / "report" / "scaling.csv").string())) scaling[row.at("gpus")] = row;
  ASSERT_EQ(scaling.size(), 4u);
  for (const char* gpus : {"1", "2", "4", "8"}) ASSERT_TRUE(scaling.count(gpus)) << gpus;
  const double one = std::stod(scaling["1"].at("samples_per_s_mean"));
  const double eight = std::stod(scaling["8"].at("samples_per_s_mean"));
  ASSERT_FALSE(scaling["8"].at("speedup_mean").empty());
  EXPECT_NEAR(std::stod(scaling["8"].at("speedup_mean")), eight / one, 1e-9 * eight / one);
  EXPECT_NEAR(std::stod(scaling["8"].at("efficiency_mean")), eight / one / 8, 1e-9 * eight / one);
}

// mpirun can say 1 after its ranks have written a whole result (it acts on a stop only after they
// have ended): the sweep looks at the run folder whatever the launcher said, and a complete,
// verified result is the run's, done and sealed, with the launcher's exit said; the next sweep
// keeps it. A launcher that says 1 without a result stays a failure.
TEST(SweepMpi, ACompleteResultCountsWhateverTheLauncherSaid) {
  testing::TempDir dir;
  const std::string launcher = dir.file("mpirun-then-1");
  std::ofstream(launcher) << "#!/bin/sh\nmpirun \"$@\"\nexit 1\n";
  fs::permissions(launcher, fs::perms::owner_all);
  const auto runs = expand_runs(load_experiment(kExperiment, {}, HostInfo{std::nullopt, "", true}));
  const auto two = std::find_if(runs.begin(), runs.end(), [](const RunSpec& r) { return r.ranks == 2; });
  ASSERT_NE(two, runs.end());
  const std::string only = fmt::format("batch={},gpus=2", two->batch);
  const std::vector<std::string> argv = {CNNSCALE_BIN, "sweep", kExperiment, "--results", dir.str(), "--only", only};
  const testing::JobResult r = testing::run_job(argv, "OPENBLAS_NUM_THREADS=1 MPIRUN=" + launcher, 600);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(two->id + ": done in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(its launcher exited 1 after the result was complete)"), std::string::npos) << r.err;
  EXPECT_EQ(run_status(dir.str() + "/tiny_cpu", *two).state, RunState::Done);
  EXPECT_FALSE(run_status(dir.str() + "/tiny_cpu", *two).unsealed);

  // A launcher that says 1 and runs nothing: no result, a failure.
  const std::string refusing = dir.file("just-1");
  std::ofstream(refusing) << "#!/bin/sh\nexit 1\n";
  fs::permissions(refusing, fs::perms::owner_all);
  const testing::JobResult bad = testing::run_job(
      {CNNSCALE_BIN, "sweep", kExperiment, "--results", dir.file("bad"), "--only", only},
      "OPENBLAS_NUM_THREADS=1 MPIRUN=" + refusing, 600);
  EXPECT_NE(bad.exit_code, 0) << bad.err;
  EXPECT_NE(bad.err.find("FAILED"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace cnnscale
