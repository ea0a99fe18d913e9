// Inference experiments (mode: infer): what the file may say and what it refuses (each with its
// location), the runs it expands to, each run's `cnnscale infer` command line, and a finished run's
// result file counted done, a damaged one redone, one of another run refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

const std::string kSweep = R"(name: inf
mode: infer
device: gpu
infer:
  batch: [1, 8, max]
  fill: gaussian
  seconds: 2
  latency_seconds: 0.5
  graph: false
matrix:
  network: [lenet, resnet18]
  precision: [fp32, bf16]
  gpus: [1, 2]
  gpu_mix: [[1], [0, 2]]
  repeats: 2
)";

TEST(InferExperiment, ExpandsToOneInferRunPerNetworkRankSetPrecisionAndRepeat) {
  const Experiment e = parse(kSweep, {}, gpu_host(4));
  EXPECT_EQ(e.mode, "infer");
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u * 2u * 4u * 2u);  // repeats x networks x rank sets x precisions
  for (const RunSpec& r : runs) {
    EXPECT_TRUE(r.infer);
    EXPECT_EQ(r.batch, 0);
    EXPECT_EQ(r.iterations, 0);
  }
  EXPECT_EQ(runs[0].id.rfind("lenet-infer-g1-fp32-r1-", 0), 0u) << runs[0].id;
  EXPECT_EQ(runs[1].id.rfind("lenet-infer-g1-bf16-r1-", 0), 0u) << runs[1].id;
  EXPECT_EQ(runs[4].id.rfind("lenet-infer-g1-m1-fp32-r1-", 0), 0u) << runs[4].id;
  EXPECT_EQ(runs[6].id.rfind("lenet-infer-g2-m0.2-fp32-r1-", 0), 0u) << runs[6].id;
  // Repeats are the same configuration: the same hash, another id.
  EXPECT_EQ(runs[0].config_hash, runs[16].config_hash);
  EXPECT_NE(runs[0].id, runs[16].id);
  // What the runs measure is part of their configuration: another window is another run.
  const Experiment longer = parse(kSweep, {"infer.seconds=3"}, gpu_host(4));
  EXPECT_NE(expand_runs(longer)[0].config_hash, runs[0].config_hash);
  EXPECT_NE(longer.fixed_hash(), e.fixed_hash());
}

TEST(InferExperiment, EachRunIsOneInferCommandOfTheWholeBatchList) {
  const Experiment e = parse(kSweep, {}, gpu_host(4));
  const std::vector<RunSpec> runs = expand_runs(e);
  const std::vector<std::string> one = infer_arguments(e, runs[1], "/r");
  EXPECT_EQ(one[0], "infer");
  EXPECT_EQ(flag_value(one, "--batch"), "1,8,max");
  EXPECT_EQ(flag_value(one, "--device"), "gpu");
  EXPECT_EQ(flag_value(one, "--precision"), "bf16");
  EXPECT_EQ(flag_value(one, "--fill"), "gaussian");
  EXPECT_EQ(flag_value(one, "--seconds"), "2");
  EXPECT_EQ(flag_value(one, "--latency-seconds"), "0.5");
  EXPECT_EQ(flag_value(one, "--results"), "/r");
  EXPECT_EQ(flag_value(one, "--experiment"), "inf");
  EXPECT_EQ(flag_value(one, "--run-id"), runs[1].id);
  EXPECT_EQ(flag_value(one, "--gpus"), "<absent>");
  EXPECT_NE(std::find(one.begin(), one.end(), "--no-graph"), one.end());
  EXPECT_EQ(std::find(one.begin(), one.end(), "--no-fold"), one.end());
  EXPECT_EQ(std::find(one.begin(), one.end(), "--no-fuse"), one.end());
  const Experiment unfused = parse(kSweep, {"infer.fuse=false"}, gpu_host(4));
  const std::vector<std::string> apart = infer_arguments(unfused, expand_runs(unfused)[1], "/r");
  EXPECT_NE(std::find(apart.begin(), apart.end(), "--no-fuse"), apart.end());
  EXPECT_NE(unfused.fixed_hash(), e.fixed_hash());
  // A one-GPU mix names its GPU; a mix of several binds them under mpirun.
  EXPECT_EQ(flag_value(infer_arguments(e, runs[4], "/r"), "--device"), "gpu:1");
  const std::vector<std::string> pair = infer_arguments(e, runs[6], "/r");
  EXPECT_EQ(flag_value(pair, "--gpus"), "0,2");
  LaunchEnv env;
  env.self = "/bin/cnnscale";
  const std::vector<std::string> cmd = launch_command(e, runs[6], "/r", env);
  EXPECT_EQ(cmd[0], "mpirun");
  EXPECT_EQ(flag_value(cmd, "-np"), "2");
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "infer"), cmd.end());
}

