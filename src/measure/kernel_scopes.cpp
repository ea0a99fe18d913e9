// StepAttribution and attribute_trace (kernel_scopes.hpp).
#include "measure/kernel_scopes.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace cnnscale::measure {

void StepAttribution::begin_step() {
  if (open_id_ != 0) throw_runtime("kernel scopes: a step began while a part of the last one was open");
  ++step_;
  open();
}

void StepAttribution::open() {
  if (open_id_ != 0) throw_runtime("kernel scopes: a part opened while another was open");
  open_id_ = next_id_++;
  step_of_[open_id_] = step_ - 1;
  if (tracer_ != nullptr) tracer_->push(open_id_);
}

void StepAttribution::close_as(const KernelOwner& owner) {
  if (open_id_ == 0) throw_runtime("kernel scopes: '{}' closed with no part open", owner_label(owner));
  if (tracer_ != nullptr) tracer_->pop();
  owners_[open_id_] = owner;
  open_id_ = 0;
}

AttributedTrace attribute_trace(const KernelTrace& trace, const StepAttribution& scopes, int64_t first_step) {
  AttributedTrace out;
  out.records.reserve(trace.kernels.size());
  for (const TracedKernel& k : trace.kernels) out.records.push_back(KernelRecord{k, {}, 0, -1});
  out.counts = attribute_kernels(out.records, AttributionInput{scopes.owner_of_external(), trace.links});
  for (KernelRecord& r : out.records)
    if (r.external_id != 0) r.step = first_step + scopes.step_of(r.external_id);
  return out;
}

// Each profiled range is the kernel launched at its place in the step: the traced step and the
// profiled one run the same work, so the sequences must agree kernel for kernel; where they do not
// (a library choosing differently between runs), matching by place would misattribute, so it refuses.
KernelMetricValues match_metric_ranges(const std::vector<const KernelRecord*>& step, const KernelMetricResult& run) {
  if (run.ranges.size() != step.size())
    throw_runtime(
        "kernel metrics: the profiled step launched {} kernels, the traced step {}; the two runs did not "
        "do the same work",
        run.ranges.size(), step.size());
  // Launch-weighted (by each launch's traced duration) mean over the launches of one kernel of one owner.
  std::map<KernelKey, std::map<std::string, std::pair<double, double>>> sums;  // value*w, w
  for (size_t i = 0; i < step.size(); ++i) {
    // CUPTI's auto ranges are named by their place ("0", "1", ...); a range named otherwise names its kernel.
    const std::string& name = run.ranges[i].name;
    const bool by_place = !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
    if (by_place ? name != std::to_string(i) : name != step[i]->name)
      throw_runtime("kernel metrics: range {} of the profiled step is '{}', kernel {} of the traced step '{}'", i, name,
                    i, step[i]->name);
    const double w = static_cast<double>(std::max<int64_t>(step[i]->end_ns - step[i]->start_ns, 1));
    auto& key = sums[KernelKey{step[i]->owner, step[i]->name}];
    for (const auto& [metric, value] : run.ranges[i].values) {
      key[metric].first += value * w;
      key[metric].second += w;
    }
  }
  KernelMetricValues out;
  for (const auto& [key, metrics] : sums)
    for (const auto& [metric, vw] : metrics) out[key][metric] = vw.first / vw.second;
  return out;
}

}  // namespace cnnscale::measure
