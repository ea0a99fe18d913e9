// Sweep bookkeeping without training: run states from fake run folders, the sweep.json refusal of
// a changed configuration, train/launcher command lines (also inside a pretend Slurm allocation),
// Slurm/PBS scripts (bash -n; submission against fake sbatch/qsub, array tasks against a fake
// cnnscale), the run loop against a fake `train` (skip done, redo partial, go on after a failure),
// and the CLI contract.
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
#include "cpu/test_report_util.hpp"
#include "experiment/log_tail.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"

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

// A finished run folder as train leaves it (written by the results writer, so run.h5 is real HDF5),
// tagged with `hash`; `status` "interrupted" as a run stopped by a signal leaves it.
void fake_done(const fs::path& exp_dir, const RunSpec& r, const std::string& hash,
               const std::string& status = "complete") {
  RunResults res = testing::synthetic_run("lenet", static_cast<int>(r.batch), static_cast<int>(r.ranks), 1, {});
  res.experiment = exp_dir.filename().string();
  res.run_id = r.id;
  res.status = status;
  res.summary.tags["config_hash"] = hash;
  ResultsWriteOptions o;
  o.root = exp_dir.parent_path().string();
  write_run_results(res, o);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  return lines;
}

// An executable shell script at `path`.
void write_script(const std::string& path, const std::string& text) {
  write(path, text);
  fs::permissions(path, fs::perms::owner_all);
}

// `bash -c command` with its output captured.
testing::CliResult shell(const std::string& command) {
  const std::string base = testing::output_base("sh");
  std::string cmd = "bash -c ";
  cmd.append(testing::shell_quote(command)).append(" >").append(testing::shell_quote(base + ".out"));
  cmd.append(" 2>").append(testing::shell_quote(base + ".err")).append(" </dev/null");
  testing::CliResult r;
  r.exit_code = testing::exit_code_of(std::system(cmd.c_str()));
  testing::take_output(base, r.out, r.err);
  return r;
}

