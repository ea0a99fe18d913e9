// The step's parts as time_layers marks them for a kernel tracer, on the CPU backend with a tracer
// that only logs its push and pop calls: every recorded iteration opens the input copy, each layer's
// forward in order, the forward's tail, each layer's backward in reverse, the backward's tail and the
// update, each under a fresh id, and the warm-up stays outside the traced window.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "measure/kernel_scopes.hpp"
#include "measure/layer_timing.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

using measure::KernelOwner;
using measure::KernelPass;

struct LoggingTracer final : KernelTracer {
  std::vector<std::string> log;
  int depth = 0;
  void push(uint64_t id) override {
    log.push_back("push " + std::to_string(id));
    ++depth;
  }
  void pop() override {
    log.push_back("pop");
    --depth;
  }
  KernelTrace finish() override { return {}; }
};

NetSpec two_layer_net() {
  return NetSpec::load_string(R"(
name: scopes
input: {shape: [1, 4, 4], classes: 3}
layers:
  - {name: fc1, type: InnerProduct, bottom: data, top: fc1, num_output: 5}
  - {name: relu1, type: ReLU, bottom: fc1, top: relu1}
  - {name: fc2, type: InnerProduct, bottom: relu1, top: fc2, num_output: 3}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc2, label], top: loss}
)",
                              "scopes.yaml");
}

TEST(KernelScopes, TimeLayersMarksEveryPartOfEachRecordedStepInOrder) {
  auto backend = make_backend("cpu");
  LoggingTracer tracer;
  measure::StepAttribution scopes(&tracer);
  LayerTimingOptions o;
  o.batch = 2;
  o.iterations = 2;
  o.warmup = 1;
  o.scopes = &scopes;
  int windows = 0;
  o.around_recorded = [&](const std::function<void()>& recorded) {
    ++windows;
    EXPECT_EQ(scopes.steps(), 0) << "the warm-up must not be marked";
    recorded();
  };
  time_layers(two_layer_net(), *backend, o);
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(scopes.steps(), 2);
  EXPECT_EQ(tracer.depth, 0);

  // Closed ids in order: per step, input copy, the layers' forwards, the forward's tail, the
  // backwards (last layer first), the backward's tail, the update.
  std::vector<std::string> labels;
  for (const auto& [id, owner] : scopes.owner_of_external()) labels.push_back(measure::owner_label(owner));
  std::vector<std::string> step = {"input copy",     "fc1 forward",  "relu1 forward", "fc2 forward",
                                   "loss forward",   "forward",      "loss backward", "fc2 backward",
                                   "relu1 backward", "fc1 backward", "backward",      "update"};
  std::vector<std::string> expected = step;
  expected.insert(expected.end(), step.begin(), step.end());
  EXPECT_EQ(labels, expected);
  // Ids are fresh per part and tell their step.
  EXPECT_EQ(scopes.step_of(1), 0);
  EXPECT_EQ(scopes.step_of(static_cast<uint64_t>(step.size()) + 1), 1);
  ASSERT_EQ(tracer.log.size(), 2 * expected.size());
  EXPECT_EQ(tracer.log[0], "push 1");
  EXPECT_EQ(tracer.log[1], "pop");
}

TEST(KernelScopes, InferenceMarksTheForwardOnly) {
  auto backend = make_backend("cpu");
  measure::StepAttribution scopes;  // no tracer: only the parts are counted
  LayerTimingOptions o;
  o.batch = 2;
  o.iterations = 1;
  o.warmup = 0;
  o.inference = true;
  o.scopes = &scopes;
  time_layers(two_layer_net(), *backend, o);
  std::vector<std::string> labels;
  for (const auto& [id, owner] : scopes.owner_of_external()) labels.push_back(measure::owner_label(owner));
  EXPECT_EQ(labels, (std::vector<std::string>{"input copy", "fc1 forward", "relu1 forward", "fc2 forward",
                                              "loss forward", "forward"}));
}

TEST(KernelScopes, MisuseIsRefusedRatherThanMisattributed) {
  measure::StepAttribution scopes;
  EXPECT_THROW(scopes.close_as(KernelOwner{"fc1", KernelPass::Forward}), RuntimeError);
  scopes.begin_step();
  EXPECT_THROW(scopes.open(), RuntimeError);
  EXPECT_THROW(scopes.begin_step(), RuntimeError);
}

