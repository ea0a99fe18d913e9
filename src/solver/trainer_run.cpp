// Trainer, the loop: steps from the resume point to the end, with the loss display, the epoch's
// report, evaluation and checkpoints between steps, the steady window around them, and after the
// last step the window's extension, the final test and the phase loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "core/watchdog.hpp"
#include "measure/metrics.hpp"
#include "parallel/stop_vote.hpp"
#include "solver/trainer.hpp"
#include "solver/upload_slots.hpp"

namespace cnnscale {

TrainResult Trainer::run(const TrainCallbacks& cb) {
  const auto t_start = Clock::now();
  TrainResult result;
  result.iterations_per_epoch = iterations_per_epoch_;
  set_watchdog_iteration(-1);
  const int64_t start = resume_from_checkpoint(cb, result.resumed_from);
  check_resume_consistent(start);
  result.start_iteration = start;
  plan_split(result, start, cb);
  // The probe's larger batches and saved copies are not the run's: its peak memory starts here.
  if (probes_split()) backend_.reset_peak_memory();
  const int64_t total = total_iterations_;

  RunState s(measurement_.energy);
  s.start = start;
  s.end = total;
  // Too short a run to leave anything out: time it all.
  s.warmup = total - start > 2 * options_.timing_warmup ? options_.timing_warmup : 0;
  s.display_since = Clock::now();
  s.run_since = s.display_since;
  if (s.warmup == 0) s.window.start();
  backend_.fill(display_loss_sum_, 0.0f);
  backend_.fill(epoch_loss_sum_, 0.0f);
  s.display_skipped = s.epoch_skipped = read_loss_scale().skipped_steps;
  phase_timer_ = std::make_unique<PhaseTimer>(backend_);
  take_comm_busy(false);  // forget brackets from before this run
  StopVote stop_vote;     // collective: every rank constructs it here

  for (int64_t t = start; t < total; ++t) {
    step(step_scalars(t, t, t - start < s.warmup || t < s.settle_until), result.data_wait_seconds);
    accumulate_loss(s);
    const int64_t done = t + 1;
    if (s.window.timing()) ++result.timed_iterations;
    if (done == s.settle_until && !s.window.timing()) {
      host_sync("host sync");
      s.window.start();
    }
    if (cb.on_iteration) cb.on_iteration(done, total);
    if (!s.window.timing() && s.warmup > 0 && done - start == s.warmup) {
      host_sync("host sync");
      s.window.start();
    }
    if (done % options_.display == 0 || done == total) display(s, t, cb, result);
    pause_for_reports(s, t, cb);
    maybe_rebalance(s, t, cb);
    // A stop signal: every rank stops at the boundary the vote agrees on, with a checkpoint.
    if (done < total && stop_vote.exchange(stop_signal() != 0)) {
      stop_early(s, done, cb, result);
      break;
    }
  }
  stop_vote.finish();
  finish(s, result);
  result.seconds = seconds_since(t_start);
  // Since the backend was made: the net's buffers, allocated before run(), are most of it.
  result.peak_memory_bytes = backend_.memory_stats().peak_bytes;
  return result;
}

// Weighted by this rank's share, the job-wide sum at display time is the global-batch mean. The
// step's loss is kept apart too, as evaluation's forward passes overwrite the net's.
// fp16: a step the loss scale skips is left out. Its loss may be inf or NaN (a forward overflow),
// and it changed nothing, so it must neither poison the mean nor be taken for divergence; a real
// divergence is flagged by the loss-scale rule (no scale left to halve).
void Trainer::accumulate_loss(RunState& s) {
  const Tensor skip = overflow_.defined() ? scale_state_.view(2, Shape{1}) : Tensor();
  for (const Tensor* sum : {&display_loss_sum_, &epoch_loss_sum_})
    backend_.axpby_unless(split_.loss_weight, net_->loss(), 1.0f, *sum, skip);
  backend_.axpby_unless(1.0f, net_->loss(), 0.0f, step_loss_, skip);
  ++s.display_steps;
  ++s.epoch_steps;
}

std::optional<double> Trainer::mean_loss(double sum, int64_t steps, int64_t& skipped_before) {
  const int64_t skipped = overflow_.defined() ? read_loss_scale().skipped_steps : 0;
  const int64_t summed = steps - (skipped - skipped_before);
  CNNSCALE_CHECK(summed >= 0 && summed <= steps, "{} of {} steps skipped since the loss sum began",
                 skipped - skipped_before, steps);
  skipped_before = skipped;
  if (summed <= 0) return std::nullopt;
  return sum / static_cast<double>(summed);
}

// The display interval's mean loss. Its read waits for the step, so every upload has completed and
// every ended iteration's phases can be resolved.
void Trainer::display(RunState& s, int64_t t, const TrainCallbacks& cb, TrainResult& result) {
  const int64_t done = t + 1, total = total_iterations_;
  const float host_sum = read_scalar(display_loss_sum_, "loss download");
  check_finite();
  if (train_slots_) train_slots_->release_all();
  resolve_phases();
  const std::optional<double> mean = mean_loss(host_sum, s.display_steps, s.display_skipped);
  if (mean && !std::isfinite(*mean))
    throw_runtime("training diverged: loss is {} at iteration {} (try a lower --lr)", *mean, done);
  if (done == total) result.final_loss = read_last_loss();
  DisplayInfo d;
  d.iteration = done;
  d.total = total;
  d.epoch = static_cast<double>(done) / iterations_per_epoch_;
  d.loss = mean.value_or(std::numeric_limits<double>::quiet_NaN());  // NaN: every step skipped (fp16)
  d.lr = solver_->lr(t);
  d.samples_per_s =
      measure::samples_per_second(options_.batch, s.display_steps, seconds_since(s.display_since) - s.display_paused);
  if (cb.on_display) cb.on_display(d);
  backend_.fill(display_loss_sum_, 0.0f);
  s.display_steps = 0;
  s.display_paused = 0;
  s.display_since = Clock::now();
}

// After the step that completed iteration t: the test at epoch ends and the end, the epoch's report
// and checkpoints. The steady window and the display rate leave out the time they take.
void Trainer::pause_for_reports(RunState& s, int64_t t, const TrainCallbacks& cb) {
  const int64_t done = t + 1;
  const bool epoch_end = done % iterations_per_epoch_ == 0;
  const bool want_test = test_ && (epoch_end || done == total_iterations_);
  const bool want_checkpoint = checkpoint_due(done);
  if (!want_test && !want_checkpoint && !epoch_end) return;
  const bool was_timing = s.window.timing();
  // The pause starts once the steps queued before it have run: on a GPU the host is steps ahead,
  // and the wait for them is training time (the epoch-end loss read below waits for them too; timed
  // from before it, the display rate and the epoch's training time left those steps out).
  host_sync("host sync");
  Clock::time_point pause_start = Clock::now();
  if (want_test || want_checkpoint) {
    check_finite();  // never a checkpoint (or a test result) from a diverged state
    s.window.stop();
    if (train_slots_) train_slots_->release_all();
    pause_start = Clock::now();
  }
  bool test_stopped = false;
  if (want_test) {
    // A stop signal ends a test within a batch, on every rank alike (evaluate's one reduction tells
    // them all); a part of the test set is no accuracy, so the epoch record gets none. Between
    // epochs the stop vote below then ends training at the next boundary with a checkpoint. The
    // test after the last step is a loop after training: finish() records the run as interrupted;
    // the checkpoint below is still written, the training is whole.
    const bool last = done == total_iterations_;
    EvalResult test = evaluate(t, &test_stopped);
    if (!test_stopped) s.last_test = test;
    s.evaluated_at_end = last && !test_stopped;
    s.final_test_stopped = last && test_stopped;
  }
  if (epoch_end) {
    EpochInfo info{done / iterations_per_epoch_,
                   done,
                   0.0,
                   solver_->lr(t),
                   want_test && !test_stopped ? s.last_test : std::nullopt,
                   std::chrono::duration<double>(pause_start - s.run_since).count() - s.paused};
    info.train_loss = mean_loss(read_scalar(epoch_loss_sum_, "loss download"), s.epoch_steps, s.epoch_skipped)
                          .value_or(std::numeric_limits<double>::quiet_NaN());
    backend_.fill(epoch_loss_sum_, 0.0f);
    s.epoch_steps = 0;
    if (cb.on_epoch) cb.on_epoch(info);
  }
  if (want_checkpoint) write_checkpoint(s, done, cb);
  if (was_timing && !s.window.timing()) s.window.start();
  s.display_paused += seconds_since(pause_start);
  s.paused += seconds_since(pause_start);
}

// After the last step. An interrupted run (every rank alike) gets no extension window, final test or
// phase loops: a pre-empted job has little time left. A stop during one of them ends it and skips
// the rest (stopped_after_training).
void Trainer::finish(RunState& s, TrainResult& result) {
  measure::EnergyMonitor* energy = measurement_.energy;
  const int64_t total = total_iterations_;
  if (s.final_test_stopped) stopped_after_training(result, "the final test");
  const bool finished = !result.interrupted;
  // Collective decision: on CPU ranks only one per host reads RAPL, yet the extension steps
  // contain collectives that every rank must join.
  if (finished && energy && total > s.start && agree_max(s.window.timing() && energy->measures_energy() ? 1 : 0) > 0) {
    result.extension_iterations = extend_window(total, result.timed_iterations, result);
    result.timed_iterations += result.extension_iterations;
  }
  host_sync("host sync");
  check_finite();
  s.window.stop();
  result.timed_seconds = s.window.seconds();
  if (energy && energy->open()) result.window = energy->end(result.timed_iterations);
  if (train_slots_) train_slots_->release_all();
  resolve_phases();
  result.phases = phase_timer_->timeline();
  result.phase_summary = phase_timer_->summary();
  result.split = split_record_;
  const LossScaleFigures scale = read_loss_scale();  // the neutral 1 and 0 unless fp16
  result.skipped_steps = scale.skipped_steps;
  result.final_grad_scale = scale.scale;
  result.graph_replays = graph_replays_;
  result.graph_captures = graph_captures_;
  result.graph_note = graph_note_;

  // A run resumed at its end still reports its accuracy.
  if (finished && !result.interrupted && test_ && !s.evaluated_at_end) {
    bool stopped = false;
    EvalResult test = evaluate(total, &stopped);
    if (stopped)  // a part of the test set is no accuracy: the run keeps its last whole test, if any
      stopped_after_training(result, "the final test");
    else
      s.last_test = test;
  }
  if (finished && !result.interrupted && energy && measurement_.measure == MeasureMode::Phases) run_phase_loops(result);
  result.test = s.last_test;
  result.iterations = s.end;
  result.epochs = static_cast<double>(s.end) / iterations_per_epoch_;
  result.final_lr = solver_->lr(std::max<int64_t>(s.end - 1, 0));
  if (s.start == s.end) result.final_loss = std::nan("");  // nothing trained in this process
  result.samples_per_s = measure::samples_per_second(options_.batch, result.timed_iterations, result.timed_seconds);
}

}  // namespace cnnscale