// Sets (or with nullptr unsets) an environment variable for one scope; children inherit it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) saved_ = before;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      ::setenv(name_.c_str(), saved_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// A pretend environment for HostInfo::detect.
HostInfo detect_in(const std::map<std::string, std::string>& vars) {
  return HostInfo::detect([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
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

TEST(SweepState, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  TempDir dir;
  write(dir.file("f"), std::string(200000, 'a'));  // several read buffers' worth
  EXPECT_EQ(sha256_file(dir.file("f")), sha256_hex(std::string(200000, 'a')));
}

// A done marker vouches for the folder: any change of run.h5 or summary.json since makes it Corrupt.
TEST(SweepState, DoneMarkerCatchesTruncatedMissingAndChangedFiles) {
  TempDir dir;
  auto runs = expand_runs(load());
  const fs::path exp = dir.str();
  const fs::path run = exp / runs[0].id;
  fake_done(exp, runs[0], runs[0].config_hash);
  RunStatus st = run_status(exp, runs[0]);
  EXPECT_EQ(st.state, RunState::Done);
  EXPECT_TRUE(st.unsealed);  // no marker yet: verified by reading run.h5
  write_done_marker(run.string(), runs[0]);
  st = run_status(exp, runs[0]);
  EXPECT_EQ(st.state, RunState::Done);
  EXPECT_FALSE(st.unsealed);
  const auto marker = nlohmann::json::parse(slurp(run / "done.json"));
  EXPECT_EQ(marker["files"]["run.h5"]["bytes"].get<uint64_t>(), fs::file_size(run / "run.h5"));
  EXPECT_EQ(marker["files"]["summary.json"]["sha256"], sha256_file((run / "summary.json").string()));

  const std::string h5 = slurp(run / "run.h5"), summary = slurp(run / "summary.json");
  auto expect_corrupt = [&](const std::string& fragment) {
    RunStatus c = run_status(exp, runs[0]);
    EXPECT_EQ(c.state, RunState::Corrupt) << fragment;
    EXPECT_NE(c.detail.find(fragment), std::string::npos) << c.detail;
  };
  fs::resize_file(run / "run.h5", h5.size() / 2);
  expect_corrupt("run.h5 has " + std::to_string(h5.size() / 2) + " bytes, done.json recorded " +
                 std::to_string(h5.size()) + " (truncated)");
  write(run / "run.h5", h5);
  EXPECT_EQ(run_status(exp, runs[0]).state, RunState::Done);
  std::string edited = summary;  // same size, one byte changed
  edited[edited.find("complete")] = 'C';
  write(run / "summary.json", edited);
  expect_corrupt("summary.json does not match its SHA-256 in done.json");
  fs::remove(run / "summary.json");
  expect_corrupt("summary.json is missing");
  write(run / "summary.json", summary);
  write(run / "done.json", "{\"format\": ");
  expect_corrupt("done.json is not valid JSON");
}

// Folders without a marker (an older sweep's, or one train has just written) are read through.
TEST(SweepState, UnsealedFoldersAreCheckedByReadingThem) {
  TempDir dir;
  auto runs = expand_runs(load());
  const fs::path exp = dir.str();
  const fs::path run = exp / runs[0].id;
  auto expect_state = [&](RunState want, const std::string& fragment) {
    RunStatus c = run_status(exp, runs[0]);
    EXPECT_EQ(c.state, want) << run_state_name(c.state) << ": " << c.detail;
    EXPECT_NE(c.detail.find(fragment), std::string::npos) << c.detail;
  };
  fake_done(exp, runs[0], runs[0].config_hash);
  const std::string h5 = slurp(run / "run.h5"), summary = slurp(run / "summary.json");
  fs::resize_file(run / "run.h5", h5.size() - 100);
  expect_state(RunState::Corrupt, "run.h5 is unreadable");
  write(run / "run.h5", "");
  expect_state(RunState::Corrupt, "run.h5 is unreadable");
  fs::remove(run / "run.h5");
  expect_state(RunState::Corrupt, "run.h5 is missing");
  write(run / "run.h5", h5);
  write(run / "summary.json", summary.substr(0, summary.size() / 2));
  expect_state(RunState::Corrupt, "summary.json is unreadable (truncated or not JSON)");
  write(run / "summary.json", summary);
  expect_state(RunState::Done, "");
  // A run a signal stopped early: redone (train replaces the folder), not counted done.
  fs::remove_all(run);
  fake_done(exp, runs[0], runs[0].config_hash, "interrupted");
  expect_state(RunState::Partial, "interrupted");
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
  for (const char* f :
       {"#SBATCH --array=0-11\n", "#SBATCH --ntasks=2\n", "#SBATCH --job-name=cnnscale-s\n",
        "#SBATCH --output=/res/s/slurm-%A_%a.out", "cd '/work dir'\n", "task=${SLURM_ARRAY_TASK_ID:-0}\n",
        "exec /opt/cnnscale sweep /exp/s.yaml --results /res solver.lr=0.1 --only batch=4 "
        "--run-index \"$run\"\n"})
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

// ---- multi-node scripts and Slurm allocations ----------------------------------------------------

// The study's scaling curve: 1 to 8 GPUs, twice (runs 0-3 are the first repeat, 4-7 the second).
Experiment gpu_experiment(const std::string& gpus, const HostInfo& host) {
  return parse_experiment_text(
      "name: g\ndevice: gpu\ndataset: synthetic\niterations: 3\n"
      "matrix: {network: lenet, batch: [64], gpus: " +
          gpus + ", repeats: 2}\n",
      "g.yaml", {}, host);
}
Experiment scaling() {
  return gpu_experiment("[1, 2, 4, 8]", HostInfo{std::nullopt, "", false});
}

// What a cluster of 4-GPU nodes gives a run of R ranks: nodes, tasks per node, GPUs per node.
RunResources on_4_gpu_nodes(int64_t ranks) {
  switch (ranks) {
    case 1:
      return {1, 1, 1, 1};
    case 2:
      return {1, 2, 2, 2};
    case 4:
      return {1, 4, 4, 4};
    case 8:
      return {2, 8, 4, 4};
  }
  ADD_FAILURE() << "no expectation for " << ranks << " ranks";
  return {};
}

// The value of `--flag=value` (or of `flag value`) in a logged command line; "" when absent.
std::string option(const std::string& line, const std::string& flag) {
  std::istringstream is(line);
  for (std::string w, prev; is >> w; prev = w) {
    if (w.rfind(flag + "=", 0) == 0) return w.substr(flag.size() + 1);
    if (prev == flag) return w;
  }
  return "";
}

std::vector<size_t> run_list(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ':');) out.push_back(std::stoul(item));
  return out;
}

TEST(SweepEmit, RunsAreGroupedByWhatTheyNeed) {
  Experiment e = scaling();
  auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 8u);
  auto groups = resource_groups(e, runs, 4);
  ASSERT_EQ(groups.size(), 4u);
  const std::vector<std::vector<size_t>> expected_runs = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (size_t i = 0; i < groups.size(); ++i) {
    EXPECT_EQ(groups[i].runs, expected_runs[i]) << i;
    EXPECT_EQ(groups[i].need, on_4_gpu_nodes(runs[groups[i].runs[0]].ranks)) << i;
  }
  // Without --gpus-per-node every run is on one node, as before.
  EXPECT_EQ(resource_groups(e, runs, 0).back().need, (RunResources{1, 8, 8, 8}));
  // 6 ranks on 4-GPU nodes: two nodes, at most 4 ranks on each.
  Experiment six = gpu_experiment("[6]", HostInfo{std::nullopt, "", false});
  EXPECT_EQ(run_resources(six, expand_runs(six)[0], 4), (RunResources{2, 6, 4, 4}));
  // A gpu_mix stays on its node with the GPUs up to its highest index; more than a node has is refused.
  Experiment mix = parse_experiment_text(
      "name: m\ndevice: gpu\ndataset: synthetic\niterations: 3\n"
      "matrix: {network: lenet, batch: [64], gpu_mix: [[0, 2]], repeats: 1}\n",
      "m.yaml", {}, HostInfo{std::nullopt, "", false});
  const auto mix_runs = expand_runs(mix);
  const RunSpec& mix_run = mix_runs[0];
  EXPECT_EQ(run_resources(mix, mix_run, 4), (RunResources{1, 2, 2, 3}));
  EXPECT_EQ(run_resources(mix, mix_run, 0), (RunResources{1, 2, 2, 3}));
  try {
    run_resources(mix, mix_run, 2);
    ADD_FAILURE() << "a gpu_mix beyond a node's GPUs was accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("--gpus-per-node 2: run " + mix_run.id + " uses GPUs 0,2"),
              std::string::npos)
        << err.what();
  }
  EmitRequest req{"slurm", "/opt/cnnscale", "/exp/m.yaml", "/res", "/w", {}, {}};
  req.gpus_per_node = 2;
  EXPECT_THROW(emit_script(req, mix, mix_runs), ConfigError);
  // CPU ranks ask for no GPU and ignore the GPUs per node: one node.
  Experiment cpu = load({"matrix.gpus=[8]", "matrix.batch=[8]"});
  EXPECT_EQ(run_resources(cpu, expand_runs(cpu)[0], 4), (RunResources{1, 8, 8, 0}));
}

