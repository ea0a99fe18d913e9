// Sweep bookkeeping without training: run states from fake run folders, the sweep.json refusal of
// a changed configuration, train/launcher command lines, Slurm/PBS scripts (bash -n), the run loop
// against a fake `train` (skip done, redo partial, go on after a failure), and the CLI contract.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/cli_runner.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kText =
    "name: s\ndataset: synthetic\niterations: 3\nmatrix: {network: lenet, batch: [4, 8], gpus: [1], repeats: 1}\n";

Experiment load(const std::vector<std::string>& overrides = {}) {
  return parse_experiment_text(kText, "s.yaml", overrides, HostInfo{std::nullopt, "", true});
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A finished run folder as train leaves it (only what the sweep reads).
void fake_done(const fs::path& exp_dir, const RunSpec& r, const std::string& hash) {
  write(exp_dir / r.id / "run.h5", "");
  write(exp_dir / r.id / "summary.json", nlohmann::json{{"summary", {{"tag.config_hash", hash}}}}.dump());
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SweepState, RunStatesFromFolders) {
  TempDir dir;
  auto runs = expand_runs(load());
  ASSERT_EQ(runs.size(), 2u);
  const fs::path exp = dir.str();
  EXPECT_EQ(run_status(exp, runs[0]).state, RunState::Todo);
  fake_done(exp, runs[0], runs[0].config_hash);
  EXPECT_EQ(run_status(exp, runs[0]).state, RunState::Done);
  fake_done(exp, runs[1], "0123456789abcdef");
  RunStatus other = run_status(exp, runs[1]);
  EXPECT_EQ(other.state, RunState::Conflict);
  EXPECT_NE(other.detail.find("another configuration"), std::string::npos) << other.detail;
  fs::remove(exp / runs[1].id / "run.h5");
  EXPECT_EQ(run_status(exp, runs[1]).state, RunState::Conflict);
  fs::remove_all(exp / runs[1].id);
  fs::create_directories(exp / (runs[1].id + ".partial"));
  EXPECT_EQ(run_status(exp, runs[1]).state, RunState::Partial);
}

TEST(SweepState, ChangedConfigurationIsRefusedMatrixChangesAreNot) {
  TempDir dir;
  const std::string exp = dir.file("s");
  check_sweep_record(exp, load(), {}, true);
  ASSERT_TRUE(fs::exists(fs::path(exp) / "sweep.json"));
  EXPECT_NO_THROW(check_sweep_record(exp, load(), {}, true));
  EXPECT_NO_THROW(check_sweep_record(exp, load({"matrix.batch=[4,8,16]", "matrix.repeats=3"}), {}, true));
  try {
    check_sweep_record(exp, load({"solver.lr=0.5", "iterations=9"}), {}, true);
    ADD_FAILURE() << "a changed configuration was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("experiment 's'"), std::string::npos) << m;
    EXPECT_NE(m.find("solver.lr"), std::string::npos) << m;
    EXPECT_NE(m.find("length.iterations"), std::string::npos) << m;
    EXPECT_NE(m.find("new name"), std::string::npos) << m;
    EXPECT_NE(m.find("--results"), std::string::npos) << m;
  }
  auto record = nlohmann::json::parse(slurp(fs::path(exp) / "sweep.json"));
  EXPECT_EQ(record["config_hash"], load().fixed_hash());  // the refused one did not overwrite it
}

TEST(SweepCommand, TrainArgumentsAndLaunchers) {
  Experiment e = parse_experiment_text(
      "name: s\ndevice: gpu\nmeasure: phases\ndataset: {name: synthetic, synthetic_fill: constant}\n"
      "solver: {lr: 0.02, milestones: [1, 2]}\niterations: 3\nwhole_epochs: 90\nwhole_samples: 1280000\n"
      "matrix: {network: lenet, batch: 64, gpus: [1, 2], gpu_mix: [[0, 2]], allreduce: [{overlap: false, algo: "
      "tree}]}\n",
      "s.yaml", {}, HostInfo{4, "x", true});
  auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 9u);  // (1 + 2 ranks + mix of 2) x 3 repeats
  auto args = train_arguments(e, runs[1], "/r");
  auto has = [&](const std::vector<std::string>& v, const std::string& flag, const std::string& value) {
    for (size_t i = 0; i + 1 < v.size(); ++i)
      if (v[i] == flag && v[i + 1] == value) return true;
    return false;
  };
  EXPECT_EQ(args[0], "train");
  EXPECT_TRUE(has(args, "--batch", "64"));
  EXPECT_TRUE(has(args, "--iterations", "3"));
  EXPECT_TRUE(has(args, "--device", "gpu"));
  EXPECT_TRUE(has(args, "--measure", "phases"));
  EXPECT_TRUE(has(args, "--lr", "0.02"));
  EXPECT_TRUE(has(args, "--milestones", "1,2"));
  EXPECT_TRUE(has(args, "--synthetic-fill", "constant"));
  EXPECT_TRUE(has(args, "--whole-epochs", "90"));
  EXPECT_TRUE(has(args, "--whole-samples", "1280000"));
  EXPECT_TRUE(has(args, "--allreduce-algo", "tree"));
  EXPECT_NE(std::find(args.begin(), args.end(), "--no-overlap"), args.end());
  EXPECT_TRUE(has(args, "--results", "/r"));
  EXPECT_TRUE(has(args, "--experiment", "s"));
  EXPECT_TRUE(has(args, "--run-id", runs[1].id));
  EXPECT_TRUE(has(args, "--tag", "repeat=1"));
  EXPECT_TRUE(has(args, "--tag", "config_hash=" + runs[1].config_hash));
  EXPECT_TRUE(has(train_arguments(e, runs[2], "/r"), "--gpus", "0,2"));
  // One rank: no allreduce flags at all.
  auto single = train_arguments(e, runs[0], "/r");
  EXPECT_EQ(std::find(single.begin(), single.end(), "--no-overlap"), single.end());

  LaunchEnv env;
  env.self = "/bin/cnnscale";
  env.cores = 1;
  EXPECT_EQ(launch_command(e, runs[0], "/r", env)[0], "/bin/cnnscale");  // one rank: no mpirun
  auto mpi = launch_command(e, runs[1], "/r", env);
  EXPECT_EQ(std::vector<std::string>(mpi.begin(), mpi.begin() + 3), (std::vector<std::string>{"mpirun", "-np", "2"}));
  EXPECT_EQ(std::find(mpi.begin(), mpi.end(), "--oversubscribe"), mpi.end());  // GPU ranks
  Experiment cpu = load({"matrix.gpus=[2]"});
  auto cpu_mpi = launch_command(cpu, expand_runs(cpu)[0], "/r", env);
  EXPECT_NE(std::find(cpu_mpi.begin(), cpu_mpi.end(), "--oversubscribe"), cpu_mpi.end());  // 2 ranks > 1 core
  env.in_slurm = true;
  auto srun = launch_command(e, runs[1], "/r", env);
  EXPECT_EQ(srun[0], "srun");
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--ntasks=2"), srun.end());
  EXPECT_EQ(launch_command(e, runs[0], "/r", env)[0], "srun");
}