TEST(InferExperiment, WhatOnlyTrainingHasIsRefusedWithItsLocation) {
  expect_error(std::string(kSweep) + "iterations: 10\n", {"t.yaml:16:13: iterations: applies to training experiments"});
  expect_error(std::string(kSweep) + "dataset: synthetic\n", {"t.yaml:16:10: dataset: applies to training"});
  expect_error(std::string(kSweep) + "solver: {lr: 0.1}\n", {"solver: applies to training"});
  expect_error(kSweep, {"matrix.batch: applies to training experiments"}, {"matrix.batch=[8]"}, gpu_host(4));
  expect_error(kSweep, {"matrix.split: applies to training"}, {"matrix.split=[even]"}, gpu_host(4));
  expect_error(kSweep, {"matrix.gpu_mix: SM partitions"}, {"matrix.gpu_mix=[[{gpu: 0, sms: 66}]]"}, gpu_host(4));
  expect_error(kSweep, {"infer.batch[1]: max is the largest batch that fits, so it comes last"},
               {"infer.batch=[max, 8]"}, gpu_host(4));
  expect_error(kSweep, {"infer.batch[1]: batch 1 is listed twice"}, {"infer.batch=[1, 1]"}, gpu_host(4));
  expect_error(kSweep, {"infer.seconds"}, {"infer.seconds=0"}, gpu_host(4));
  expect_error(kSweep, {"infer.fill"}, {"infer.fill=zero"}, gpu_host(4));
  expect_error(kSweep, {"infer.batches: unknown key"}, {"infer.batches=[1]"}, gpu_host(4));
  expect_error(kSweep, {"'--scenario'", "offline"}, {"extra_args=[--scenario=server]"}, gpu_host(4));
  expect_error(kSweep, {"'--batch' is set by infer.batch"}, {"extra_args=[--batch=4]"}, gpu_host(4));
  expect_error(kSweep, {"'--seed' is set by seed"}, {"extra_args=[--seed, \"3\"]"}, gpu_host(4));
  expect_error(kSweep, {"'--no-fuse' is set by infer.fuse"}, {"extra_args=[--no-fuse]"}, gpu_host(4));
  expect_error(kSweep, {"'--rate'", "offline"}, {"extra_args=[--rate=10]"}, gpu_host(4));
  expect_error(kSweep, {"'--memory-limit'", "ending with max"}, {"infer.batch=[1, 8]", "extra_args=[--memory-limit=8]"},
               gpu_host(4));
  EXPECT_EQ(parse(kSweep, {"extra_args=[--memory-limit=8]"}, gpu_host(4)).extra_args.size(), 1u);
  expect_error(kSweep, {"extra_args[1]: '--memory-limit' is given twice (also extra_args[0])"},
               {"extra_args=[--memory-limit=8, --memory-limit=9]"}, gpu_host(4));
  // Precisions other than fp32 need GPUs, as in a training experiment.
  expect_error("name: c\nmode: infer\nmatrix: {network: lenet, precision: [fp32, bf16]}\n",
               {"t.yaml:3:44: matrix.precision[1]: precision 'bf16' runs on GPUs only"});
  // And a training experiment has no infer section.
  expect_error("name: t\ndataset: synthetic\niterations: 2\ninfer: {batch: [1]}\nmatrix: {network: lenet, batch: 2}\n",
               {"t.yaml:4:8: infer: applies to inference experiments: add 'mode: infer'"});
  expect_error("name: t\nmode: serve\nmatrix: {network: lenet}\n", {"t.yaml:2:7: mode:"});
}

