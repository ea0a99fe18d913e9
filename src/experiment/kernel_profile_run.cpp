// profile_network_kernels (kernel_profile_run.hpp).
#include "experiment/kernel_profile_run.hpp"

#include <chrono>
#include <memory>

#include "core/error.hpp"
#include "measure/kernel_scopes.hpp"
#include "measure/occupancy.hpp"

namespace cnnscale {

using measure::KernelOwner;
using measure::KernelPass;

std::map<KernelOwner, double> measured_owner_ms(const LayerTimingResult& r) {
  std::map<KernelOwner, double> out;
  double forward = 0, backward = 0;
  for (const LayerTime& t : r.layers) {
    out[KernelOwner{t.name, KernelPass::Forward}] = t.forward_ms;
    forward += t.forward_ms;
    if (t.backward_ms > 0) out[KernelOwner{t.name, KernelPass::Backward}] = t.backward_ms;
    backward += t.backward_ms;
  }
  out[KernelOwner{"", KernelPass::InputCopy}] = r.copies_ms;
  out[KernelOwner{"", KernelPass::Forward}] = r.forward_ms - r.copies_ms - forward;
  if (r.backward_ms > 0) {
    out[KernelOwner{"", KernelPass::Backward}] = r.backward_ms - backward;
    out[KernelOwner{"", KernelPass::Update}] = r.update_ms;
  }
  return out;
}

namespace {

// The kernels of the traced run's first recorded step, in launch order.
std::vector<const measure::KernelRecord*> first_step(const std::vector<measure::KernelRecord>& records,
                                                     const measure::StepAttribution& scopes) {
  std::vector<const measure::KernelRecord*> out;
  for (const measure::KernelRecord& r : records)
    if (r.external_id != 0 && scopes.step_of(r.external_id) == 0) out.push_back(&r);
  return out;
}

}  // namespace

NetworkKernelProfile profile_network_kernels(const TimeRequest& request, Backend& backend,
                                             const KernelProfileOptions& options) {
  if (options.steps < 1) throw_config("--kernel-steps must be >= 1, got {}", options.steps);
  // What can be refused is refused before the work: CUPTI's tracing and, with metrics, its profiler.
  backend.trace_kernels()->finish();
  std::unique_ptr<KernelMetricProfiler> profiler;
  if (!options.metric_names.empty()) profiler = backend.kernel_metric_profiler();

  NetworkKernelProfile out;
  out.measured = time_network(request, backend);
  out.measured_ms = measured_owner_ms(out.measured.result);
  for (const LayerInfo& info : request.spec.layers()) out.type_of_layer[info.name] = info.type;
  // Fused and folded rows keep their first layer's name and type (time's own table shows them so).
  for (const LayerTime& t : out.measured.result.layers) out.type_of_layer[t.name] = t.type;

  LayerTimingOptions traced = request.options;
  traced.iterations = options.steps;
  measure::StepAttribution scopes;
  KernelTrace trace;
  traced.scopes = &scopes;
  traced.around_recorded = [&](const std::function<void()>& recorded) {
    std::unique_ptr<KernelTracer> tracer = backend.trace_kernels();
    scopes.set_tracer(tracer.get());
    recorded();
    scopes.set_tracer(nullptr);
    trace = tracer->finish();
  };
  out.traced = time_network(request, backend, traced).result;
  if (trace.dropped_records > 0)
    throw_runtime("kernel trace: CUPTI dropped {} records (its buffers were full): the trace is incomplete",
                  trace.dropped_records);
  out.sm_arch = trace.sm_arch;
  out.gpu = trace.device;
  for (const TracedKernel& k : trace.kernels) out.graphs = out.graphs || k.in_graph;
  measure::AttributedTrace attributed = measure::attribute_trace(trace, scopes);
  out.counts = attributed.counts;
  out.profile =
      measure::summarize_kernels(attributed.records, options.steps, measure::sm_limits_for_arch(trace.sm_arch));

  if (profiler) {
    LayerTimingOptions profiled = request.options;
    profiled.iterations = 1;
    measure::StepAttribution counted;  // the same marks, no tracer: the ranges are matched by place
    profiled.scopes = &counted;
    const std::vector<const measure::KernelRecord*> step = first_step(attributed.records, scopes);
    profiled.around_recorded = [&](const std::function<void()>& recorded) {
      const auto start = std::chrono::steady_clock::now();
      // Room for the traced step's kernels and no more: a step that launches more is an error.
      out.metric_run =
          profiler->profile(options.metric_names, recorded, options.replay, static_cast<int64_t>(step.size()));
      out.metric_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    // Only the metrics are kept: under work replay `recorded` ran once per pass, so this run's own
    // timings count every pass and mean nothing.
    time_network(request, backend, profiled);
    out.raw_metrics = measure::match_metric_ranges(step, *out.metric_run);
  }
  return out;
}

}  // namespace cnnscale
