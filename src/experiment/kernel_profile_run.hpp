// What `cnnscale time NET --kernels [--metrics]` measures below the command: the network timed as
// `time` times it, then its kernels traced over a few more steps of the same work (each kernel
// attributed to the layer pass, update or input copy that launched it), and with metrics one step
// again under CUPTI's range profiler, whose per-kernel counters are matched to the traced step's
// kernels in launch order. Three runs, because each instrument changes what the others measure:
// tracing adds a little to every launch, the profiler replays every kernel many times.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "experiment/time_network.hpp"
#include "measure/kernel_metric_rollup.hpp"
#include "measure/kernel_profile.hpp"

namespace cnnscale {

struct KernelProfileOptions {
  int64_t steps = 3;  // traced steps, after the request's warm-up
  // CUPTI metric names for one profiled step; empty: no metrics run.
  std::vector<std::string> metric_names;
  MetricReplay replay = MetricReplay::Kernel;  // how the metric set's passes are had
};

struct NetworkKernelProfile {
  TimedNetwork measured;     // the unprofiled timing: what the layers take without instruments
  LayerTimingResult traced;  // the traced run's own timing; its step against measured's is the tracing cost
  measure::KernelProfile profile;
  measure::AttributionCounts counts;
  int64_t dropped_records = 0;
  std::string sm_arch, gpu;
  bool graphs = false;  // a kernel ran as a CUDA graph node (time runs none; a check, not a choice)
  std::map<std::string, std::string> type_of_layer;
  // Each owner's time per step as the unprofiled timing measured it (events around each part), for
  // the check that its kernels account for it.
  std::map<measure::KernelOwner, double> measured_ms;
  // With metric names: the profiler's raw values per kernel (CUPTI names), launch-weighted over the
  // launches of a kernel in the profiled step, the replay passes and the profiling's wall time.
  measure::KernelMetricValues raw_metrics;
  std::optional<KernelMetricResult> metric_run;
  double metric_seconds = 0.0;
};

// Refuses before any work (ConfigError) where the backend cannot trace or profile: no GPU, no
// CUPTI, counters not permitted.
NetworkKernelProfile profile_network_kernels(const TimeRequest& request, Backend& backend,
                                             const KernelProfileOptions& options);

// The owners' measured time per step from a layer timing: each layer's forward and backward, the
// input copy, the forward's and backward's own tails (loss combination), the update.
std::map<measure::KernelOwner, double> measured_owner_ms(const LayerTimingResult& r);

}  // namespace cnnscale
