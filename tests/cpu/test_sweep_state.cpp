// Sweep bookkeeping without training: run states from fake run folders, the done marker and its
// checksums, the refusal of a changed configuration, and the train/launcher command lines.
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

// A finished run records the models of its GPUs (summary.json system.gpus[].name); a sweep resumed
// where none of the folder's models is visible is refused with one line naming a model, a run that
// has it and the models visible here. One of them visible is enough (a task on a node of two
// models may see one). CPU runs (no system.gpus), interrupted runs and unreadable summaries name
// none.
TEST(SweepState, FinishedRunsOnAnotherGpuModelAreNamed) {
  TempDir dir;
  const fs::path exp = dir.str();
  const auto summary = [&](const std::string& id, const std::string& system) {
    fs::create_directories(exp / id);
    write((exp / id / "summary.json").string(), R"({"status": "complete", "system": )" + system + "}\n");
  };
  summary("a-r1", R"({"gpus": [{"name": "NVIDIA H100 80GB HBM3", "rank": 0}, {"name": "NVIDIA H100 80GB HBM3"}]})");
  summary("a-r2", R"({"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]})");
  summary("b-r1", R"({"gpus": [{"name": "NVIDIA H200"}]})");
  summary("cpu-r1", R"({"cpu": "x86-64"})");
  fs::create_directories(exp / "stopped-r1");
  write((exp / "stopped-r1" / "summary.json").string(),
        R"({"status": "interrupted", "system": {"gpus": [{"name": "NVIDIA A100"}]}})");
  fs::create_directories(exp / "broken-r1");
  write((exp / "broken-r1" / "summary.json").string(), "{ not json");
  const auto models =
      finished_run_gpu_models(exp.string(), {"a-r1", "a-r2", "b-r1", "cpu-r1", "stopped-r1", "broken-r1", "none"});
  const std::map<std::string, std::string> expected = {{"NVIDIA H100 80GB HBM3", "a-r1"}, {"NVIDIA H200", "b-r1"}};
  EXPECT_EQ(models, expected);
  // Only the runs asked about count (the sweep passes its finished ones).
  EXPECT_EQ(finished_run_gpu_models(exp.string(), {"b-r1"}).size(), 1u);

  EXPECT_EQ(other_gpu_models_problem(exp.string(), models, {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}), "");
  EXPECT_EQ(other_gpu_models_problem(exp.string(), models, {"NVIDIA H200"}), "");  // one of the two
  EXPECT_EQ(other_gpu_models_problem(exp.string(), models, {}), "");           // this node's GPUs unknown
  EXPECT_EQ(other_gpu_models_problem(exp.string(), {}, {"NVIDIA H200"}), "");  // nothing finished
  const auto h100_only = finished_run_gpu_models(exp.string(), {"a-r1", "a-r2"});
  const std::string why = other_gpu_models_problem(exp.string(), h100_only, {"NVIDIA H200"});
  for (const std::string& part : {exp.string(), std::string("measured on NVIDIA H100 80GB HBM3 (run a-r1)"),
                                  std::string("the GPUs visible here are NVIDIA H200"), std::string("--results"),
                                  std::string("--allow-other-gpus")})
    EXPECT_NE(why.find(part), std::string::npos) << why << "\nlacks: " << part;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
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
        "\n/opt/cnnscale sweep /exp/s.yaml --results /res solver.lr=0.1 --only batch=4 "
        "--run-index \"$run\" &\n"})
    EXPECT_NE(slurm.find(f), std::string::npos) << slurm << "\nlacks: " << f;
  EXPECT_EQ(slurm.find("--gpus-per-node"), std::string::npos);  // a CPU experiment asks for no GPU
  EXPECT_EQ(slurm.find("--allow-other-gpus"), std::string::npos);
  // sweep --emit --allow-other-gpus: every task resumes as the user allowed.
  EmitRequest allow = req;
  allow.allow_other_gpus = true;
  EXPECT_NE(emit_script(allow, e, runs).find("--only batch=4 --allow-other-gpus --run-index"), std::string::npos)
      << emit_script(allow, e, runs);
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

}  // namespace
}  // namespace cnnscale
