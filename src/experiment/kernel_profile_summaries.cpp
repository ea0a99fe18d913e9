// network_kernel_summary and bench_kernel_summary (kernel_profile_summaries.hpp).
#include "experiment/kernel_profile_summaries.hpp"

#include <fmt/format.h>

#include "core/precision.hpp"
#include "measure/kernel_metric_set.hpp"

namespace cnnscale {

namespace {

// What the metric run was and cost, for the summary's metric fields.
void add_metric_context(report::KernelProfileContext& c, const std::vector<std::string>& keys,
                        const std::optional<KernelMetricResult>& run, int64_t passes, double seconds) {
  if (keys.empty() || !run) return;
  c.metric_set = keys;
  c.chip = run->chip;
  c.replay_passes = passes;
  c.metric_seconds = seconds;
  const size_t names = measure::cupti_metrics_for(keys).size();
  const std::string how =
      run->replay == MetricReplay::Kernel
          ? fmt::format("each kernel run {} {} (kernel replay: its memory saved and restored between passes)", passes,
                        passes == 1 ? "time" : "times")
          : fmt::format(
                "the profiled work run {} {}, one pass each (work replay: each kernel measured after the ones "
                "before it)",
                run->runs, run->runs == 1 ? "time" : "times");
  c.metric_method = fmt::format(
      "CUPTI range profiler, one range per kernel (auto ranges), {} to collect {} CUPTI metric{}; a kernel's value is "
      "the mean over its launches weighted by their traced time",
      how, names, names == 1 ? "" : "s");
}

}  // namespace

measure::KernelMetricValues derive_metric_values(const measure::KernelMetricValues& raw,
                                                 const std::vector<std::string>& keys) {
  measure::KernelMetricValues out;
  for (const auto& [kernel, values] : raw) {
    std::map<std::string, double> ours = measure::kernel_metric_values(keys, values);
    if (!ours.empty()) out[kernel] = std::move(ours);
  }
  return out;
}

KernelProfileSummary network_kernel_summary(const NetworkKernelProfile& p, const TimeRequest& request,
                                            const std::vector<std::string>& metric_keys,
                                            const KernelProfileOrigin& origin) {
  report::KernelProfileContext c;
  c.command = "time";
  c.net = request.spec.name();
  c.device = origin.device;
  c.gpu = p.gpu;
  c.sm_arch = p.sm_arch;
  c.host = origin.host;
  c.utc_time = origin.utc_time;
  c.precision = precision_name(request.options.precision);
  c.batch = request.options.batch;
  c.inference = request.options.inference;
  c.warmup = request.options.warmup;
  c.graph_note = p.graphs
                     ? "some kernels ran as CUDA graph nodes: each is attributed to the part that launched its graph"
                     : "no CUDA graph: time launches every layer's work eagerly, as train does without --graph; "
                       "train's graph replays the same kernels without their launch gaps";
  c.group_kind = "layer type";
  c.group_of_layer = p.type_of_layer;
  c.measured_ms = p.measured_ms;
  c.counts = p.counts;
  c.dropped_records = p.dropped_records;
  c.step_ms = p.measured.result.step_ms;
  c.profiled_step_ms = p.traced.step_ms;
  c.overhead_note = fmt::format(
      "the step timed untraced ({} iterations) and again while traced ({} iterations); kernel times come from the "
      "traced steps, measured times from the untraced ones",
      request.options.iterations, p.profile.profiled_steps);
  add_metric_context(c, metric_keys, p.metric_run, p.metric_run ? p.metric_run->passes : 0, p.metric_seconds);
  return report::kernel_profile_summary(p.profile, derive_metric_values(p.raw_metrics, metric_keys), c);
}

KernelProfileSummary bench_kernel_summary(const KernelBenchKernels& k, const std::string& precision,
                                          const std::string& layout, int64_t batch,
                                          const std::vector<std::string>& metric_keys,
                                          const KernelProfileOrigin& origin) {
  report::KernelProfileContext c;
  c.command = "bench conv";
  c.batch = batch;
  c.device = origin.device;
  c.gpu = k.gpu();
  c.sm_arch = k.sm_arch();
  c.host = origin.host;
  c.utc_time = origin.utc_time;
  c.precision = precision;
  c.layout = layout;
  c.graph_note = "no CUDA graph: each algorithm's call is launched on its own";
  c.group_kind = "algorithm";
  c.group_of_layer = k.group_of_owner();
  c.measured_ms = k.measured_ms();
  c.counts = k.counts();
  c.overhead_note =
      "one extra call of each variant traced after its timed repeats; measured times are the repeats' medians";
  add_metric_context(c, metric_keys, k.last_metric_run(), k.replay_passes(), k.metric_seconds());
  return report::kernel_profile_summary(k.profile(), derive_metric_values(k.raw_metrics(), metric_keys), c);
}

}  // namespace cnnscale