TEST(SweepEmit, HeaderAsksForTheLargestGroup) {
  TempDir dir;
  Experiment e = scaling();
  auto runs = expand_runs(e);
  EmitRequest req{"slurm", "/opt/cnnscale", "/exp/g.yaml", "/res", "/w", {}, {}};
  req.gpus_per_node = 4;
  const std::string slurm = emit_script(req, e, runs);
  for (const char* f :
       {"#SBATCH --array=0-7\n#SBATCH --nodes=2\n#SBATCH --ntasks=8\n#SBATCH --ntasks-per-node=4\n"
        "#SBATCH --gpus-per-node=4\n",
        "# Experiment 'g' (/exp/g.yaml): 8 run(s) in 4 resource group(s):\n",
        "#   2 run(s) of 1 rank(s) on 1 node(s) x 1 GPU(s): runs 0,4\n",
        "#   2 run(s) of 8 rank(s) on 2 node(s) x 4 GPU(s): runs 3,7\n", "bash FILE", "sbatch FILE",
        "set -euo pipefail\n", "export NCCL_NVLS_ENABLE=\"${NCCL_NVLS_ENABLE:-0}\"", "cd /w\n", "mkdir -p /res/g\n"})
    EXPECT_NE(slurm.find(f), std::string::npos) << slurm << "\nlacks: " << f;
  req.kind = "pbs";
  const std::string pbs = emit_script(req, e, runs);
  for (const char* f : {"#PBS -J 0-7\n", "#PBS -l select=2:ncpus=4:mpiprocs=4:ngpus=4\n", "qsub FILE",
                        "#   2 run(s) of 2 rank(s) on 1 node(s) x 2 GPU(s): runs 1,5\n", "--hostfile $PBS_NODEFILE"})
    EXPECT_NE(pbs.find(f), std::string::npos) << pbs << "\nlacks: " << f;
  for (const auto& [name, text] : {std::pair{"g.sbatch", slurm}, std::pair{"g.pbs", pbs}}) {
    write(dir.file(name), text);
    EXPECT_EQ(shell("bash -n " + dir.file(name)).exit_code, 0) << text;
  }
  // Without --gpus-per-node: one node per run, the largest run's GPUs on it.
  req.gpus_per_node = 0;
  const std::string one_node = emit_script(req, e, runs);
  EXPECT_NE(one_node.find("#PBS -l select=1:ncpus=8:mpiprocs=8:ngpus=8\n"), std::string::npos) << one_node;
  EXPECT_EQ(one_node.find("--hostfile"), std::string::npos) << one_node;
  // device: auto is pinned as decided here, so a small task cannot decide otherwise.
  Experiment quick = parse_experiment_text(
      "name: q\ndevice: auto\ndataset: synthetic\niterations: 3\nmatrix: {network: lenet, batch: [64], gpus: [1, 2]}\n",
      "q.yaml", {}, HostInfo{2, "x", false});
  ASSERT_EQ(quick.device, "gpu");
  EXPECT_NE(emit_script(req, quick, expand_runs(quick)).find(" device=gpu --run-index \"$run\"\n"), std::string::npos);
}

