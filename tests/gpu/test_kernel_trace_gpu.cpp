// The CUPTI kernel trace on the GPU: records carry demangled names and launch attributes, links
// attribute them to the pushed parts, and the traced step of a small network attributes every kernel
// to a part whose own events bracket it (a part's kernels run on the compute stream between its
// events, so their summed time cannot exceed the part's measured time by more than timer resolution).
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/backend.hpp"
#include "experiment/kernel_profile_run.hpp"
#include "measure/kernel_metric_set.hpp"
#include "measure/kernel_scopes.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

TEST(KernelTraceGpu, RecordsCarryNamesLaunchesAndLinks) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu");
  Tensor a = backend->alloc(Shape{512, 512}), b = backend->alloc(Shape{512, 512}), c = backend->alloc(Shape{512, 512});
  backend->fill(a, 1.0f);
  backend->synchronize();
  std::unique_ptr<KernelTracer> tracer = backend->trace_kernels();
  tracer->push(7);
  backend->fill(b, 2.0f);
  tracer->pop();
  tracer->push(8);
  backend->matmul(false, false, 512, 512, 512, 1.0f, a, b, 0.0f, c);
  tracer->pop();
  KernelTrace trace = tracer->finish();
  EXPECT_EQ(trace.sm_arch.rfind("sm_", 0), 0u) << trace.sm_arch;
  EXPECT_EQ(trace.dropped_records, 0);
  ASSERT_GE(trace.kernels.size(), 2u);
  measure::StepAttribution none;
  std::map<uint64_t, uint64_t> external_of;
  for (const ExternalCorrelation& l : trace.links) external_of[l.correlation_id] = l.external_id;
  int filled = 0, multiplied = 0;
  for (const TracedKernel& k : trace.kernels) {
    std::printf("kernel %s grid %lld,%lld,%lld block %lld,%lld,%lld regs %lld smem %lld+%lld carveout %lld ext %llu\n",
                k.name.c_str(), (long long)k.launch.grid[0], (long long)k.launch.grid[1], (long long)k.launch.grid[2],
                (long long)k.launch.block[0], (long long)k.launch.block[1], (long long)k.launch.block[2],
                (long long)k.launch.registers_per_thread, (long long)k.launch.static_shared_memory,
                (long long)k.launch.dynamic_shared_memory, (long long)k.launch.shared_memory_carveout,
                (unsigned long long)external_of[k.correlation_id]);
    EXPECT_GT(k.end_ns, k.start_ns);
    EXPECT_GT(k.launch.registers_per_thread, 0);
    EXPECT_EQ(k.name.find("_Z"), std::string::npos) << "not demangled: " << k.name;
    filled += external_of[k.correlation_id] == 7;
    multiplied += external_of[k.correlation_id] == 8;
  }
  EXPECT_GE(filled, 1);
  EXPECT_GE(multiplied, 1);
}

// LeNet at batch 64, `iterations` timed steps after 3 of warm-up.
TimeRequest lenet_request(int64_t iterations) {
  TimeRequest request{.spec = NetSpec::load(std::string(CNNSCALE_SOURCE_DIR) + "/networks/lenet.yaml"),
                      .options = {},
                      .calibration = {}};
  request.options.batch = 64;
  request.options.iterations = iterations;
  request.options.warmup = 3;
  return request;
}

TEST(KernelTraceGpu, EveryKernelOfATracedStepBelongsToAPartThatBracketsIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu");
  const TimeRequest request = lenet_request(10);
  const NetworkKernelProfile p =
      profile_network_kernels(request, *backend, KernelProfileOptions{.steps = 3, .metric_names = {}});
  EXPECT_EQ(p.counts.unattributed, 0);
  EXPECT_GT(p.counts.attributed, 0);
  EXPECT_FALSE(p.graphs);
  std::map<measure::KernelOwner, double> kernel_ms;
  for (const measure::KernelSummary& s : p.profile.kernels)
    kernel_ms[s.owner] += static_cast<double>(s.total_ns) / 1e6 / static_cast<double>(p.profile.profiled_steps);
  const std::map<measure::KernelOwner, double> traced = measured_owner_ms(p.traced);
  for (const auto& [owner, ms] : kernel_ms) {
    ASSERT_TRUE(traced.contains(owner)) << measure::owner_label(owner);
    std::printf("%-24s kernels %.4f ms, traced events %.4f ms, untraced %.4f ms\n", measure::owner_label(owner).c_str(),
                ms, traced.at(owner), p.measured_ms.contains(owner) ? p.measured_ms.at(owner) : -1.0);
    // CUDA events resolve about half a microsecond; kernels that run between two events sum to at
    // most their span plus that.
    EXPECT_LE(ms, traced.at(owner) + 0.002) << measure::owner_label(owner);
  }
  std::printf("step: untraced %.4f ms, traced %.4f ms, kernels %.4f ms\n", p.measured.result.step_ms, p.traced.step_ms,
              static_cast<double>(p.profile.kernel_ns) / 1e6 / static_cast<double>(p.profile.profiled_steps));
}

// `time --kernels --metrics --metric-replay work` end to end on LeNet: the profiled step runs once
// per pass, every traced kernel of the step gets the metrics' values, and the kernels with the gaps
// before them fit within the traced step (they run between its first and last event).
TEST(KernelTraceGpu, WorkReplayProfilesEveryKernelOfTheStep) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu");
  const TimeRequest request = lenet_request(5);
  const std::vector<std::string> keys{"achieved_occupancy", "ipc"};
  const NetworkKernelProfile p = profile_network_kernels(
      request, *backend,
      KernelProfileOptions{.steps = 2, .metric_names = measure::cupti_metrics_for(keys), .replay = MetricReplay::Work});
  ASSERT_TRUE(p.metric_run.has_value());
  EXPECT_EQ(p.metric_run->replay, MetricReplay::Work);
  EXPECT_GE(p.metric_run->passes, 1);
  EXPECT_EQ(p.metric_run->runs, p.metric_run->passes);
  for (const measure::KernelSummary& s : p.profile.kernels) {
    const auto it = p.raw_metrics.find(measure::KernelKey{s.owner, s.name});
    ASSERT_NE(it, p.raw_metrics.end()) << measure::owner_label(s.owner) << " " << s.name;
    const std::map<std::string, double> v = measure::kernel_metric_values(keys, it->second);
    EXPECT_GT(v.at("achieved_occupancy"), 0.0) << s.name;
    EXPECT_LE(v.at("achieved_occupancy"), 100.0) << s.name;
    EXPECT_GT(v.at("ipc"), 0.0) << s.name;
  }
  int64_t busy_ns = p.profile.kernel_ns;
  for (const auto& [owner, ns] : p.profile.gap_before_ns) busy_ns += ns;
  const double per_step_ms = static_cast<double>(busy_ns) / 1e6 / static_cast<double>(p.profile.profiled_steps);
  std::printf("[work replay] %lld passes in %.2f s; kernels and gaps %.4f ms per step, traced step %.4f ms\n",
              static_cast<long long>(p.metric_run->passes), p.metric_seconds, per_step_ms, p.traced.step_ms);
  // Half a microsecond a step for the events' resolution.
  EXPECT_LE(per_step_ms, p.traced.step_ms + 0.0005);
}

}  // namespace
}  // namespace cnnscale
