// KernelBenchKernels (kernel_bench_kernels.hpp).
#include "experiment/kernel_bench_kernels.hpp"

#include <fmt/format.h>

#include <chrono>

#include "core/error.hpp"
#include "measure/kernel_scopes.hpp"
#include "measure/occupancy.hpp"

namespace cnnscale {

KernelBenchKernels::KernelBenchKernels(Backend& backend, std::vector<std::string> metric_names, MetricReplay replay)
    : backend_(backend), metric_names_(std::move(metric_names)), replay_(replay) {
  backend_.trace_kernels()->finish();
  if (!metric_names_.empty()) profiler_ = backend_.kernel_metric_profiler();
}

void KernelBenchKernels::profile_call(const measure::KernelBenchRow& row, const std::function<void()>& call) {
  const measure::KernelOwner owner{fmt::format("{} {} {}", row.label, row.pass, row.algorithm),
                                   row.pass == "fwd" ? measure::KernelPass::Forward : measure::KernelPass::Backward};
  if (group_of_owner_.contains(owner.layer)) throw_runtime("bench kernels: '{}' profiled twice", owner.layer);
  group_of_owner_[owner.layer] = fmt::format("{} {}", row.algorithm, row.pass);
  measured_ms_[owner] = row.timing.median_ms;

  measure::StepAttribution scopes;
  std::unique_ptr<KernelTracer> tracer = backend_.trace_kernels();
  scopes.set_tracer(tracer.get());
  scopes.begin_step();
  call();
  scopes.close_as(owner);
  scopes.set_tracer(nullptr);
  const KernelTrace trace = tracer->finish();
  if (trace.dropped_records > 0)
    throw_runtime("kernel trace: CUPTI dropped {} records of {}", trace.dropped_records, owner.layer);
  sm_arch_ = trace.sm_arch;
  gpu_ = trace.device;
  // Each call a step of its own: the time between two calls is no gap before either's kernels.
  measure::AttributedTrace attributed =
      measure::attribute_trace(trace, scopes, static_cast<int64_t>(group_of_owner_.size()));
  counts_.attributed += attributed.counts.attributed;
  counts_.unattributed += attributed.counts.unattributed;

  if (profiler_) {
    std::vector<const measure::KernelRecord*> launched;
    for (const measure::KernelRecord& r : attributed.records)
      if (r.external_id != 0) launched.push_back(&r);
    const auto start = std::chrono::steady_clock::now();
    KernelMetricResult run = profiler_->profile(metric_names_, call, replay_);
    metric_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    passes_ = std::max(passes_, run.passes);
    for (auto& [key, values] : measure::match_metric_ranges(launched, run)) raw_metrics_[key] = std::move(values);
    last_metric_run_ = std::move(run);
  }
  for (measure::KernelRecord& r : attributed.records) records_.push_back(std::move(r));
}

measure::KernelProfile KernelBenchKernels::profile() const {
  if (records_.empty()) throw_runtime("bench kernels: no variant was traced");
  return measure::summarize_kernels(records_, 1, measure::sm_limits_for_arch(sm_arch_));
}

}  // namespace cnnscale
