// Whose kernels are these: the timed step marks each of its parts as it runs them, and a tracer's
// external ids link every kernel launched meanwhile to that part (backend/kernel_trace.hpp). A part
// is named only when it ends (a layer's forward is known to have run when its callback fires), so
// each part opens under a fresh id and is given its owner when it closes.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "backend/kernel_trace.hpp"
#include "measure/kernel_metric_rollup.hpp"
#include "measure/kernel_profile.hpp"

namespace cnnscale::measure {

// What the timed step calls (LayerTimingOptions::scopes), in its recorded iterations only.
class StepScopes {
 public:
  virtual ~StepScopes() = default;
  virtual void begin_step() = 0;                        // a recorded iteration starts: opens its first part
  virtual void close_as(const KernelOwner& owner) = 0;  // the open part was `owner`'s
  virtual void open() = 0;                              // the next part starts
};

// StepScopes over a tracer: pushes an id for each part and pops it when the part closes. Without a
// tracer it only counts the parts (a run whose kernels another profiler reads in launch order).
class StepAttribution final : public StepScopes {
 public:
  explicit StepAttribution(KernelTracer* tracer = nullptr) : tracer_(tracer) {}
  void set_tracer(KernelTracer* tracer) { tracer_ = tracer; }
  void begin_step() override;
  void close_as(const KernelOwner& owner) override;
  void open() override;

  // The owners the trace's links resolve to.
  const std::map<uint64_t, KernelOwner>& owner_of_external() const { return owners_; }
  // The recorded step (from 0) each closed id belongs to.
  int64_t step_of(uint64_t external_id) const { return step_of_.at(external_id); }
  int64_t steps() const { return step_; }

 private:
  KernelTracer* tracer_;
  uint64_t next_id_ = 1;
  uint64_t open_id_ = 0;  // 0: no part open
  int64_t step_ = 0;      // recorded steps begun
  std::map<uint64_t, KernelOwner> owners_;
  std::map<uint64_t, int64_t> step_of_;
};

// The kernels of one trace with their owners: the records of `trace` attributed by `scopes`' ids,
// each attributed one in the step its part ran in, counted from `first_step` (bench conv traces each
// call apart and numbers the calls, so that what lies between two calls is no gap of either);
// throws like attribute_kernels for a feed that contradicts itself.
struct AttributedTrace {
  std::vector<KernelRecord> records;
  AttributionCounts counts;
};
AttributedTrace attribute_trace(const KernelTrace& trace, const StepAttribution& scopes, int64_t first_step = 0);

// Metric values per kernel of an owner from a profiler's ranges, matched by place to the traced
// kernels of the same work (`launched`, in launch order), each value the mean over the kernel's
// launches weighted by their traced durations. RuntimeError where the two do not agree kernel for
// kernel (a count or a name differs): matching them by place would misattribute.
KernelMetricValues match_metric_ranges(const std::vector<const KernelRecord*>& launched, const KernelMetricResult& run);

}  // namespace cnnscale::measure
