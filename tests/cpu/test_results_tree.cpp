// A results tree shared with other users: links planted where cnnscale creates or writes a file are
// refused (naming the path) and their targets left untouched; names that become paths are checked
// before any work; temporary files of dead writers are cleared by the next write in their folder.
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "core/hdf5_file.hpp"
#include "core/host_name.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/sweep_test_util.hpp"
#include "experiment/report_plots.hpp"
#include "experiment/sweep.hpp"
#include "io/atomic_file.hpp"
#include "io/results_writer.hpp"
#include "io/safe_open.hpp"
#include "net/net.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::TempDir;
using sweep_test::slurp;

const std::string kVictimText = "another user's file\n";

// A file outside the results tree the test owns, and a link to it planted at `at`.
std::string plant_link(const TempDir& dir, const std::string& at) {
  const std::string victim = dir.file("victim.txt");
  std::ofstream(victim) << kVictimText;
  fs::create_directories(fs::path(at).parent_path());
  fs::create_symlink(victim, at);
  return victim;
}

// Runs `f`, which must throw RuntimeError naming `path` as a symbolic link.
template <typename F>
void expect_link_refused(F f, const std::string& path) {
  try {
    f();
    ADD_FAILURE() << "no error for the link at " << path;
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": is a symbolic link"), std::string::npos) << e.what();
  }
}

TEST(ResultsTreeLinks, SyncedFileCsvAndLockAreNotWrittenThroughALink) {
  TempDir dir;
  const std::string file = dir.file("tree/summary.json");
  const std::string victim = plant_link(dir, file);
  expect_link_refused([&] { write_synced_file(file, "{}\n"); }, file);
  EXPECT_EQ(slurp(victim), kVictimText);
  EXPECT_TRUE(fs::is_symlink(file));  // not removed either: it is not ours

  const std::string csv = dir.file("tree/all.csv");
  fs::create_symlink(victim, csv);
  expect_link_refused([&] { append_summary_csv(csv, testing::synthetic_run("lenet", 4, 1, 1, {})); }, csv);
  EXPECT_EQ(slurp(victim), kVictimText);

  // The sweep's lock files (.sweep.lock, .<run-id>.lock) and train's run claim are FileLocks.
  const std::string lock = dir.file("tree/.sweep.lock");
  fs::create_symlink(victim, lock);
  std::string holder;
  expect_link_refused([&] { FileLock::try_lock(lock, &holder); }, lock);
  EXPECT_EQ(slurp(victim), kVictimText);
}