// A traced call as bench conv traces each variant: one step under scopes of its own, numbered from
// the call's index. Two calls 1 ms apart, each of two kernels 10 ns apart: each call's second kernel
// has a 10 ns gap, and the millisecond between the calls is no gap of either.
TEST(KernelScopes, EachTracedCallIsAStepOfItsOwnSoNothingBetweenCallsIsAGap) {
  const KernelOwner owner{"conv1 fwd ALGO_0", KernelPass::Forward};
  std::vector<measure::KernelRecord> records;
  for (int64_t call = 0; call < 2; ++call) {
    measure::StepAttribution scopes;
    scopes.begin_step();
    scopes.close_as(owner);
    KernelTrace trace;
    for (int64_t k = 0; k < 2; ++k) {
      TracedKernel t;
      t.name = "gemm";
      t.launch.grid = {1, 1, 1};
      t.launch.block = {32, 1, 1};
      t.correlation_id = static_cast<uint64_t>(10 * call + k + 1);
      t.start_ns = call * 1'000'000 + k * 110;
      t.end_ns = t.start_ns + 100;
      trace.kernels.push_back(t);
      trace.links.push_back({t.correlation_id, 1});  // the call's one part has id 1
    }
    measure::AttributedTrace a = measure::attribute_trace(trace, scopes, call);
    ASSERT_EQ(a.counts.attributed, 2);
    for (measure::KernelRecord& r : a.records) {
      EXPECT_EQ(r.step, call);
      records.push_back(std::move(r));
    }
  }
  const measure::KernelProfile p = measure::summarize_kernels(records, 1, measure::sm90_limits());
  EXPECT_EQ(p.gap_before_ns.at(owner), 20);
}

// Two launches of "gemm" in fc1's forward (100 and 300 ns) and one "relu" in relu1's: the gemm's
// value is the duration-weighted mean (10 * 100 + 30 * 300) / 400 = 25; relu keeps its own.
TEST(KernelScopes, MetricRangesMatchTracedKernelsByPlaceWeightedByDuration) {
  auto record = [](const char* name, const char* layer, int64_t ns) {
    measure::KernelRecord r;
    r.name = name;
    r.owner = KernelOwner{layer, KernelPass::Forward};
    r.end_ns = ns;
    return r;
  };
  const std::vector<measure::KernelRecord> records = {record("gemm", "fc1", 100), record("gemm", "fc1", 300),
                                                      record("relu", "relu1", 50)};
  std::vector<const measure::KernelRecord*> launched;
  for (const auto& r : records) launched.push_back(&r);
  KernelMetricResult run;
  run.ranges = {{"gemm", {{"m", 10.0}}}, {"gemm", {{"m", 30.0}}}, {"relu", {{"m", 7.0}, {"n", 1.0}}}};
  const measure::KernelMetricValues v = measure::match_metric_ranges(launched, run);
  EXPECT_DOUBLE_EQ(v.at({KernelOwner{"fc1", KernelPass::Forward}, "gemm"}).at("m"), 25.0);
  EXPECT_DOUBLE_EQ(v.at({KernelOwner{"relu1", KernelPass::Forward}, "relu"}).at("m"), 7.0);
  EXPECT_FALSE(v.at({KernelOwner{"fc1", KernelPass::Forward}, "gemm"}).contains("n"));

  KernelMetricResult shorter = run;
  shorter.ranges.pop_back();
  EXPECT_THROW(measure::match_metric_ranges(launched, shorter), RuntimeError);
  KernelMetricResult renamed = run;
  renamed.ranges[1].name = "other";
  EXPECT_THROW(measure::match_metric_ranges(launched, renamed), RuntimeError);
  // Ranges named by their place, as CUPTI's auto ranges are, match where the places agree.
  KernelMetricResult numbered = run;
  for (size_t i = 0; i < numbered.ranges.size(); ++i) numbered.ranges[i].name = std::to_string(i);
  EXPECT_DOUBLE_EQ(
      measure::match_metric_ranges(launched, numbered).at({KernelOwner{"fc1", KernelPass::Forward}, "gemm"}).at("m"),
      25.0);
  numbered.ranges[2].name = "1";
  EXPECT_THROW(measure::match_metric_ranges(launched, numbered), RuntimeError);
}

TEST(KernelScopes, TheCpuBackendRefusesKernelProfilingWithItsReason) {
  auto backend = make_backend("cpu");
  try {
    backend->trace_kernels();
    FAIL() << "no refusal";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend->kernel_metric_profiler(), ConfigError);
}

}  // namespace
}  // namespace cnnscale
