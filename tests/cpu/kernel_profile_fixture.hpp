// A recorded kernel profile for the results, text-table and report tests: two steps of a small
// network (conv1, conv2, a batch norm, the update and one unattributed kernel) as CUPTI's records
// would give them, with hardware metrics for some kernels only, so that a roll-up covers part of a
// group's time. Figures per step (ns): conv1 forward "implicit_gemm" 300 (+ "bn_fold" 100, no
// metrics), conv2 forward "implicit_gemm" 600, bn1 forward "bn_fwd" 200, update "sgd" 100,
// unattributed "memset" 100: 1400 ns of kernels per step. Every launch starts 10 ns after the one
// before it, so every kernel but a step's first has a 10 ns gap before it.
#pragma once
#include <string>

#include "experiment/kernel_profile_output.hpp"
#include "io/kernel_profile_results.hpp"
#include "measure/kernel_metric_rollup.hpp"
#include "measure/kernel_profile.hpp"

namespace cnnscale::testing {

// A cuDNN-like demangled name, longer than a terminal column.
inline const std::string kLongGemmName =
    "void cudnn::cnn::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, true, false, true>(int, int, "
    "int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, "
    "float const*, float const*, bool, int, int)";

struct RecordedProfile {
  measure::KernelProfile profile;
  measure::KernelMetricValues metrics;
  report::KernelProfileContext context;
};

inline RecordedProfile recorded_profile(bool with_metrics = true) {
  using measure::KernelOwner;
  using measure::KernelPass;
  const KernelOwner conv1{"conv1", KernelPass::Forward}, conv2{"conv2", KernelPass::Forward},
      bn1{"bn1", KernelPass::Forward}, update{"", KernelPass::Update};
  std::vector<measure::KernelRecord> records;
  measure::AttributionInput input{{{1, conv1}, {2, conv2}, {3, bn1}, {4, update}}, {}};
  uint64_t correlation = 100;
  int64_t clock = 0;
  int64_t step = 0;
  auto launch = [&](const std::string& name, int64_t ns, uint64_t external, int64_t threads, int64_t registers,
                    int64_t dynamic_shared) {
    measure::KernelRecord r;
    r.name = name;
    r.start_ns = clock;
    r.end_ns = clock + ns;
    clock += ns + 10;
    r.launch.grid = {256, 2, 1};
    r.launch.block = {threads, 1, 1};
    r.launch.registers_per_thread = registers;
    r.launch.static_shared_memory = 1024;
    r.launch.dynamic_shared_memory = dynamic_shared;
    r.correlation_id = correlation++;
    if (external) input.links.push_back({r.correlation_id, external});
    r.step = external ? step : -1;
    records.push_back(r);
  };
  for (; step < 2; ++step) {
    launch(kLongGemmName, 300, 1, 256, 128, 49152);  // registers limit it: 2 blocks of 8 warps
    launch("bn_fold", 100, 1, 128, 32, 0);
    launch(kLongGemmName, 600, 2, 256, 128, 49152);
    launch("bn_fwd", 200, 3, 512, 32, 0);
    launch("sgd", 100, 4, 256, 16, 0);
    launch("memset", 100, 0, 128, 16, 0);
  }
  RecordedProfile out;
  out.context.counts = measure::attribute_kernels(records, input);
  out.profile = measure::summarize_kernels(records, 2, measure::sm90_limits());
  report::KernelProfileContext& c = out.context;
  c.command = "time";
  c.net = "tiny";
  c.device = "NVIDIA H100 80GB HBM3 (CUDA 13.0, driver 580)";
  c.gpu = "NVIDIA H100 80GB HBM3";
  c.sm_arch = "sm_90";
  c.host = "node-a";
  c.utc_time = "2026-12-07T10:00:00Z";
  c.precision = "fp32";
  c.layout = "NCHW";
  c.batch = 64;
  c.warmup = 3;
  c.graph_note = "profiled without the graph: each kernel launched on its own";
  c.group_of_layer = {{"conv1", "Convolution"}, {"conv2", "Convolution"}, {"bn1", "BatchNorm"}};
  c.measured_ms = {{conv1, 0.0005}, {conv2, 0.0006}};
  c.dropped_records = 0;
  c.step_ms = 0.002;
  c.profiled_step_ms = 0.0025;
  c.overhead_note = "the step timed with and without the tracer";
  if (with_metrics) {
    c.metric_set = {"achieved_occupancy", "ipc", "dram_throughput"};
    c.metric_method = "CUPTI range profiler, kernel replay";
    c.chip = "GH100";
    c.replay_passes = 4;
    c.metric_seconds = 1.5;
    out.metrics[{conv1, kLongGemmName}] = {{"achieved_occupancy", 20.0}, {"ipc", 2.0}, {"dram_throughput", 30.0}};
    out.metrics[{conv2, kLongGemmName}] = {{"achieved_occupancy", 23.0}, {"ipc", 2.5}};
    out.metrics[{bn1, "bn_fwd"}] = {{"achieved_occupancy", 80.0}, {"ipc", 0.5}, {"dram_throughput", 90.0}};
  }
  return out;
}

inline KernelProfileSummary recorded_summary(bool with_metrics = true) {
  const RecordedProfile r = recorded_profile(with_metrics);
  return report::kernel_profile_summary(r.profile, r.metrics, r.context);
}

}  // namespace cnnscale::testing