TEST(SweepCommand, EmittedScriptsAreValidBash) {
  TempDir dir;
  Experiment e = load({"matrix.gpus=[1,2]", "matrix.repeats=3"});
  auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 12u);
  EmitRequest req{"slurm", "/opt/cnnscale", "/exp/s.yaml", "/res", "/work dir", {"solver.lr=0.1"}, {"batch=4"}};
  const std::string slurm = emit_script(req, e, runs);
  for (const char* f : {"#SBATCH --array=0-11\n", "#SBATCH --ntasks=2\n", "#SBATCH --job-name=cnnscale-s\n",
                        "#SBATCH --output=/res/s/slurm-%A_%a.out", "cd '/work dir'\n",
                        "exec /opt/cnnscale sweep /exp/s.yaml --results /res solver.lr=0.1 --only batch=4 "
                        "--run-index \"${SLURM_ARRAY_TASK_ID:-0}\"\n"})
    EXPECT_NE(slurm.find(f), std::string::npos) << slurm << "\nlacks: " << f;
  EXPECT_EQ(slurm.find("--gpus-per-node"), std::string::npos);  // a CPU experiment asks for no GPU
  req.kind = "pbs";
  const std::string pbs = emit_script(req, e, runs);
  for (const char* f : {"#PBS -J 0-11\n", "#PBS -l select=1:ncpus=2:mpiprocs=2\n", "${PBS_ARRAY_INDEX:-0}"})
    EXPECT_NE(pbs.find(f), std::string::npos) << pbs << "\nlacks: " << f;
  for (const auto& [name, text] : {std::pair{"a.sbatch", slurm}, std::pair{"a.pbs", pbs}}) {
    write(dir.file(name), text);
    EXPECT_EQ(std::system(("bash -n " + dir.file(name)).c_str()), 0) << text;
  }
  EXPECT_THROW(emit_script(req, e, {}), ConfigError);
}

