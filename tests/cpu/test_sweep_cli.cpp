// The `cnnscale sweep` command line: one-line schema errors, array-task checks, emitted files, the
// results root, paths relative to the experiment file, a second sweep refused, and --dry-run.
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

std::string exp_yaml(const std::string& name) {  // an experiment file of the test data
  return std::string(CNNSCALE_TEST_DATA) + "/experiments/" + name;
}

void expect_one_line_error(const testing::CliResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const auto& f : fragments) EXPECT_NE(lines[0].find(f), std::string::npos) << lines[0] << "\nlacks: " << f;
}

TEST(SweepCli, SchemaErrorsAreOneLineWithLocationAndExit2) {
  const std::string f = exp_yaml("bad_unknown_key.yaml");
  expect_one_line_error(testing::run_cnnscale({"sweep", f, "--dry-run"}),
                        {f + ":7:3: solver.momentun: unknown key 'momentun'"});
  const std::string g = exp_yaml("bad_gpus.yaml");
  // The child inherits the variable: a node with 2 GPUs, whatever this machine has.
  const char* before = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = before ? before : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  auto r = testing::run_cnnscale({"sweep", g, "--dry-run"});
  if (before)
    ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else
    ::unsetenv("CUDA_VISIBLE_DEVICES");
  expect_one_line_error(r, {g + ":9:16: matrix.gpus[2]: 4 rank(s) need 4 GPU(s) on one node, but only 2 visible"});
  expect_one_line_error(
      testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "matrix.precision=bf16"}),
      {"command line 'matrix.precision=bf16':1:1: matrix.precision: precision 'bf16' runs on GPUs only",
       "device: cpu"});
  expect_one_line_error(
      testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "matrix.precision=fp64"}),
      {"command line 'matrix.precision=fp64':1:1: matrix.precision: precision 'fp64': expected fp32, tf32, bf16 or "
       "fp16"});
  expect_one_line_error(testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "--run-index", "4", "--dry-run"}),
                        {"--run-index 4: the sweep has 4 run(s)"});
}

// `sweep bad_gpus.yaml SELECTION --dry-run` on a node with 2 GPUs, outside Slurm, with no host list;
// bad_gpus.yaml's matrix holds 1-, 2- and 4-GPU points.
struct TwoGpuNode {
  TempDir dir;
  ScopedEnv gpus{"CUDA_VISIBLE_DEVICES", "0,1"}, job{"SLURM_JOB_ID", nullptr}, hosts{"MPIRUN_ARGS", nullptr};
  const std::string g = exp_yaml("bad_gpus.yaml");
  testing::CliResult dry_run(std::vector<std::string> selection) {
    std::vector<std::string> args{"sweep", g};
    args.insert(args.end(), selection.begin(), selection.end());
    args.insert(args.end(), {"--dry-run", "--results", dir.str()});
    return testing::run_cnnscale(args);
  }
};

TEST(SweepCli, ArrayTaskIsCheckedAgainstItsOwnRunOnly) {
  // A task of the 4-rank group would not fit here, the 2-rank one does, whatever the rest of the
  // matrix needs.
  TwoGpuNode node;
  auto fits = node.dry_run({"--run-index", "1"});
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_NE(fits.out.find("bad_gpus.yaml): 1 run(s)"), std::string::npos) << fits.out;
  EXPECT_NE(fits.out.find("lenet-b64-g2-"), std::string::npos) << fits.out;
  expect_one_line_error(
      node.dry_run({"--run-index", "2"}),
      {"--run-index 2: run lenet-b64-g4-", ": 4 rank(s) need 4 GPU(s) on one node, but only 2 visible"});
}

// With --only the runs it selects are what must fit: the 1- and 2-GPU points of a matrix that also
// holds 4-GPU ones run on a 2-GPU node, and a selected run that does not fit is named.
TEST(SweepCli, OnlyChecksTheRunsItSelects) {
  TwoGpuNode node;
  auto fits = node.dry_run({"--only", "gpus=1|2"});
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_NE(fits.out.find("bad_gpus.yaml): 6 run(s)"), std::string::npos) << fits.out;  // 2 points x 3 repeats
  EXPECT_NE(fits.out.find("lenet-b64-g2-"), std::string::npos) << fits.out;
  EXPECT_EQ(fits.out.find("lenet-b64-g4-"), std::string::npos) << fits.out;
  expect_one_line_error(
      node.dry_run({"--only", "batch=64"}),
      {"--only batch=64: run lenet-b64-g4-", ": 4 rank(s) need 4 GPU(s) on one node, but only 2 visible"});
  // Without --only the whole matrix is checked, at the position of the entry that does not fit,
  // and the error says how to run the rest.
  expect_one_line_error(node.dry_run({}),
                        {node.g + ":9:16: matrix.gpus[2]: 4 rank(s) need 4 GPU(s) on one node, but only 2 visible",
                         "`sweep --only gpus=N` runs only the points that fit here"});
}

