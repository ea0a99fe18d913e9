// Trainer, the loop: steps from the resume point to the end, with the loss display, the epoch's
// report, evaluation and checkpoints between steps, the steady window around them, and after the
// last step the window's extension, the final test and the phase loops. The measurement around the
// steps is here too: the communication's busy time per step, and the windows after training (the
// extension of a short steady energy window by more steps, and the phase-isolated loops of
// `measure: phases`, both made of the step's own pieces). A stop signal ends those as it ends
// training: every rank votes at each pass (StopVote, as the training loop does), so all stop at the
// same pass, and the run is recorded interrupted.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "core/watchdog.hpp"
#include "measure/energy_window.hpp"
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
  const TrainCheckpoints::Resumed resumed = checkpoints_->resume(*net_, *solver_, loader_.get(), cb.on_message);
  // fp16: continue with the scale the interrupted run had reached. A checkpoint of another
  // precision holds the neutral 1, 0, 0, and the run then starts from the initial scale.
  if (overflow_.defined() && resumed.scale) write_loss_scale(*resumed.scale);
  result.resumed_from = resumed.path;
  resumed_run_config_ = resumed.run_config;
  const int64_t start = resumed.iteration;
  checkpoints_->check_consistent(backend_, start);
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

EvalResult Trainer::evaluate(int64_t iteration, bool* stopped) {
  CNNSCALE_CHECK(evaluator_ != nullptr, "no test set");
  return evaluator_->evaluate(iteration, stopped);
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
      measure::samples_per_second(split_.global, s.display_steps, seconds_since(s.display_since) - s.display_paused);
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
  const bool want_checkpoint = checkpoints_->due(done);
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
  result.samples_per_s = measure::samples_per_second(split_.global, result.timed_iterations, result.timed_seconds);
}

void Trainer::write_checkpoint(RunState& s, int64_t done, const TrainCallbacks& cb) {
  const std::string path = checkpoints_->save(done, *net_, *solver_, loader_.get(),
                                              overflow_.defined() ? std::optional(read_loss_scale()) : std::nullopt);
  s.last_checkpoint = done;
  if (cb.on_checkpoint) cb.on_checkpoint(path, done);
}

void Trainer::stop_early(RunState& s, int64_t done, const TrainCallbacks& cb, TrainResult& result) {
  s.end = done;
  result.interrupted = true;
  result.stop_signal = stop_signal();
  host_sync("host sync");
  check_finite();
  s.window.stop();
  result.final_loss = read_last_loss();
  if (!options_.checkpoint_dir.empty() && job_.parallel.rank == 0 && s.last_checkpoint != done)
    write_checkpoint(s, done, cb);
  if (cb.on_message)
    cb.on_message(fmt::format(
        "stopped by {} at iteration {} of {}{}",
        result.stop_signal ? stop_signal_name(result.stop_signal) : "a signal on another rank", done, total_iterations_,
        options_.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing to resume from)" : ""));
}


// ---- The communication's busy time per step.
// The calls to the communicator's own timing are all here and in take_comm_busy.
void Trainer::begin_comm_busy(int64_t iteration) {
  if (exchange_) exchange_->take_host_seconds();  // the step's own calls only
  // Bracket only the step's collectives, not the loss reads and evaluation between steps.
  if (device_comm_) device_comm_->set_busy_tag(iteration);
}

void Trainer::end_comm_busy() {
  if (device_comm_)
    device_comm_->set_busy_tag(-1);
  else if (exchange_)
    phase_timer_->add_seconds(TimelinePhase::CommBusy, exchange_->take_host_seconds());
}

void Trainer::take_comm_busy(bool keep, int64_t up_to) {
  if (!device_comm_) return;
  for (auto [iteration, ms] : device_comm_->take_busy_ms(up_to))
    if (keep) phase_timer_->add_comm_busy(iteration, ms / 1e3);
}

void Trainer::take_resolved_comm_busy() {
  // A step's collectives end before its update, so before the iteration's last mark: every
  // bracket of a resolved iteration is complete.
  const std::vector<IterationPhases>& resolved = phase_timer_->timeline();
  if (!resolved.empty()) take_comm_busy(true, resolved.back().iteration);
}

void Trainer::resolve_phases() {
  // Only after a synchronisation: the communication stream has passed every bracket then.
  phase_timer_->resolve_all();
  take_comm_busy(true);
}

// ---- Measurement windows after training.

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
    gradients_ready();
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