// Fake schedulers: each call appends its arguments to LOG (qsub also how many '#PBS -J' lines and
// exec lines the script on its stdin has) and answers like the real one.
const char* kFakeSbatch = R"(#!/bin/sh
echo "$*" >> "$FAKE_LOG"
echo "Submitted batch job $$"
)";
const char* kFakeQsub = R"sh(#!/bin/sh
script=$(cat)
jobs=$(printf '%s\n' "$script" | grep -c '^#PBS -J')
execs=$(printf '%s\n' "$script" | grep -c '^exec ')
echo "$* J=$jobs E=$execs" >> "$FAKE_LOG"
echo "$$.pbs"
)sh";

TEST(SweepEmit, BashFileSubmitsOneArrayPerGroup) {
  TempDir dir;
  write_script(dir.file("bin/sbatch"), kFakeSbatch);
  write_script(dir.file("bin/qsub"), kFakeQsub);
  Experiment e = scaling();
  const auto all = expand_runs(e);
  // PBS gets a plan of 7 runs, so that its 8-rank group has one run: a plain job, not an array.
  for (const std::string kind : {"slurm", "pbs"}) {
    SCOPED_TRACE(kind);
    const bool slurm = kind == "slurm";
    const std::vector<RunSpec> runs(all.begin(), all.end() - (slurm ? 0 : 1));
    EmitRequest req{kind, "/opt/cnnscale", "/exp/g.yaml", dir.file("res"), dir.str(), {}, {}};
    req.gpus_per_node = 4;
    const std::string file = dir.file("g." + kind);
    write(file, emit_script(req, e, runs));
    const std::string log = dir.file(kind + ".log");
    auto r = shell("env -u SLURM_JOB_ID -u PBS_JOBID -u CNNSCALE_RUN_LIST FAKE_LOG=" + log +
                   " PATH=" + dir.file("bin") + ":\"$PATH\" bash " + file);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::is_directory(dir.file("res/g")));  // the output files' folder
    const auto printed = lines_of(r.out);
    const auto calls = lines_of(slurp(log));
    ASSERT_EQ(calls.size(), 4u) << slurp(log);
    ASSERT_EQ(printed.size(), 4u) << r.out;
    std::multiset<size_t> covered;
    std::set<int64_t> rank_counts;
    for (size_t i = 0; i < calls.size(); ++i) {
      const std::string& c = calls[i];
      EXPECT_NE(printed[i].find(slurm ? ": Submitted batch job " : ".pbs"), std::string::npos) << printed[i];
      const std::string prefix = slurm ? "ALL,CNNSCALE_RUN_LIST=" : "CNNSCALE_RUN_LIST=";
      const std::string passed = option(c, slurm ? "--export" : "-v");
      ASSERT_EQ(passed.rfind(prefix, 0), 0u) << c;
      const std::string list_text = passed.substr(prefix.size());
      const auto list = run_list(list_text);
      ASSERT_FALSE(list.empty()) << c;
      const int64_t ranks = runs[list[0]].ranks;
      rank_counts.insert(ranks);
      for (size_t run : list) {
        ASSERT_LT(run, runs.size()) << c;
        EXPECT_EQ(runs[run].ranks, ranks) << c;
        covered.insert(run);
      }
      const RunResources need = on_4_gpu_nodes(ranks);
      if (slurm) {
        EXPECT_EQ(option(c, "--array"), fmt::format("0-{}", list.size() - 1)) << c;
        EXPECT_EQ(option(c, "--nodes"), std::to_string(need.nodes)) << c;
        EXPECT_EQ(option(c, "--ntasks"), std::to_string(need.ntasks)) << c;
        EXPECT_EQ(option(c, "--ntasks-per-node"), std::to_string(need.tasks_per_node)) << c;
        EXPECT_EQ(option(c, "--gpus-per-node"), std::to_string(need.gpus_per_node)) << c;
        EXPECT_EQ(c.substr(c.rfind(' ') + 1), file) << c;  // the script itself
      } else {
        EXPECT_EQ(option(c, "-J"), list.size() > 1 ? fmt::format("0-{}", list.size() - 1) : "") << c;
        EXPECT_EQ(option(c, "-l"), fmt::format("select={}:ncpus={}:mpiprocs={}:ngpus={}", need.nodes,
                                               need.tasks_per_node, need.tasks_per_node, need.gpus_per_node))
            << c;
        EXPECT_NE(c.find(" J=0 E=1"), std::string::npos) << c;  // the script, without its '#PBS -J'
      }
    }
    EXPECT_EQ(rank_counts, (std::set<int64_t>{1, 2, 4, 8}));  // one submission per GPU count
    std::multiset<size_t> every;
    for (size_t i = 0; i < runs.size(); ++i) every.insert(i);
    EXPECT_EQ(covered, every);  // every run exactly once
  }
  // A refused submission stops the script (exit 1) and says which group.
  write_script(dir.file("bin/sbatch"), "#!/bin/sh\necho 'sbatch: error: invalid partition' >&2\nexit 1\n");
  auto r = shell("env -u SLURM_JOB_ID FAKE_LOG=/dev/null PATH=" + dir.file("bin") + ":\"$PATH\" bash " +
                 dir.file("g.slurm"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cnnscale: sbatch failed for 2 run(s) of 1 rank(s)"), std::string::npos) << r.err;
}

TEST(SweepEmit, ArrayTaskRunsItsListedRun) {
  TempDir dir;
  // A stand-in for cnnscale: prints what the task would run.
  write_script(dir.file("fake-cnnscale"), "#!/bin/sh\necho \"$@\"\necho \"MPIRUN_ARGS=${MPIRUN_ARGS:-}\"\n");
  Experiment e = scaling();
  const auto runs = expand_runs(e);
  EmitRequest req{"slurm", dir.file("fake-cnnscale"), "/exp/g.yaml", dir.file("res"), dir.str(), {"seed=2"}, {}};
  req.gpus_per_node = 4;
  write(dir.file("g.slurm"), emit_script(req, e, runs));
  req.kind = "pbs";
  write(dir.file("g.pbs"), emit_script(req, e, runs));
  const std::string expected = "sweep /exp/g.yaml --results " + dir.file("res") + " seed=2 --run-index ";
  auto task = [&](const std::string& env, const std::string& script) {
    return shell("env -u SLURM_ARRAY_TASK_ID -u PBS_ARRAY_INDEX -u CNNSCALE_RUN_LIST -u MPIRUN_ARGS " + env + " bash " +
                 dir.file(script));
  };
  auto r = task("SLURM_JOB_ID=9 SLURM_ARRAY_TASK_ID=1 CNNSCALE_RUN_LIST=3:7", "g.slurm");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected + "7\nMPIRUN_ARGS=\n");
  r = task("SLURM_JOB_ID=9 SLURM_ARRAY_TASK_ID=5", "g.slurm");  // `sbatch FILE`: task T is run T
  EXPECT_EQ(r.out, expected + "5\nMPIRUN_ARGS=\n") << r.err;
  r = task("SLURM_JOB_ID=9 SLURM_ARRAY_TASK_ID=2 CNNSCALE_RUN_LIST=3:7", "g.slurm");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find("array task 2 has no run: CNNSCALE_RUN_LIST=3:7 lists 2"), std::string::npos) << r.err;
  r = task("SLURM_JOB_ID=9 SLURM_ARRAY_TASK_ID=8", "g.slurm");
  EXPECT_EQ(r.exit_code, 2);
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find("run index '8' is out of range: the sweep has 8 run(s) (0 to 7)"), std::string::npos) << r.err;
  r = task("SLURM_JOB_ID=9 SLURM_ARRAY_TASK_ID=0 CNNSCALE_RUN_LIST=3:x", "g.slurm");
  EXPECT_EQ(r.exit_code, 0) << r.err;  // task 0 is run 3; the bad entry belongs to task 1
  r = task("SLURM_JOB_ID=9 SLURM_ARRAY_TASK_ID=1 CNNSCALE_RUN_LIST=3:x", "g.slurm");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err_lines().size(), 1u) << r.err;
  // PBS: a group of one run is a plain job (no PBS_ARRAY_INDEX); on two nodes mpirun gets the node file.
  write(dir.file("nodes"), "n1\nn1\nn1\nn1\nn2\nn2\nn2\nn2\n");
  r = task("PBS_JOBID=7.pbs CNNSCALE_RUN_LIST=3 PBS_NODEFILE=" + dir.file("nodes"), "g.pbs");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected + "3\nMPIRUN_ARGS=--hostfile " + dir.file("nodes") + " \n");
  write(dir.file("nodes"), "n1\nn1\n");
  r = task("PBS_JOBID=7.pbs PBS_ARRAY_INDEX=1 CNNSCALE_RUN_LIST=1:5 PBS_NODEFILE=" + dir.file("nodes"), "g.pbs");
  EXPECT_EQ(r.out, expected + "5\nMPIRUN_ARGS=\n") << r.err;
}

