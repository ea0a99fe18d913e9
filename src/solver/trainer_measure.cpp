// Trainer, measurement windows after training: the extension of a short steady energy window by
// more steps, and the phase-isolated loops of `measure: phases`, both made of the step's own pieces.
// A stop signal ends them as it ends training: every rank votes at each pass (StopVote, as the
// training loop does), so all stop at the same pass, and the run is recorded interrupted.
#include <algorithm>
#include <cmath>

#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "measure/energy_window.hpp"
#include "parallel/stop_vote.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

int64_t Trainer::agree_max(int64_t value) {
  const DataParallel& dp = job_.parallel;
  if (!dp.comm || dp.size() == 1) return value;
  // Every rank contributes its value at its own index: the sum is an allgather (exact below 2^24).
  CNNSCALE_CHECK(value >= 0 && value < (int64_t{1} << 24), "agree_max: {} out of range", value);
  std::vector<float> slots(static_cast<size_t>(dp.size()), 0.0f);
  slots[static_cast<size_t>(dp.rank)] = static_cast<float>(value);
  int64_t best = 0;
  for (float v : allreduce_sum_host(*dp.comm, backend_, slots)) best = std::max(best, static_cast<int64_t>(v));
  return best;
}

// The steady window must span several NVML counter periods; a short run gets extra steps inside
// the same window. Every rank runs the same number (the largest any rank needs), since the steps
// contain collectives; rounds repeat until every rank's window is long enough. Returns the number
// of steps run.
int64_t Trainer::extend_window(int64_t total, int64_t window_iterations, TrainResult& result) {
  measure::EnergyMonitor* energy = measurement_.energy;
  const int64_t solver_iteration = std::max<int64_t>(total - 1, 0);
  double unused = 0;
  int64_t done = 0;
  StopVote vote;  // collective: every rank extends (finish() decided it together)
  bool stop = false;
  for (int round = 0; round < 20 && !stop; ++round) {
    host_sync("host sync");
    const double elapsed = energy->elapsed_seconds();
    int64_t extra = 0;
    if (elapsed < measurement_.min_window_seconds) {
      // The window's own pace so far, plus one step of margin.
      const double per_step = elapsed / static_cast<double>(std::max<int64_t>(window_iterations + done, 1));
      extra = measure::extra_iterations_needed(0, std::max(per_step, 1e-6), measurement_.min_window_seconds - elapsed) + 1;
    }
    extra = agree_max(std::min<int64_t>(extra, (int64_t{1} << 23)));
    if (extra == 0) break;
    for (int64_t k = 0; k < extra && !stop; ++k, ++done) {
      step(step_scalars(total + done, solver_iteration, false), unused);
      stop = vote.exchange(stop_signal() != 0);
    }
  }
  vote.finish();
  // The steps run so far stay in the window: it is shorter than asked, and the run is interrupted.
  if (stop) stopped_after_training(result, "the steady window's extension");
  return done;
}

void Trainer::stopped_after_training(TrainResult& result, const char* loop) {
  result.interrupted = true;
  result.stop_signal = stop_signal();
  result.interrupted_in = loop;
  if (job_.parallel.rank == 0)
    log::warn("stopped by {} during {} after training: the run is recorded as interrupted",
              result.stop_signal != 0 ? stop_signal_name(result.stop_signal) : "a signal on another rank", loop);
}

// measure: phases. After training, with the last batch in place: a forward-only loop, a
// forward+backward loop (no gradient exchange, no update) and a full step, each long enough for
// the energy counter (>= phase_window_seconds), repeated; joules and seconds per phase follow by
// difference (measure/energy_window.hpp). No data loading inside the loops.
void Trainer::run_phase_loops(TrainResult& result) {
  measure::EnergyMonitor* energy = measurement_.energy;
  const int64_t last = std::max<int64_t>(total_iterations_ - 1, 0);
  const StepScalars s = step_scalars(last, last, false);
  write_step_values(s);  // the same values for every pass of the loops
  const char* kinds[] = {"forward", "forward_backward", "full_step"};
  auto one = [&](int kind) {
    forward(s);
    if (kind == 0) return;
    backward(s, /*exchange=*/kind == 2);
    if (kind == 1) return;
    if (buckets_) wait_gradients();
    // As in a training step: the divergence check, or fp16's overflow check and loss-scale rule, is
    // part of a step's cost, and fp16's update reads the skip flag it sets (without it, the last
    // training step's: every timed update would be skipped after a skipped last step).
    flag_divergence();
    update(s);
  };
  // Every pass votes (without waiting for the device: the vote of a pass completes at the next),
  // so a stop ends the loops within a pass or two on every rank alike.
  StopVote vote;  // collective: every rank runs the loops (finish() decided it together)
  bool stop = false;
  auto one_or_stop = [&](int kind) {
    one(kind);
    stop = vote.exchange(stop_signal() != 0);
    return !stop;
  };
  if (job_.parallel.rank == 0)
    log::info(
        "measure phases: phase-isolated loops after training ({} repeat(s) of forward, forward+backward and "
        "full step, each >= {} s)",
        measurement_.phase_repeats, measurement_.phase_window_seconds);
  // Calibration: a few synchronised iterations give each loop's length; every rank then runs the
  // largest count any rank needs (the full step has collectives).
  int64_t count[3];
  for (int k = 0; k < 3; ++k) {
    if (!one_or_stop(k)) break;
    host_sync("host sync (phase loop calibration)");
    const auto t0 = Clock::now();
    for (int i = 0; i < 3 && !stop; ++i) one_or_stop(k);
    if (stop) break;
    host_sync("host sync (phase loop calibration)");
    const double per = std::max(seconds_since(t0) / 3, 1e-6);
    count[k] =
        agree_max(std::max<int64_t>(3, static_cast<int64_t>(std::ceil(1.2 * measurement_.phase_window_seconds / per))));
  }
  for (int r = 0; r < measurement_.phase_repeats && !stop; ++r) {
    for (int k = 0; k < 3 && !stop; ++k) {
      for (int attempt = 0;; ++attempt) {
        host_sync("host sync (phase loop)");
        agree_max(0);  // a barrier: the ranks' windows start together
        energy->begin(std::string(kinds[k]).append(" loop"));
        int64_t passes = 0;
        while (passes < count[k] && one_or_stop(k)) ++passes;
        host_sync("host sync (phase loop)");
        measure::EnergyReading reading = energy->end(stop ? passes + 1 : count[k]);
        if (stop) break;  // a cut window measures nothing: dropped below with its repeat
        // Too short on any rank (a clock boost, a slow calibration): lengthen and redo on all.
        const bool short_here = reading.seconds < measurement_.phase_window_seconds;
        if (agree_max(short_here ? 1 : 0) == 0 || attempt == 4) {
          result.phase_loops.push_back({r, kinds[k], std::move(reading)});
          break;
        }
        // Sized from what this window measured (not a blind doubling, which a calibration slowed by
        // a loaded machine can leave short after every attempt); every rank takes the largest.
        const double scale = 1.2 * measurement_.phase_window_seconds / std::max(reading.seconds, 1e-6);
        count[k] = agree_max(std::max<int64_t>(2 * count[k], static_cast<int64_t>(std::ceil(count[k] * scale))));
      }
    }
  }
  vote.finish();
  if (!stop) return;
  // Whole repeats only: the per-phase figures are differences within a repeat.
  result.phase_loops.resize(result.phase_loops.size() / 3 * 3);
  stopped_after_training(result, "the phase-isolated loops of measure phases");
}

}  // namespace cnnscale