// A stand-in for `cnnscale train`: writes the finished folder the sweep looks for, fails for batch 8.
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
mkdir -p "$root/$exp/$id" && : > "$root/$exp/$id/run.h5"
printf '{"summary": {"tag.config_hash": "%s"}}' "$hash" > "$root/$exp/$id/summary.json"
)";

TEST(SweepRunner, SkipsDoneRedoesPartialAndGoesOnAfterAFailure) {
  TempDir dir;
  write(dir.file("fake"), kFakeTrain);
  fs::permissions(dir.file("fake"), fs::perms::owner_all);
  Experiment e = load({"matrix.batch=[4,8,12]"});
  auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 3u);
  const fs::path exp = fs::path(dir.file("res")) / "s";
  fake_done(exp, runs[0], runs[0].config_hash);
  const auto done_time = fs::last_write_time(exp / runs[0].id / "summary.json");
  fs::create_directories(exp / (runs[2].id + ".partial") / "junk");
  LaunchEnv env;
  env.self = dir.file("fake");
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

// ---- the CLI -------------------------------------------------------------------------------------

std::string fixture(const std::string& name) {
  return std::string(CNNSCALE_TEST_DATA) + "/experiments/" + name;
}

void expect_one_line_error(const testing::CliResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const auto& f : fragments) EXPECT_NE(lines[0].find(f), std::string::npos) << lines[0] << "\nlacks: " << f;
}

TEST(SweepCli, SchemaErrorsAreOneLineWithLocationAndExit2) {
  const std::string f = fixture("bad_unknown_key.yaml");
  expect_one_line_error(testing::run_cnnscale({"sweep", f, "--dry-run"}),
                        {f + ":7:3: solver.momentun: unknown key 'momentun'"});
  const std::string g = fixture("bad_gpus.yaml");
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
      testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "matrix.precision=bf16"}),
      {"command line 'matrix.precision=bf16':1:1: matrix.precision: precision 'bf16' is not supported yet"});
  expect_one_line_error(testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "--run-index", "4", "--dry-run"}),
                        {"--run-index 4: the sweep has 4 run(s)"});
}

TEST(SweepCli, DryRunPrintsThePlan) {
  TempDir dir;
  auto r = testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "--dry-run", "--results", dir.str()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# experiment tiny_cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 run(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# 4 to run, 0 already complete"), std::string::npos) << r.out;
  int rows = 0;
  for (size_t p = r.out.find("dist_convnet-b"); p != std::string::npos; p = r.out.find("dist_convnet-b", p + 1)) ++rows;
  EXPECT_EQ(rows, 4) << r.out;
  EXPECT_FALSE(fs::exists(fs::path(dir.str()) / "tiny_cpu" / "sweep.json"));  // a plan writes nothing
  auto only = testing::run_cnnscale(
      {"sweep", fixture("tiny_cpu.yaml"), "--dry-run", "--only", "gpus=2,batch=8", "--results", dir.str()});
  EXPECT_NE(only.out.find("1 run(s)"), std::string::npos) << only.out;
  EXPECT_NE(only.out.find("dist_convnet-b8-g2-fp32-ov-r1-"), std::string::npos) << only.out;
  auto emitted = testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "--emit", "slurm", "--results", dir.str()});
  ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
  EXPECT_NE(emitted.out.find("#SBATCH --array=0-3"), std::string::npos) << emitted.out;
}

}  // namespace
}  // namespace cnnscale