TEST(SweepHost, SlurmAllocationIsTheCapacity) {
  const HostInfo h = detect_in({{"SLURM_JOB_ID", "42"},
                                {"SLURM_JOB_NUM_NODES", "2"},
                                {"SLURM_GPUS_ON_NODE", "4"},
                                {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
                                {"MPIRUN_ARGS", "--hostfile h"}});  // srun does the launching here
  EXPECT_TRUE(h.in_slurm);
  EXPECT_EQ(h.nodes, 2);
  EXPECT_EQ(h.gpus, 8);
  EXPECT_EQ(h.gpus_per_node, 4);
  EXPECT_EQ(h.gpus_source, "SLURM_GPUS_ON_NODE=4");
  EXPECT_FALSE(h.hosts_from_launcher);
  EXPECT_NO_THROW(gpu_experiment("[8]", h));
  try {
    gpu_experiment("[16]", h);
    ADD_FAILURE() << "16 ranks in an allocation of 8 GPUs were accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what())
                  .find("matrix.gpus[0]: 16 rank(s) need 16 GPU(s), but the Slurm allocation has 8 (2 node(s) x 4 "
                        "GPU(s): SLURM_GPUS_ON_NODE=4)"),
              std::string::npos)
        << err.what();
  }
  // A gpu_mix names GPUs of one node: 4 per node here, whatever the allocation's total.
  try {
    parse_experiment_text(
        "name: m\ndevice: gpu\ndataset: synthetic\niterations: 3\n"
        "matrix: {network: lenet, batch: [64], gpu_mix: [[0, 4]]}\n",
        "m.yaml", {}, h);
    ADD_FAILURE() << "GPU 4 of a 4-GPU node was accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("GPU 4 does not exist: the Slurm allocation has 4 per node"),
              std::string::npos)
        << err.what();
  }

  // Other sources of the GPUs per node: SLURM_GPUS_PER_NODE with a type, else this node's devices.
  const HostInfo typed = detect_in({{"SLURM_JOB_ID", "42"}, {"SLURM_NNODES", "3"}, {"SLURM_GPUS_PER_NODE", "h200:4"}});
  EXPECT_EQ(typed.nodes, 3);
  EXPECT_EQ(typed.gpus, 12);
  EXPECT_EQ(typed.gpus_source, "SLURM_GPUS_PER_NODE=h200:4");
  const HostInfo visible =
      detect_in({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NUM_NODES", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_EQ(visible.gpus, 4);
  EXPECT_EQ(visible.gpus_per_node, 2);

  // srun keeps a run on as few nodes as it fits on.
  Experiment e = gpu_experiment("[2, 8]", h);
  auto runs = expand_runs(e);
  LaunchEnv env;
  env.self = "/bin/cnnscale";
  env.in_slurm = h.in_slurm;
  env.gpus_per_node = h.gpus_per_node;
  auto has = [](const std::vector<std::string>& cmd, const std::string& arg) {
    return std::find(cmd.begin(), cmd.end(), arg) != cmd.end();
  };
  const auto two = launch_command(e, runs[0], "/r", env);
  ASSERT_EQ(runs[0].ranks, 2);
  EXPECT_EQ(two[0], "srun");
  for (const char* a : {"--ntasks=2", "--nodes=1", "--ntasks-per-node=2"})
    EXPECT_TRUE(has(two, a)) << fmt::format("{}", fmt::join(two, " ")) << " lacks " << a;
  const auto eight = launch_command(e, runs[1], "/r", env);
  ASSERT_EQ(runs[1].ranks, 8);
  for (const char* a : {"--ntasks=8", "--nodes=2", "--ntasks-per-node=4"})
    EXPECT_TRUE(has(eight, a)) << fmt::format("{}", fmt::join(eight, " ")) << " lacks " << a;
  env.gpus_per_node.reset();  // unknown: srun decides, as before
  const auto unknown = launch_command(e, runs[1], "/r", env);
  EXPECT_FALSE(
      std::any_of(unknown.begin(), unknown.end(), [](const std::string& a) { return a.rfind("--nodes", 0) == 0; }));
}

TEST(SweepHost, MpirunHostListSkipsTheOneNodeCheck) {
  const HostInfo local = detect_in({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"MPIRUN_ARGS", "--bind-to none"}});
  EXPECT_FALSE(local.in_slurm);
  EXPECT_FALSE(local.hosts_from_launcher);
  try {
    gpu_experiment("[8]", local);
    ADD_FAILURE() << "8 ranks on a 4-GPU host were accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what())
                  .find("8 rank(s) need 8 GPU(s) on one node, but only 4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3)"),
              std::string::npos)
        << err.what();
  }
  for (const char* args : {"--hostfile h", "-hostfile h", "--machinefile m", "-H a,b", "--host a,b", "--host=a,b"}) {
    const HostInfo spread = detect_in({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"MPIRUN_ARGS", args}});
    EXPECT_TRUE(spread.hosts_from_launcher) << args;
    EXPECT_NO_THROW(gpu_experiment("[8]", spread)) << args;
  }
}

