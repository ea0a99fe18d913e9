// Sweep scripts for clusters: runs grouped by what they need, Slurm/PBS headers, submission against
// fake sbatch/qsub, array tasks against a fake cnnscale, and the capacity a Slurm allocation or an
// mpirun host list gives.
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
  EXPECT_NE(emit_script(req, quick, expand_runs(quick)).find(" device=gpu --run-index \"$run\" &\n"), std::string::npos);
}

// Fake schedulers: each call appends its arguments to LOG (qsub also how many '#PBS -J' lines and
// lines running the sweep the script on its stdin has) and answers like the real one.
const char* kFakeSbatch = R"(#!/bin/sh
echo "$*" >> "$FAKE_LOG"
echo "Submitted batch job $$"
)";
const char* kFakeQsub = R"sh(#!/bin/sh
script=$(cat)
jobs=$(printf '%s\n' "$script" | grep -c '^#PBS -J')
execs=$(printf '%s\n' "$script" | grep -c '^/opt/cnnscale sweep ')
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

}  // namespace
}  // namespace cnnscale