TEST(InferExperiment, ItsResultFileDecidesWhetherARunIsDone) {
  TempDir dir;
  const Experiment e = parse("name: c\nmode: infer\nmatrix: {network: lenet}\n");
  const RunSpec run = expand_runs(e)[0];
  const std::string exp = experiment_dir(dir.str(), e);
  EXPECT_EQ(run_status(exp, run).state, RunState::Todo);
  fs::create_directories(fs::path(exp) / "infer");
  const std::string file = infer_run_file(exp, run);
  EXPECT_EQ(file, (fs::path(exp) / "infer" / (run.id + ".json")).string());
  auto write = [&](const std::string& text) { std::ofstream(file) << text; };
  write(R"({"format": "cnnscale-infer-1", "batches": [{"batch": 1}], "run_id": ")" + run.id + "\"}");
  EXPECT_EQ(run_status(exp, run).state, RunState::Done);
  write(R"({"format": "cnnscale-infer-1", "batches": [{"batch": 1}], "run_id": "another-run"})");
  EXPECT_EQ(run_status(exp, run).state, RunState::Conflict);
  // Not what the report reads: another format, or no batch (a scenario's file).
  write(R"({"format": "cnnscale-bench-1", "batches": [{"batch": 1}], "run_id": ")" + run.id + "\"}");
  EXPECT_EQ(run_status(exp, run).state, RunState::Corrupt);
  write(R"({"format": "cnnscale-infer-1", "batches": [], "run_id": ")" + run.id + "\"}");
  EXPECT_EQ(run_status(exp, run).state, RunState::Corrupt);
  write(R"({"format": "cnnscale-infer-1", "batc)");
  const RunStatus torn = run_status(exp, run);
  EXPECT_EQ(torn.state, RunState::Corrupt);
  EXPECT_NE(torn.detail.find("unreadable"), std::string::npos) << torn.detail;
}