// A stand-in for `cnnscale train`: writes the finished folder the sweep looks for (run.h5 copied from
// $FAKE_TRAIN_H5, a real results file), fails for batch 8.
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

TEST(SweepCli, ArrayTaskIsCheckedAgainstItsOwnRunOnly) {
  TempDir dir;
  // A node with 2 GPUs, outside Slurm, no host list: a task of the 4-rank group would not fit here,
  // the 2-rank one does, whatever the rest of the matrix needs.
  ScopedEnv gpus("CUDA_VISIBLE_DEVICES", "0,1"), job("SLURM_JOB_ID", nullptr), hosts("MPIRUN_ARGS", nullptr);
  const std::string g = fixture("bad_gpus.yaml");
  auto fits = testing::run_cnnscale({"sweep", g, "--run-index", "1", "--dry-run", "--results", dir.str()});
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_NE(fits.out.find("bad_gpus.yaml): 1 run(s)"), std::string::npos) << fits.out;
  EXPECT_NE(fits.out.find("lenet-b64-g2-"), std::string::npos) << fits.out;
  expect_one_line_error(
      testing::run_cnnscale({"sweep", g, "--run-index", "2", "--dry-run", "--results", dir.str()}),
      {"--run-index 2: run lenet-b64-g4-", ": 4 rank(s) need 4 GPU(s) on one node, but only 2 visible"});
}