TEST(ResultsTreeLinks, ALinkAtATemporaryNameIsReplacedNotFollowed) {
  TempDir dir;
  const std::string json = dir.file("run/summary.json");
  const std::string victim = plant_link(dir, temp_path_for(json));
  write_file_atomically(json, "{\"ok\": 1}\n");
  EXPECT_EQ(slurp(victim), kVictimText);
  EXPECT_EQ(slurp(json), "{\"ok\": 1}\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(temp_path_for(json))));

  // HDF5 files (results, checkpoints) are created exclusively at their temporary name.
  const std::string h5 = dir.file("run/run.h5");
  fs::create_symlink(victim, temp_path_for(h5));
  write_atomically_with(h5, [](const std::string& tmp) {
    h5::Writer w(tmp, "results file");
    w.scalar_i64(w.root(), "x", 7);
    w.close();
  });
  EXPECT_EQ(slurp(victim), kVictimText);
  EXPECT_EQ(h5::Reader(h5, "results file").scalar_i64(h5::Reader(h5, "results file").root(), "x"), 7);

  // Written directly (data shards), a link at the file's own name is refused.
  const std::string direct = dir.file("run/direct.h5");
  fs::create_symlink(victim, direct);
  try {
    h5::Writer w(direct, "data shard");
    ADD_FAILURE() << "the HDF5 writer followed a link";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(direct + ": is a symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(victim), kVictimText);
}

// Written directly, an existing file is replaced, never opened with O_TRUNC: that open would also
// follow a link planted after any look at the name, and it rewrites a hard-linked file in place.
TEST(ResultsTreeLinks, ADirectHdf5WriteReplacesAnExistingFileInsteadOfTruncatingIt) {
  TempDir dir;
  const std::string victim = dir.file("victim.txt");
  std::ofstream(victim) << kVictimText;
  const std::string direct = dir.file("direct.h5");
  fs::create_hard_link(victim, direct);
  {
    h5::Writer w(direct, "data shard");
    w.scalar_i64(w.root(), "x", 7);
    w.close();
  }
  EXPECT_EQ(slurp(victim), kVictimText);
  EXPECT_EQ(h5::Reader(direct, "data shard").scalar_i64(h5::Reader(direct, "data shard").root(), "x"), 7);
}

// A link in place of the experiment folder is refused before any run: every lock, log and result of
// the sweep would go where it points (also one planted while the sweep runs: checked per run).
TEST(ResultsTreeLinks, AnExperimentFolderThatIsALinkIsRefused) {
  TempDir dir;
  const Experiment e = sweep_test::load();
  const std::vector<RunSpec> runs = expand_runs(e);
  fs::create_directories(dir.file("elsewhere"));
  fs::create_directories(dir.file("res"));
  const std::string exp = (fs::path(dir.file("res")) / e.name).string();
  fs::create_directory_symlink(dir.file("elsewhere"), exp);
  LaunchEnv env;
  env.self = "/bin/false";
  expect_link_refused([&] { run_sweep(e, runs, dir.file("res"), env); }, exp);
  EXPECT_TRUE(fs::is_empty(dir.file("elsewhere")));

  // train: before any work, with or without --run-id; exit 1 as every refused link.
  fs::create_directory_symlink(dir.file("elsewhere"), dir.file("res/e"));
  for (const std::string id : {"r1", ""}) {
    std::vector<std::string> args = {"train", "--net",     "lenet",         "--data",       "synthetic", "--iterations",
                                     "2",     "--results", dir.file("res"), "--experiment", "e"};
    if (!id.empty()) args.insert(args.end(), {"--run-id", id});
    const CliResult r = testing::run_cnnscale(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    ASSERT_EQ(r.error_lines().size(), 1u) << r.err;
    EXPECT_NE(r.error_lines()[0].find(dir.file("res/e") + ": is a symbolic link"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("iteration"), std::string::npos) << "trained before refusing:\n" << r.err;
  }
  EXPECT_TRUE(fs::is_empty(dir.file("elsewhere")));
}

// The sweep opens logs/ once and creates each run's log in that folder: a link put in place of
// logs/ while the sweep runs (here by its first run) moves no later log to where the link points.
TEST(ResultsTreeLinks, SweepLogsGoToTheFolderOpenedAtTheStart) {
  TempDir dir;
  const Experiment e = sweep_test::load();  // two runs
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u);
  const std::string victim = dir.file("victim");
  fs::create_directories(victim);
  const fs::path exp = fs::path(dir.file("res")) / e.name;
  LaunchEnv env;
  env.self = dir.file("swap-logs.sh");
  sweep_test::write_script(env.self, "#!/bin/sh\ncd " + testing::shell_quote(exp.string()) +
                                         " || exit 9\n"
                                         "if [ ! -e logs.moved ]; then mv logs logs.moved && ln -s " +
                                         testing::shell_quote(victim) +
                                         " logs; fi\n"
                                         "echo 'cnnscale: error: failed on purpose'\nexit 1\n");
  const SweepResult result = run_sweep(e, runs, dir.file("res"), env);
  EXPECT_EQ(result.failed, 2);
  EXPECT_TRUE(fs::is_empty(victim)) << "a log went through the link";
  for (const RunSpec& r : runs)
    EXPECT_EQ(slurp(exp / "logs.moved" / (r.id + ".log")), "cnnscale: error: failed on purpose\n") << r.id;
}

TEST(ResultsTreeLinks, SweepRunLogThroughALinkIsRefused) {
  TempDir dir;
  const Experiment e = sweep_test::load();
  const std::vector<RunSpec> runs = expand_runs(e);
  const fs::path exp = fs::path(dir.file("res")) / e.name;
  const std::string log = (exp / "logs" / (runs[0].id + ".log")).string();
  const std::string victim = plant_link(dir, log);
  LaunchEnv env;
  env.self = "/bin/false";  // never started: the log is opened first
  expect_link_refused([&] { run_sweep(e, runs, dir.file("res"), env); }, log);
  EXPECT_EQ(slurp(victim), kVictimText);
}

TEST(ResultsTreeLinks, ReportPlotLogThroughALinkIsRefused) {
  TempDir dir;
  const std::string log = dir.file("report/.report_plots.log");
  const std::string victim = plant_link(dir, log);
  report::PlotJob job;
  job.python = "/bin/true";  // never started: the log is opened first
  job.script = victim;
  job.tables_dir = job.out_dir = dir.file("report");
  expect_link_refused([&] { report::run_plot_script(job); }, log);
  EXPECT_EQ(slurp(victim), kVictimText);
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// A file last written `minutes` ago: a dead writer's leftover is removed only once it is that old
// (ten minutes), since a fresh one may be a live writer's of another PID namespace.
void age(const std::string& path, int minutes) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::minutes(minutes));
}

TEST(ResultsTreeLeftovers, DeadWritersTemporaryFilesAreRemovedOthersStay) {
  TempDir dir;
  const std::string host = host_name();
  const pid_t dead = dead_pid();
  const std::string mine_dead = fmt::format(".run.h5.{}.{}.tmp", host, dead);
  const std::string dotted_dead = fmt::format(".ckpt.iter-4.h5.{}.{}.tmp", host, dead);
  const std::string live = fmt::format(".run.h5.{}.{}.tmp", host, ::getppid());  // a live process's
  const std::string other_host = fmt::format(".run.h5.{}x.{}.tmp", host, dead);  // may live elsewhere
  const std::string unrelated = fmt::format(".notes.{}.tmp", dead);
  // A dead pid's file written a minute ago: in a container of the same host name with pids of its
  // own, that pid may be a live writer's (ESRCH here says nothing about it).
  const std::string recent_dead = fmt::format(".summary.csv.{}.{}.tmp", host, dead);
  for (const auto& n : {mine_dead, dotted_dead, live, other_host, unrelated, recent_dead}) {
    std::ofstream(dir.file(n)) << "x";
    age(dir.file(n), n == recent_dead ? 1 : 11);
  }
  write_file_atomically(dir.file("summary.json"), "{}\n");
  EXPECT_FALSE(fs::exists(dir.file(mine_dead)));
  EXPECT_FALSE(fs::exists(dir.file(dotted_dead)));
  EXPECT_TRUE(fs::exists(dir.file(recent_dead)));
  EXPECT_TRUE(fs::exists(dir.file(live)));
  EXPECT_TRUE(fs::exists(dir.file(other_host)));
  EXPECT_TRUE(fs::exists(dir.file(unrelated)));
  EXPECT_EQ(slurp(dir.file("summary.json")), "{}\n");
  // The writer's own temporary name says which host and process it belongs to.
  EXPECT_EQ(fs::path(temp_path_for(dir.file("a.json"))).filename().string(),
            fmt::format(".a.json.{}.{}.tmp", host, ::getpid()));
}

TEST(ResultsTreeLeftovers, ACheckpointWriteClearsAKilledWritersCheckpointTemp) {
  TempDir dir;
  const std::string left = dir.file(fmt::format("ckpt/.iter_000002.h5.{}.{}.tmp", host_name(), dead_pid()));
  fs::create_directories(dir.file("ckpt"));
  std::ofstream(left) << std::string(4096, 'x');  // what a second signal mid-write leaves
  age(left, 11);
  CliResult r = testing::short_lenet_train(dir.file("res"), "e", "r1",
                                          {"--checkpoint-dir", dir.file("ckpt"), "--checkpoint-every", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(left));
}

// ---- a full disk (or a file-size limit: the same failing write, EFBIG instead of ENOSPC) ----

// `cnnscale train` of 4 LeNet iterations under `ulimit -f kib` (SIGXFSZ ignored, so that a write past
// the limit fails with EFBIG instead of killing the process), results under `root`.
CliResult train_with_file_limit(int kib, const std::string& root, const std::vector<std::string>& extra = {}) {
  std::string cmd = "cd " + testing::shell_quote(CNNSCALE_SOURCE_DIR) + " && ulimit -f " + std::to_string(kib) +
                    " && trap '' XFSZ && exec " + testing::shell_quote(CNNSCALE_BIN);
  for (const char* a : {"train", "--net", "lenet", "--data", "synthetic", "--iterations", "4", "--batch", "4",
                               "--results", root.c_str(), "--experiment", "e", "--run-id", "r1", "--min-window", "0",
                               "--timing-warmup", "1"})
    cmd += " " + testing::shell_quote(a);
  for (const auto& a : extra) cmd += " " + testing::shell_quote(a);
  return sweep_test::shell(cmd);
}

std::vector<std::string> tree(const std::string& root) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    paths.push_back(fs::relative(it->path(), root).string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// run.h5 of this run is about 45 KB: a 24 KiB limit fails its write (HDF5 flushes at close), which
// used to end in "HDF5 failed to close (flush)" and then a crash in HDF5's exit handler (139).
TEST(ResultsTreeFullDisk, ResultsWriteFailsWithOneLineAndLeavesNothing) {
  TempDir dir;
  const CliResult r = train_with_file_limit(24, dir.file("res"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto errors = r.error_lines();
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_NE(errors[0].find(dir.file("res/e/r1.partial/")), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("File too large"), std::string::npos) << errors[0];  // strerror(EFBIG)
  // No run folder, no partial folder, no temporary file, no claim.
  EXPECT_EQ(tree(dir.file("res")), std::vector<std::string>{"e"});
}

// A checkpoint of LeNet is about 3.4 MB: a 1 MiB limit fails the first one, during training.
TEST(ResultsTreeFullDisk, CheckpointWriteFailsWithOneLineAndLeavesNoTemporaryFile) {
  TempDir dir;
  const CliResult r =
      train_with_file_limit(1024, dir.file("res"), {"--checkpoint-dir", dir.file("ckpt"), "--checkpoint-every", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto errors = r.error_lines();
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_NE(errors[0].find(dir.file("ckpt/")), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("File too large"), std::string::npos) << errors[0];
  for (const auto& name : tree(dir.file("ckpt")))
    EXPECT_FALSE(name.ends_with(".h5") || name.ends_with(".tmp")) << name;
  EXPECT_EQ(tree(dir.file("res")), std::vector<std::string>{"e"});
}

// A summary CSV append that fails midway (past a file-size limit here, as on a full disk) is cut
// back: no half row of the failed run stays. In a child process, which the limit goes with.
TEST(ResultsTreeFullDisk, FailedCsvAppendLeavesNoHalfRow) {
  TempDir dir;
  const std::string csv = dir.file("all.csv");
  append_summary_csv(csv, testing::synthetic_run("lenet", 4, 1, 1, {}));
  const std::string before = slurp(csv);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = before.size() + 16;  // room for a piece of the next row only
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      append_summary_csv(csv, testing::synthetic_run("lenet", 8, 1, 1, {}));
    } catch (const RuntimeError& e) {
      ::_exit(std::string(e.what()).find(csv + ": write failed: File too large") != std::string::npos ? 0 : 4);
    }
    ::_exit(3);  // the append went through
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(testing::exit_code_of(status), 0);
  EXPECT_EQ(slurp(csv), before);
}

// ---- names that become paths, checked before any work ----

TEST(ResultsTreeNames, OverlongRunIdIsRefusedBeforeTraining) {
  TempDir dir;
  const std::string id(300, 'a');
  testing::expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "2", "--results",
                               dir.str(), "--experiment", "e", "--run-id", id},
                              {"--run-id", "300 characters", "at most"});
  EXPECT_TRUE(dir.entries().empty());
  EXPECT_NO_THROW(check_results_name("--run-id", std::string(kMaxResultsName, 'a')));
  EXPECT_THROW(check_results_name("--run-id", std::string(kMaxResultsName + 1, 'a')), ConfigError);
  // Separators, hidden names, control characters and shell syntax are refused as before.
  for (const std::string bad : {"../x", "a/b", ".hidden", "-x", "a\nb", "$(touch x)", "`x`", "a;b", "a'b", ".."})
    EXPECT_THROW(check_results_name("--run-id", bad), ConfigError) << bad;
}

TEST(ResultsTreeNames, ExperimentFolderThatIsAFileIsRefusedBeforeTraining) {
  TempDir dir;
  std::ofstream(dir.file("e")) << "not a folder\n";
  for (const std::string id : {"r1", ""}) {
    std::vector<std::string> args = {"train", "--net",   "lenet", "--data",   "synthetic", "--iterations", "2",
                                     "--results", dir.str(), "--experiment", "e"};
    if (!id.empty()) args.insert(args.end(), {"--run-id", id});
    testing::expect_usage_error(args, {"--experiment e", dir.file("e"), "not a folder"});
  }
  EXPECT_EQ(slurp(dir.file("e")), "not a folder\n");
}

TEST(ResultsTreeNames, CheckpointWhoseRunIdIsAPathIsRefusedAtResume) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  CliResult r =
      testing::short_lenet_train(dir.file("res"), "e", "r1", {"--checkpoint-dir", ckpt, "--checkpoint-every", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string file;
  for (const auto& entry : fs::directory_iterator(ckpt))
    if (entry.path().extension() == ".h5") file = entry.path().string();
  ASSERT_FALSE(file.empty());
  // A checkpoint whose stored run id climbs out of the results tree (edited, or from elsewhere).
  CheckpointContents c = read_checkpoint(file);
  auto config = nlohmann::json::parse(c.meta.run_config);
  config["run_id"] = "../../x";
  c.meta.run_config = config.dump();
  const std::string hostile = dir.file("hostile.h5");
  write_checkpoint(hostile, c);
  r = testing::run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "8", "--batch", "4",
                             "--results", dir.file("res"), "--experiment", "e", "--resume", hostile,
                             "--min-window", "0", "--timing-warmup", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(hostile + ": stored run_id '../../x'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("iter "), std::string::npos) << "trained before refusing:\n" << r.err;
  EXPECT_FALSE(fs::exists(dir.file("x")));  // res/e/../../x
}

// Layer names become HDF5 paths ("<layer>/<param>") in checkpoints and run.h5.
TEST(ResultsTreeNames, LayerNamesThatShareAnHdf5GroupAreRefusedAtLoad) {
  const std::string head = "name: t\ninput: {shape: [1, 8, 8], classes: 3}\nlayers:\n";
  const std::string x = "  - {name: x, type: InnerProduct, bottom: data, top: x, num_output: 4}\n";
  const std::string xw = "  - {name: x/weight, type: InnerProduct, bottom: data, top: y, num_output: 3}\n";
  auto load_error = [](const std::string& text) -> std::string {
    try {
      NetSpec::load_string(text, "net.yaml", {});
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError for:\n" << text;
    return "";
  };
  for (const auto& [text, second_line, first_line] :
       {std::tuple{head + x + xw, "net.yaml:5:", "net.yaml:4:"}, std::tuple{head + xw + x, "net.yaml:5:", "net.yaml:4:"}}) {
    const std::string msg = load_error(text);
    EXPECT_EQ(msg.rfind(second_line, 0), 0u) << msg;  // the second of the two, located
    EXPECT_NE(msg.find("layer 'x'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer 'x/weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("defined at ") + first_line), std::string::npos) << msg;  // and the first
  }
  for (const std::string bad : {"a//b", "/a", "a/", "a/./b", "a/../b"})
    EXPECT_NE(load_error(head + "  - {name: '" + bad + "', type: InnerProduct, bottom: data, top: y, num_output: 3}\n")
                  .find("layer name '" + bad + "'"),
              std::string::npos)
        << bad;
  // Names with '/' that nest under no other layer stay valid.
  EXPECT_NO_THROW(NetSpec::load_string(
      head + "  - {name: a/b, type: InnerProduct, bottom: data, top: y, num_output: 3}\n", "net.yaml", {}));
}

}  // namespace
}  // namespace cnnscale
