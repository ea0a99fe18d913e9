// StepAttribution and attribute_trace (kernel_scopes.hpp).
#include "measure/kernel_scopes.hpp"

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

AttributedTrace attribute_trace(const KernelTrace& trace, const StepAttribution& scopes) {
  AttributedTrace out;
  out.records.reserve(trace.kernels.size());
  for (const TracedKernel& k : trace.kernels) out.records.push_back(KernelRecord{k, {}, 0});
  out.counts = attribute_kernels(out.records, AttributionInput{scopes.owner_of_external(), trace.links});
  return out;
}

}  // namespace cnnscale::measure
