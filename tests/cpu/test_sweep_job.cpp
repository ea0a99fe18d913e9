// The sweep's work as a library call (experiment/sweep_job.hpp), apart from cmd_sweep's flags and
// printing: what it selects, what it refuses before making anything, the script it writes, and the
// experiment's lock.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error_of.hpp"
#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "experiment/sweep_job.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Two CPU runs (batch 4 and 8) of one network.
const char* kTwoCpuRuns =
    "name: s\ndataset: synthetic\niterations: 3\nmatrix: {network: lenet, batch: [4, 8], gpus: [1], repeats: 1}\n";

HostInfo host_without_gpus() { return HostInfo{std::nullopt, "", true}; }

SweepRequest sweep_request_in(const TempDir& dir) {
  std::ofstream(dir.file("s.yaml")) << kTwoCpuRuns;
  SweepRequest req;
  req.file = dir.file("s.yaml");
  req.results = dir.file("results");
  return req;
}

// The ConfigError's line of plan_sweep(req), or "" when it plans.
std::string sweep_plan_error(const SweepRequest& req) {
  return testing::config_error_of([&] { plan_sweep(req, host_without_gpus()); });
}

TEST(SweepJob, PlanSelectsTheOnlyTermsAndTheRunIndex) {
  TempDir dir;
  SweepRequest req = sweep_request_in(dir);
  SweepPlan all = plan_sweep(req, host_without_gpus());
  ASSERT_EQ(all.runs.size(), 2u);
  EXPECT_EQ(all.exp_dir, (fs::path(req.results) / "s").string());
  EXPECT_EQ(all.other_gpus, "");  // a CPU experiment looks at no GPU model

  req.only = {"batch=8"};
  SweepPlan only = plan_sweep(req, host_without_gpus());
  ASSERT_EQ(only.runs.size(), 1u);
  EXPECT_EQ(only.runs[0].batch, 8);

  req.only = {};
  req.run_index = 1;
  SweepPlan one = plan_sweep(req, host_without_gpus());
  ASSERT_EQ(one.runs.size(), 1u);
  EXPECT_EQ(one.runs[0].id, all.runs[1].id);
  EXPECT_FALSE(fs::exists(req.results)) << "planning makes nothing";
}

TEST(SweepJob, PlanRefusesWhatCannotBeSelectedBeforeMakingAnything) {
  TempDir dir;
  SweepRequest req = sweep_request_in(dir);
  req.only = {"seconds=1"};
  EXPECT_EQ(sweep_plan_error(req), "--only seconds=...: 'seconds' is a key of inference experiments (infer.seconds)");
  req.only = {"batch=4"};
  req.run_index = 1;
  EXPECT_EQ(sweep_plan_error(req), "--run-index 1: the sweep has 1 run(s) (0 to 0)");
  req.only = {};
  req.overrides = {"matrix.batch=[0]"};
  EXPECT_NE(sweep_plan_error(req), "") << "the experiment's own checks refuse through the plan too";
  EXPECT_FALSE(fs::exists(req.results));
}

// --only's keys of training runs alone (only_point_keys) are the matrix axes an inference experiment
// has none of: refused there by --only, naming the keys it has, as by the experiment's schema. The
// messages list the keys as they always did.
TEST(SweepJob, OnlyRefusesOnAnInferenceSweepTheKeysOfTrainingRunsAlone) {
  TempDir dir;
  SweepRequest req = sweep_request_in(dir);
  std::ofstream(dir.file("inf.yaml")) << "name: inf\nmode: infer\ndevice: cpu\ninfer: {batch: [1]}\n"
                                         "matrix: {network: [lenet], precision: [fp32], gpus: [1], repeats: 1}\n";
  req.only = {"bogus=1"};
  EXPECT_EQ(sweep_plan_error(req),
            "--only 'bogus=1': unknown key 'bogus' (network, batch, batch_per_gpu, gpus, gpu_mix, cpu_mix, precision, "
            "allreduce, split, repeat, a train setting such as lr, or an infer key such as seconds)");
  req.file = dir.file("inf.yaml");
  int training_only = 0;
  for (const OnlyPointKey& k : only_point_keys()) {
    req.only = {k.name + "=1"};
    const std::string why = sweep_plan_error(req);
    if (!k.training_only) {
      EXPECT_EQ(why.find("has no"), std::string::npos) << k.name << ": " << why;
      continue;
    }
    ++training_only;
    EXPECT_EQ(why, fmt::format("--only {}=...: an inference experiment has no '{}' (network, gpus, gpu_mix, precision, "
                               "repeat, seed, or an infer key such as seconds)",
                               k.name, k.name));
    req.only = {};
    req.overrides = {fmt::format("matrix.{}=[1]", k.name)};
    EXPECT_NE(sweep_plan_error(req).find("applies to training experiments"), std::string::npos) << k.name;
    req.overrides = {};
  }
  EXPECT_EQ(training_only, 5);  // batch, batch_per_gpu, cpu_mix, allreduce, split
}

TEST(SweepJob, EmitWritesAnExecutableScriptAndMakesTheExperimentFolder) {
  TempDir dir;
  SweepRequest req = sweep_request_in(dir);
  req.emit = "slurm";
  req.emit_file = dir.file("job.sh");
  const SweepPlan plan = plan_sweep(req, host_without_gpus());
  const EmittedScript out = emit_sweep(req, plan);
  EXPECT_EQ(out.groups, 1u);  // both runs ask for one CPU rank
  ASSERT_TRUE(fs::exists(req.emit_file));
  std::ifstream in(req.emit_file);
  const std::string written((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(written, out.script);
  EXPECT_NE(written.find("#SBATCH"), std::string::npos);
  EXPECT_NE(fs::status(req.emit_file).permissions() & fs::perms::owner_exec, fs::perms::none);
  // The scheduler opens the job's output file in the experiment's folder before the script runs.
  EXPECT_TRUE(fs::is_directory(plan.exp_dir));
}

TEST(SweepJob, ASweepOfAnExperimentAnotherProcessHoldsIsRefusedAndRunsNothing) {
  TempDir dir;
  SweepRequest req = sweep_request_in(dir);
  const SweepPlan plan = plan_sweep(req, host_without_gpus());
  fs::create_directories(plan.exp_dir);
  // flock(2) locks belong to an open file: a second open of the lock file, here in the same process,
  // is refused as another process's would be.
  std::string holder;
  auto held = FileLock::try_lock(sweep_lock_path(plan.exp_dir), &holder);
  ASSERT_TRUE(held);
  try {
    run_planned_sweep(req, plan, host_without_gpus());
    FAIL() << "the sweep ran while its experiment was locked";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("experiment 's' is already being swept by"), std::string::npos) << e.what();
  }
  for (const RunSpec& r : plan.runs) EXPECT_FALSE(fs::exists(fs::path(plan.exp_dir) / r.id)) << r.id;
}

}  // namespace
}  // namespace cnnscale