// The plan of an inference sweep, and --only terms on axes it does not have refused, not matched
// against nothing.
TEST(InferExperiment, DryRunPlansItAndOnlyRefusesTrainingAxes) {
  TempDir dir;
  const std::string file = std::string(CNNSCALE_TEST_DATA) + "/experiments/tiny_infer.yaml";
  CliResult r = run_cnnscale({"sweep", file, "--dry-run", "--results", dir.str()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 inference run(s), device cpu, batch 1,2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lenet-infer-g2-fp32-r1-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# 2 to run, 0 already complete"), std::string::npos) << r.out;
  CliResult bad = run_cnnscale({"sweep", file, "--dry-run", "--only", "batch=1", "--results", dir.str()});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("an inference experiment has no 'batch'"), std::string::npos) << bad.err;
  CliResult gpus = run_cnnscale({"sweep", file, "--dry-run", "--only", "gpus=2", "--results", dir.str()});
  ASSERT_EQ(gpus.exit_code, 0) << gpus.err;
  EXPECT_NE(gpus.out.find("1 inference run(s)"), std::string::npos) << gpus.out;
}

// int8 runs: each gets its network's --calibration (a table, resolved and checked to exist when the
// file is read, or synthetic); the other precisions none; what cannot run is refused with its place.
TEST(InferExperiment, Int8RunsTakeTheirNetworksCalibration) {
  TempDir dir;
  const std::string table = dir.file("lenet-int8.json");
  std::ofstream(table) << "{}\n";
  const std::string text = "name: i8\nmode: infer\ndevice: cpu\ninfer:\n  batch: [1]\n  calibration: {lenet: " + table +
                           ", resnet18: synthetic}\nmatrix:\n  network: [lenet, resnet18]\n  precision: [fp32, "
                           "int8]\n  repeats: 1\n";
  const Experiment e = parse(text);
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[1].id.rfind("lenet-infer-g1-int8-r1-", 0), 0u) << runs[1].id;
  EXPECT_EQ(flag_value(infer_arguments(e, runs[0], "/r"), "--calibration"), "<absent>");
  EXPECT_EQ(flag_value(infer_arguments(e, runs[1], "/r"), "--calibration"), table);
  EXPECT_EQ(flag_value(infer_arguments(e, runs[1], "/r"), "--precision"), "int8");
  EXPECT_EQ(flag_value(infer_arguments(e, runs[3], "/r"), "--calibration"), "synthetic");
  // One value for every network; the table is part of an int8 run's configuration.
  const Experiment all = parse(text, {"infer.calibration=synthetic"});
  EXPECT_EQ(flag_value(infer_arguments(all, expand_runs(all)[1], "/r"), "--calibration"), "synthetic");
  EXPECT_NE(expand_runs(all)[1].config_hash, runs[1].config_hash);
  EXPECT_EQ(expand_runs(all)[0].config_hash, runs[0].config_hash);  // the fp32 run is the same run

  expect_error(text, {"matrix.precision[1]: int8 needs infer.calibration for resnet18"},
               {"infer.calibration={lenet: synthetic}"});
  expect_error(text, {"infer.calibration.lenet", "no calibration table", "missing.json"},
               {"infer.calibration={lenet: " + dir.file("missing.json") + ", resnet18: synthetic}"});
  expect_error(text, {"infer.calibration.alexnet: 'alexnet' is no network of matrix.network"},
               {"infer.calibration={alexnet: synthetic, lenet: synthetic, resnet18: synthetic}"});
  // Without int8 the tables are unused (a warning): the shipped file with int8 overridden away runs.
  const Experiment no_int8 = parse(text, {"matrix.precision=[fp32]"});
  EXPECT_EQ(flag_value(infer_arguments(no_int8, expand_runs(no_int8)[0], "/r"), "--calibration"), "<absent>");
  expect_error(text, {"'--calibration' is set by infer.calibration"}, {"extra_args=[--calibration=synthetic]"});
  expect_error("name: t\ndataset: synthetic\niterations: 2\nmatrix: {network: lenet, batch: 2, precision: [int8]}\n",
               {"matrix.precision[0]: int8 is an inference precision"});
}

// An int8 inference experiment swept end to end on the CPU: LeNet in fp32 and in int8 with the
// table each run measures on its own input; the int8 result says so, and report tables both.
TEST(InferExperiment, Int8SweepRunsAndIsReported) {
  TempDir dir;
  const std::string file = dir.file("i8.yaml");
  std::ofstream(file) << "name: i8\nmode: infer\ndevice: cpu\nseed: 2\ninfer:\n  batch: [2]\n  seconds: 0.2\n"
                         "  latency_seconds: 0.05\n  calibration: synthetic\nextra_args: [--warmup, \"1\"]\n"
                         "matrix:\n  network: [lenet]\n  precision: [fp32, int8]\n  repeats: 1\n";
  CliResult r = run_cnnscale({"sweep", file, "--results", dir.str()}, {"OPENBLAS_NUM_THREADS=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 ran, 0 already complete, 0 failed"), std::string::npos) << r.err;
  const Experiment e = load_experiment(file, {}, cpu_host());
  const RunSpec int8_run = expand_runs(e).at(1);
  std::ifstream in(infer_run_file(experiment_dir(dir.str(), e), int8_run));
  ASSERT_TRUE(in) << int8_run.id;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["precision"], "int8");
  EXPECT_EQ(j["int8"]["calibration"], "synthetic");
  EXPECT_EQ(j["int8"]["int8_layers"], nlohmann::json::array({"conv2", "ip1", "ip2"}));
  CliResult rep = run_cnnscale({"report", experiment_dir(dir.str(), e), "--no-plots"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  std::ifstream md(fs::path(experiment_dir(dir.str(), e)) / "report" / "inference.md");
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| int8 (synthetic table) |"), std::string::npos) << table;
  EXPECT_NE(table.find("no accuracy measured"), std::string::npos) << table;
  EXPECT_NE(table.find("| fp32 |"), std::string::npos) << table;
}

}  // namespace
}  // namespace cnnscale::testing
