// PhaseTimer implementation: marks are kept per iteration until resolved; a phase is the time from
// the previous mark of the same iteration to its own, the total from the begin mark to the last.
#include "measure/phase_timer.hpp"

#include "core/error.hpp"

namespace cnnscale {

const char* step_phase_name(TimelinePhase phase) {
  return step_phase_name(static_cast<int>(phase));
}

const char* step_phase_name(int phase) {
  CNNSCALE_CHECK(phase >= 0 && phase < kStepPhases, "no step phase {}", phase);
  // The names are string literals: null-terminated.
  return kTimelinePhaseNames[static_cast<size_t>(phase)].data();
}

PhaseSummary summarize_phases(const std::vector<IterationPhases>& timeline) {
  PhaseSummary s;
  for (const IterationPhases& it : timeline) {
    if (it.warmup) continue;
    ++s.iterations;
    for (int p = 0; p < kStepPhases; ++p) s.mean_seconds[static_cast<size_t>(p)] += it.seconds[static_cast<size_t>(p)];
    s.mean_total += it.total;
  }
  if (s.iterations > 0) {
    const double n = static_cast<double>(s.iterations);
    for (double& v : s.mean_seconds) v /= n;
    s.mean_total /= n;
  }
  return s;
}

PhaseTimer::PhaseTimer(Backend& backend) : backend_(backend) {}

void PhaseTimer::begin(int64_t iteration, bool warmup) {
  CNNSCALE_CHECK(!open_, "phase timer: iteration {} begun before {} ended", iteration, current_.phases.iteration);
  current_ = Pending{};
  current_.phases.iteration = iteration;
  current_.phases.warmup = warmup;
  current_.begin = backend_.record_timing_event();
  open_ = true;
}

void PhaseTimer::mark(TimelinePhase phase) {
  CNNSCALE_CHECK(open_, "phase timer: mark({}) outside an iteration", step_phase_name(phase));
  current_.marks.emplace_back(phase, backend_.record_timing_event());
}

void PhaseTimer::mark_at(TimelinePhase phase, std::shared_ptr<TimingEvent> event) {
  CNNSCALE_CHECK(open_, "phase timer: mark_at({}) outside an iteration", step_phase_name(phase));
  CNNSCALE_CHECK(event != nullptr, "phase timer: mark_at({}) without an event", step_phase_name(phase));
  current_.marks.emplace_back(phase, std::move(event));
}

void PhaseTimer::add_seconds(TimelinePhase phase, double seconds) {
  CNNSCALE_CHECK(open_, "phase timer: add_seconds({}) outside an iteration", step_phase_name(phase));
  current_.phases.seconds[static_cast<size_t>(phase)] += seconds;
}

void PhaseTimer::end() {
  CNNSCALE_CHECK(open_, "phase timer: end() outside an iteration");
  open_ = false;
  pending_.push_back(std::move(current_));
  current_ = Pending{};
}

void PhaseTimer::resolve(Pending& p) {
  const TimingEvent* previous = p.begin.get();
  for (auto& [phase, event] : p.marks) {
    // Data is a host wait: the stream time before its mark means nothing (the device may be idle or
    // still busy with the previous step), so its seconds are the host clock's.
    if (phase != TimelinePhase::Data)
      p.phases.seconds[static_cast<size_t>(phase)] += backend_.elapsed_ms(*previous, *event) / 1e3;
    previous = event.get();
  }
  p.phases.total = backend_.elapsed_ms(*p.begin, *previous) / 1e3;
  timeline_.push_back(p.phases);
}

void PhaseTimer::resolve_ready() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    // Stream order: the last mark completes after every earlier one.
    const TimingEvent& last = p.marks.empty() ? *p.begin : *p.marks.back().second;
    if (!backend_.timing_event_done(last)) return;
    resolve(p);
    pending_.pop_front();
  }
}

bool PhaseTimer::resolve_oldest() {
  if (pending_.empty()) return false;
  resolve(pending_.front());
  pending_.pop_front();
  return true;
}

void PhaseTimer::resolve_all() {
  for (Pending& p : pending_) resolve(p);
  pending_.clear();
}

void PhaseTimer::add_comm_busy(int64_t iteration, double seconds) {
  // The iteration is almost always among the last few resolved: search from the back.
  for (auto it = timeline_.rbegin(); it != timeline_.rend(); ++it)
    if (it->iteration == iteration) {
      it->seconds[static_cast<size_t>(TimelinePhase::CommBusy)] += seconds;
      return;
    }
  throw_runtime("phase timer: comm_busy for iteration {}, which is not in the timeline", iteration);
}

}  // namespace cnnscale