TEST(SweepCli, EmitFileIsWholeAndExecutable) {
  TempDir dir;
  fs::create_directories(dir.file("out"));
  const std::string script = dir.file("out/t.sbatch");
  auto r = testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "--emit", "slurm", "--gpus-per-node", "4",
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
  EXPECT_NE(text.find("\nexec "), std::string::npos) << text;
  EXPECT_NE(r.err.find("bash " + script), std::string::npos) << r.err;
  EXPECT_EQ(shell("bash -n " + script).exit_code, 0) << text;
  expect_one_line_error(testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "--gpus-per-node", "4"}),
                        {"--gpus-per-node needs --emit slurm|pbs"});
  EXPECT_EQ(
      testing::run_cnnscale({"sweep", fixture("tiny_cpu.yaml"), "--emit", "slurm", "--gpus-per-node", "0"}).exit_code,
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
  auto r = sweep_in(dir.file("cwd"), dir.file("env-root"), {fixture("tiny_cpu.yaml"), "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("results in " + dir.file("env-root") + "/tiny_cpu\n"), std::string::npos) << r.out;
  auto emitted = sweep_in(dir.file("cwd"), dir.file("env-root"), {fixture("tiny_cpu.yaml"), "--emit", "slurm"});
  ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
  EXPECT_NE(emitted.out.find(" --results " + dir.file("env-root") + " "), std::string::npos) << emitted.out;
  auto given = sweep_in(dir.file("cwd"), dir.file("env-root"),
                        {fixture("tiny_cpu.yaml"), "--dry-run", "--results", dir.file("flag-root")});
  EXPECT_NE(given.out.find("results in " + dir.file("flag-root") + "/tiny_cpu\n"), std::string::npos) << given.out;
  auto unset = sweep_in(dir.file("cwd"), "", {fixture("tiny_cpu.yaml"), "--dry-run"});
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
  auto second = sweep_in(dir.str(), "", {fixture("tiny_cpu.yaml"), "--results", dir.file("res")});
  EXPECT_EQ(second.exit_code, 1) << second.err;
  ASSERT_EQ(second.err_lines().size(), 1u) << second.err;
  EXPECT_EQ(second.err_lines()[0], "cnnscale: error: experiment 'tiny_cpu' is already being swept by " + me +
                                       " (lock " + sweep_lock_path(exp) + "); wait for it to finish, or stop it");
  EXPECT_FALSE(fs::exists(fs::path(exp) / "sweep.json"));  // refused before touching anything

  // An array task of run 2 while run 0's task (this process) holds its run.
  auto runs = expand_runs(load_experiment(fixture("tiny_cpu.yaml"), {}, HostInfo{std::nullopt, "", true}));
  auto task0 = FileLock::try_lock(run_lock_path(exp, runs[0].id), &holder);
  ASSERT_TRUE(task0);
  auto same = sweep_in(dir.str(), "", {fixture("tiny_cpu.yaml"), "--run-index", "0", "--results", dir.file("res")});
  EXPECT_EQ(same.exit_code, 1) << same.err;
  ASSERT_EQ(same.err_lines().size(), 1u) << same.err;
  EXPECT_EQ(same.err_lines()[0], "cnnscale: error: run " + runs[0].id +
                                     " of experiment 'tiny_cpu' is already being "
                                     "run by " +
                                     me + " (lock " + run_lock_path(exp, runs[0].id) + ")");
  ASSERT_EQ(runs[2].ranks, 1);  // a one-rank run: no mpirun needed here
  auto other = sweep_in(dir.str(), "", {fixture("tiny_cpu.yaml"), "--run-index", "2", "--results", dir.file("res")});
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
