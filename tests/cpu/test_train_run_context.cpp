// Which of train's settings apply to a run as the run itself decides it (train_run_context, by which
// describe_run records them) and as the sweep decides it for an experiment's run of the same settings
// (run_context, by which the sweep writes, tags and multiplies runs): the two agree.
#include <gtest/gtest.h>

#include <string>

#include "cpu/experiment_test_util.hpp"
#include "experiment/train_run.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
// A namespace of its own: the helpers' names stay this file's in a unity build.
namespace train_run_context_test {
namespace {

// lenet on synthetic data, 4 iterations of 8 samples on one CPU process, writing nothing.
TrainArgs one_cpu_run() {
  TrainArgs a = default_train_args();
  a.net = "lenet";
  a.data = "synthetic";
  a.iterations = 4;
  a.options.batch = 8;
  a.measure.no_results = true;
  return a;
}

// The run's context as train builds it before describing the run: its job and its data opened.
RunContext context_of(TrainArgs a) {
  validate_train_args(a);
  const ParallelRun par(a.parallel, a.device, a.options.batch, a.options.precision);
  const TrainInputs in = load_train_inputs(a, par.global_batch());
  return train_run_context(a, in, par);
}

// The sweep's run of the same point: batch 8 on one rank of the experiment `head` begins.
RunContext sweep_context_of(const std::string& head) {
  const Experiment e = testing::parse(head + testing::kBaseExperiment);
  for (const RunSpec& r : expand_runs(e))
    if (r.ranks == 1 && r.batch == 8) return run_context(e, r);
  ADD_FAILURE() << "no 1-rank run of batch 8";
  return {};
}

// Each setting whose rule tells the two contexts apart: none where they agree.
std::vector<std::string> disagreeing(const RunContext& run, const RunContext& sweep) {
  std::vector<std::string> out;
  for (const TrainSetting& s : train_settings())
    if (s.applies_to(run) != s.applies_to(sweep)) out.push_back(s.name);
  return out;
}

bool launched() { return MpiEnv::current() && MpiEnv::current()->initialized(); }

// --measure phases and --mfu: the phase loops' and the matmul peak's settings apply to the run.
TEST(TrainRunContext, HoldsTheRunsMeasurementAndMfu) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  const RunContext steady = context_of(one_cpu_run());
  EXPECT_EQ(steady.measure, "steady");
  EXPECT_FALSE(steady.mfu);
  TrainArgs a = one_cpu_run();
  a.measure_mode = "phases";  // --measure phases
  a.mfu = true;
  const RunContext measured = context_of(a);
  EXPECT_EQ(measured.measure, "phases");
  EXPECT_TRUE(measured.mfu);
  for (const char* name : {"phase_window", "phase_repeats", "mfu_window"}) {
    EXPECT_FALSE(find_train_setting(name)->applies_to(steady)) << name;
    EXPECT_TRUE(find_train_setting(name)->applies_to(measured)) << name;
  }
  // The sweep's runs of the same measurement: every setting applies to both or to neither.
  EXPECT_EQ(disagreeing(steady, sweep_context_of("")), std::vector<std::string>{});
  EXPECT_EQ(disagreeing(measured, sweep_context_of("measure: phases\ntrain: {mfu: true}\n")),
            std::vector<std::string>{});
}

// --split auto probes at start-up from --auto-start probe, with 2 or more ranks (Trainer::probes_split):
// probe_seconds applies to the run where it does, as it does to the sweep's runs (test_settings_apply).
TEST(TrainRunContext, HoldsTheAutoSplitsStart) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  const TrainSetting& probe = *find_train_setting("probe_seconds");
  TrainArgs a = one_cpu_run();
  a.parallel.split = "proportional";
  EXPECT_TRUE(probe.applies_to(context_of(a)));
  a.parallel.split = "auto";
  EXPECT_EQ(context_of(a).auto_start, "probe");
  EXPECT_FALSE(probe.applies_to(context_of(a))) << "one rank: auto probes nothing";
  a.parallel.auto_start = "even";
  EXPECT_EQ(context_of(a).auto_start, "even");
}

}  // namespace
}  // namespace train_run_context_test
}  // namespace cnnscale