TEST(SweepCli, EmitFileIsWholeAndExecutable) {
  TempDir dir;
  fs::create_directories(dir.file("out"));
  const std::string script = dir.file("out/t.sbatch");
  auto r = testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "--emit", "slurm", "--gpus-per-node", "4",
                                  "--emit-file", script, "--results", dir.file("res")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::vector<std::string>{"t.sbatch"}, [&] {  // nothing else left there (no temporary)
    std::vector<std::string> names;
    for (const auto& f : fs::directory_iterator(dir.file("out"))) names.push_back(f.path().filename().string());
    return names;
  }());
  EXPECT_NE(fs::status(script).permissions() & fs::perms::owner_exec, fs::perms::none);
  const std::string text = slurp(script);
  EXPECT_EQ(text.rfind("#!/usr/bin/env bash\n", 0), 0u) << text;
  EXPECT_NE(text.find(" --run-index \"$run\" &\n"), std::string::npos) << text;  // down to its last line
  EXPECT_EQ(text.substr(text.rfind('\n', text.size() - 2) + 1), "exit \"$rc\"\n") << text;
  EXPECT_NE(r.err.find("bash " + script), std::string::npos) << r.err;
  EXPECT_EQ(shell("bash -n " + script).exit_code, 0) << text;
  expect_one_line_error(testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "--gpus-per-node", "4"}),
                        {"--gpus-per-node needs --emit slurm|pbs"});
  EXPECT_EQ(
      testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "--emit", "slurm", "--gpus-per-node", "0"}).exit_code,
      2);
}

// `cnnscale sweep args...` from `cwd` with $CNNSCALE_RESULTS set to `results` ("" : unset).
testing::CliResult sweep_in(const std::string& cwd, const std::string& results, const std::vector<std::string>& args) {
  // Built with append(): GCC 12 warns falsely (-Wrestrict, bug 105329) on "literal" + std::string.
  std::string cmd = "cd ";
  cmd.append(testing::shell_quote(cwd)).append(" && env -u CNNSCALE_RESULTS ");
  if (!results.empty()) cmd.append("CNNSCALE_RESULTS=").append(testing::shell_quote(results)).append(" ");
  cmd.append(testing::shell_quote(CNNSCALE_BIN)).append(" sweep");
  for (const auto& a : args) cmd.append(" ").append(testing::shell_quote(a));
  return shell(cmd);
}

