// PhaseTimer: per-iteration phase times of the training step (data, h2d, forward, backward,
// exposed allreduce, communication-stream busy time, update, total) on one rank. Recording never
// synchronises: marks are Backend timing events, resolved later in batches when complete.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/step_phase.hpp"

namespace cnnscale {

// The step's phases are the timeline's (TimelinePhase, core/step_phase.hpp, the order of the results
// files' phase axis) up to Total, which the timer keeps apart as the whole iteration.
inline constexpr int kStepPhases = static_cast<int>(TimelinePhase::Total);
// "data", "h2d", "forward", "backward", "allreduce", "comm_busy", "update".
const char* step_phase_name(TimelinePhase phase);
const char* step_phase_name(int phase);

// One iteration's phases in seconds. `comm_busy` overlaps backward and allreduce (it is the
// communication stream's busy time), so total ~ the sum of every phase except comm_busy.
struct IterationPhases {
  int64_t iteration = 0;
  bool warmup = false;  // recorded, but left out of summaries
  std::array<double, kStepPhases> seconds{};
  double total = 0;
};

struct PhaseSummary {
  int64_t iterations = 0;  // non-warm-up iterations averaged
  std::array<double, kStepPhases> mean_seconds{};
  double mean_total = 0;
};

// Means over the non-warm-up iterations of `timeline` (all zero when there are none).
PhaseSummary summarize_phases(const std::vector<IterationPhases>& timeline);

class PhaseTimer {
 public:
  explicit PhaseTimer(Backend& backend);

  // Starts an iteration (records its begin mark). The previous one must have ended.
  void begin(int64_t iteration, bool warmup);
  // Records a mark closing `phase`, measured from the previous mark. Phases not marked in an
  // iteration (allreduce in a single process) stay 0. Data is the exception: its seconds come
  // from add_seconds() (host wait for the batch); its mark only starts h2d.
  void mark(TimelinePhase phase);
  // A mark closing `phase` whose event another has recorded: a timing point of a replay of captured
  // work (CapturedWork::launch), queued after this iteration's earlier marks. Held until resolved.
  void mark_at(TimelinePhase phase, std::shared_ptr<TimingEvent> event);
  // Host-clock seconds added to a phase of the current iteration (data wait; comm_busy on CPU).
  void add_seconds(TimelinePhase phase, double seconds);
  void end();

  // Resolves the oldest ended iterations whose marks are all complete; never blocks.
  void resolve_ready();
  // Resolves the oldest ended iteration, waiting for its marks; false when none is pending.
  bool resolve_oldest();
  // Resolves every ended iteration; call after a synchronisation (otherwise it waits).
  void resolve_all();
  // Adds communication-stream busy seconds to a resolved iteration (GPU: the communicator reports
  // them per iteration after a synchronisation). Unknown iterations are an error.
  void add_comm_busy(int64_t iteration, double seconds);

  // Iterations ended but not yet resolved (each holds a few events).
  size_t pending() const { return pending_.size(); }
  const std::vector<IterationPhases>& timeline() const { return timeline_; }
  PhaseSummary summary() const { return summarize_phases(timeline_); }

 private:
  struct Pending {
    IterationPhases phases;
    std::shared_ptr<TimingEvent> begin;
    std::vector<std::pair<TimelinePhase, std::shared_ptr<TimingEvent>>> marks;  // in recording order
  };
  void resolve(Pending& p);

  Backend& backend_;
  bool open_ = false;
  Pending current_;
  std::deque<Pending> pending_;  // ended, oldest first
  std::vector<IterationPhases> timeline_;
};

}  // namespace cnnscale