// As train: the results root is $CNNSCALE_RESULTS unless --results names one.
TEST(SweepCli, ResultsRootDefaultsToCnnscaleResults) {
  TempDir dir;
  fs::create_directories(dir.file("cwd"));
  auto r = sweep_in(dir.file("cwd"), dir.file("env-root"), {exp_yaml("tiny_cpu.yaml"), "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("results in " + dir.file("env-root") + "/tiny_cpu\n"), std::string::npos) << r.out;
  auto emitted = sweep_in(dir.file("cwd"), dir.file("env-root"), {exp_yaml("tiny_cpu.yaml"), "--emit", "slurm"});
  ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
  EXPECT_NE(emitted.out.find(" --results " + dir.file("env-root") + " "), std::string::npos) << emitted.out;
  auto given = sweep_in(dir.file("cwd"), dir.file("env-root"),
                        {exp_yaml("tiny_cpu.yaml"), "--dry-run", "--results", dir.file("flag-root")});
  EXPECT_NE(given.out.find("results in " + dir.file("flag-root") + "/tiny_cpu\n"), std::string::npos) << given.out;
  auto unset = sweep_in(dir.file("cwd"), "", {exp_yaml("tiny_cpu.yaml"), "--dry-run"});
  EXPECT_NE(unset.out.find("results in results/tiny_cpu\n"), std::string::npos) << unset.out;
}

// Paths in an experiment file are relative to the file, whatever the working directory; network
// names stay names; paths in command-line overrides are relative to the working directory.
TEST(SweepCli, RelativePathsResolveAgainstTheExperimentFile) {
  TempDir dir;
  fs::create_directories(dir.file("nets"));
  fs::copy_file(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml", dir.file("nets/mine.yaml"));
  write(dir.file("exp/rel.yaml"),
        "name: rel\ndataset: synthetic\niterations: 3\n"
        "matrix: {network: [../nets/mine.yaml, lenet], batch: [4], repeats: 1}\n");
  fs::create_directories(dir.file("elsewhere"));
  auto r = sweep_in(dir.file("elsewhere"), "", {dir.file("exp/rel.yaml"), "--dry-run", "--results", dir.file("res")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("mine-b4-g1-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lenet-b4-g1-"), std::string::npos) << r.out;
  // Relative to the file, not to the working directory: from its own folder the same text means
  // the same file, and `cd exp && sweep rel.yaml` works too.
  auto here = sweep_in(dir.file("exp"), "", {"rel.yaml", "--dry-run", "--results", dir.file("res")});
  EXPECT_EQ(here.exit_code, 0) << here.err;
  // An override typed on the command line is relative to where it is typed.
  auto typed = sweep_in(dir.str(), "", {"exp/rel.yaml", "matrix.network=[nets/mine.yaml]", "--dry-run"});
  EXPECT_EQ(typed.exit_code, 0) << typed.err;
  auto missing = sweep_in(dir.file("elsewhere"), "", {dir.file("exp/rel.yaml"), "matrix.network=[../nets/nope.yaml]"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("network file " + dir.file("nets/nope.yaml") + " not found"), std::string::npos)
      << missing.err;
}

TEST(SweepCli, DataDirAndNetworkFilesAreReadBesideTheExperiment) {
  TempDir dir;
  fs::create_directories(dir.file("nets"));
  fs::create_directories(dir.file("exp/fmnist"));
  fs::copy_file(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml", dir.file("nets/mine.yaml"));
  write(dir.file("exp/data.yaml"),
        "name: data\ndataset: {name: fashion-mnist, data_dir: fmnist}\niterations: 3\n"
        "matrix: {network: ../nets/mine.yaml, batch: [4], repeats: 1}\n");
  // Loaded from this process, whose working directory is not the file's folder.
  ASSERT_NE(fs::current_path(), fs::path(dir.file("exp")));
  Experiment e = load_experiment(dir.file("exp/data.yaml"), {}, HostInfo{std::nullopt, "", true});
  EXPECT_EQ(e.network_paths.at("../nets/mine.yaml"), dir.file("nets/mine.yaml"));
  auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 1u);
  const auto args = train_arguments(e, runs[0], "/r");
  auto after = [&args](const std::string& flag) {
    auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(after("--net"), dir.file("nets/mine.yaml"));
  EXPECT_EQ(after("--data-dir"), dir.file("exp/fmnist"));
  // Hashes and ids cover the path as written, not where this checkout happens to be.
  EXPECT_EQ(runs[0].config["data"]["data_dir"], "fmnist");
  EXPECT_EQ(runs[0].config["network"], "../nets/mine.yaml");
  const std::string abs = fmt::format("dataset.data_dir={}", dir.file("abs"));
  EXPECT_EQ(load_experiment(dir.file("exp/data.yaml"), {abs}, HostInfo{std::nullopt, "", true}).dataset.data_path,
            dir.file("abs"));
}

// A file written before paths were file-relative (relative to where the sweep was started) still
// loads when that path exists from the working directory, with a warning saying how to write it.
TEST(SweepCli, CwdRelativePathOfAnOlderFileWorksWithAWarning) {
  TempDir dir;
  fs::create_directories(dir.file("nets"));
  fs::copy_file(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml", dir.file("nets/mine.yaml"));
  write(dir.file("exp/old.yaml"),
        "name: old\ndataset: synthetic\niterations: 3\nmatrix: {network: nets/mine.yaml, batch: [4], repeats: 1}\n");
  auto r = sweep_in(dir.str(), "", {"exp/old.yaml", "--dry-run", "--results", dir.file("res")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: exp/old.yaml:4:19: matrix.network: 'nets/mine.yaml' is not in the experiment "
                       "file's folder; using " +
                       dir.file("nets/mine.yaml")),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("write it as '../nets/mine.yaml'"), std::string::npos) << r.err;
}

// One whole sweep of an experiment at a time (exit 1 naming the holder); array tasks lock their
// own run only, so they run beside each other, and two tasks of one run do not.
TEST(SweepCli, SecondSweepOfAnExperimentIsRefusedArrayTasksAreNot) {
  TempDir dir;
  const std::string exp = (fs::path(dir.file("res")) / "tiny_cpu").string();
  fs::create_directories(exp);
  std::string holder;
  auto whole = FileLock::try_lock(sweep_lock_path(exp), &holder);  // a sweep in progress
  ASSERT_TRUE(whole);
  const std::string me = lines_of(slurp(sweep_lock_path(exp)))[0];
  EXPECT_EQ(me.rfind("host ", 0), 0u) << me;
  EXPECT_NE(me.find(fmt::format(" pid {}", ::getpid())), std::string::npos) << me;
  auto second = sweep_in(dir.str(), "", {exp_yaml("tiny_cpu.yaml"), "--results", dir.file("res")});
  EXPECT_EQ(second.exit_code, 1) << second.err;
  ASSERT_EQ(second.err_lines().size(), 1u) << second.err;
  EXPECT_EQ(second.err_lines()[0], "cnnscale: error: experiment 'tiny_cpu' is already being swept by " + me +
                                       " (lock " + sweep_lock_path(exp) + "); wait for it to finish, or stop it");
  EXPECT_FALSE(fs::exists(fs::path(exp) / "sweep.json"));  // refused before touching anything

  // An array task of run 2 while run 0's task (this process) holds its run.
  auto runs = expand_runs(load_experiment(exp_yaml("tiny_cpu.yaml"), {}, HostInfo{std::nullopt, "", true}));
  auto task0 = FileLock::try_lock(run_lock_path(exp, runs[0].id), &holder);
  ASSERT_TRUE(task0);
  auto same = sweep_in(dir.str(), "", {exp_yaml("tiny_cpu.yaml"), "--run-index", "0", "--results", dir.file("res")});
  EXPECT_EQ(same.exit_code, 1) << same.err;
  ASSERT_EQ(same.err_lines().size(), 1u) << same.err;
  EXPECT_EQ(same.err_lines()[0], "cnnscale: error: run " + runs[0].id +
                                     " of experiment 'tiny_cpu' is already being "
                                     "run by " +
                                     me + " (lock " + run_lock_path(exp, runs[0].id) + ")");
  ASSERT_EQ(runs[2].ranks, 1);  // a one-rank run: no mpirun needed here
  auto other = sweep_in(dir.str(), "", {exp_yaml("tiny_cpu.yaml"), "--run-index", "2", "--results", dir.file("res")});
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(run_status(exp, runs[2]).state, RunState::Done) << other.err;
  EXPECT_TRUE(fs::exists(fs::path(exp) / runs[2].id / "done.json"));
  // Locks are released with their holders: the whole sweep may start now.
  whole.reset();
  task0.reset();
  EXPECT_TRUE(FileLock::try_lock(sweep_lock_path(exp), &holder));
}

TEST(SweepCli, DryRunPrintsThePlan) {
  TempDir dir;
  auto r = testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "--dry-run", "--results", dir.str()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# experiment tiny_cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 run(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# 4 to run, 0 already complete"), std::string::npos) << r.out;
  int rows = 0;
  for (size_t p = r.out.find("dist_convnet-b"); p != std::string::npos; p = r.out.find("dist_convnet-b", p + 1)) ++rows;
  EXPECT_EQ(rows, 4) << r.out;
  EXPECT_FALSE(fs::exists(fs::path(dir.str()) / "tiny_cpu" / "sweep.json"));  // a plan writes nothing
  auto only = testing::run_cnnscale(
      {"sweep", exp_yaml("tiny_cpu.yaml"), "--dry-run", "--only", "gpus=2,batch=8", "--results", dir.str()});
  EXPECT_NE(only.out.find("1 run(s)"), std::string::npos) << only.out;
  EXPECT_NE(only.out.find("dist_convnet-b8-g2-fp32-ov-r1-"), std::string::npos) << only.out;
  auto emitted = testing::run_cnnscale({"sweep", exp_yaml("tiny_cpu.yaml"), "--emit", "slurm", "--results", dir.str()});
  ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
  EXPECT_NE(emitted.out.find("#SBATCH --array=0-3"), std::string::npos) << emitted.out;
}

}  // namespace
}  // namespace cnnscale
