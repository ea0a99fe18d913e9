// Trainer: the training loop of `cnnscale train` (and later of every sweep run): its results and
// the class (its settings: solver/train_options.hpp). Where the parts live: trainer.cpp (setup and
// the step), trainer_run.cpp (the loop and its measurement: energy windows, phase loops),
// trainer_split.cpp (unequal ranks). Parts of their own: the gradient exchange attached to the step
// (solver/gradient_exchange.hpp), evaluation (solver/evaluator.hpp) and checkpoints
// (solver/train_checkpoints.hpp).
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "core/precision.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "io/run_results.hpp"
#include "io/measure_mode.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/gradient_buckets.hpp"
#include "measure/energy_monitor.hpp"
#include "measure/phase_timer.hpp"
#include "net/net.hpp"
#include "solver/evaluator.hpp"
#include "solver/gradient_exchange.hpp"
#include "solver/sgd_solver.hpp"
#include "solver/solver_config.hpp"
#include "solver/steady_window.hpp"
#include "solver/step_callback.hpp"
#include "solver/train_checkpoints.hpp"
#include "solver/train_options.hpp"

namespace cnnscale {

struct DisplayInfo {
  int64_t iteration = 0;  // completed iterations
  int64_t total = 0;
  double epoch = 0;  // fractional
  double loss = 0;   // mean over the iterations since the previous display (fp16: the steps not skipped; NaN if none)
  double lr = 0;
  double samples_per_s = 0;  // over the same iterations (host clock)
};

struct EpochInfo {
  int64_t epoch = 0;  // completed epochs
  int64_t iteration = 0;
  double train_loss = 0;  // mean training loss over the epoch's iterations (the job's; fp16: as DisplayInfo::loss)
  double lr = 0;          // learning rate of the epoch's last iteration
  std::optional<EvalResult> test;
  double seconds = 0;  // training time to the epoch's end: since run() began, less evaluations and checkpoints
};

// One phase-isolated loop of `measure: phases` on this rank.
struct PhaseLoopRecord {
  int repeat = 0;
  std::string kind;  // "forward", "forward_backward", "full_step"
  measure::EnergyReading reading;
};

struct TrainCallbacks {
  std::function<void(int64_t iteration, int64_t total)> on_iteration;  // every step, no sync
  std::function<void(const DisplayInfo&)> on_display;
  std::function<void(const EpochInfo&)> on_epoch;
  std::function<void(const std::string& path, int64_t iteration)> on_checkpoint;
  std::function<void(const std::string& message)> on_message;
};

struct TrainResult {
  int64_t start_iteration = 0;  // > 0 when resumed
  int64_t iterations = 0;       // completed iterations in total (including those before a resume)
  int64_t iterations_per_epoch = 0;
  double epochs = 0;   // iterations / iterations_per_epoch
  double seconds = 0;  // wall time of run(), evaluation and checkpoints included
  // Steady state: iterations after the timing warm-up, evaluation and checkpoint pauses excluded.
  int64_t timed_iterations = 0;
  double timed_seconds = 0;
  double samples_per_s = 0;
  double data_wait_seconds = 0;  // host time spent waiting for the loader
  double final_loss = 0;         // loss of the last training iteration (over the global batch)
  double final_lr = 0;
  std::optional<EvalResult> test;
  std::string resumed_from;
  // Per-iteration phase times of this rank (iterations of this process; the first timing_warmup
  // flagged as warm-up) and their means over the non-warm-up iterations. See measure/phase_timer.hpp.
  std::vector<IterationPhases> phases;
  PhaseSummary phase_summary;
  // With TrainMeasurement::energy: the steady window (the timed iterations plus the extension), and for
  // `measure: phases` every loop of every repeat.
  std::optional<measure::EnergyReading> window;
  int64_t extension_iterations = 0;
  std::vector<PhaseLoopRecord> phase_loops;
  // Stopped early by a stop signal (core/stop_signal.hpp) at a step boundary agreed by every rank:
  // `iterations` is where it stopped, a checkpoint of that point was written (with a checkpoint
  // directory), and no extension window, phase loops or final test were run. A stop during those
  // loops after training (`interrupted_in` names which) ends them too: the training itself is whole.
  bool interrupted = false;
  std::string interrupted_in;  // "" (training), else the loop after training the stop ended
  int stop_signal = 0;  // the signal this rank received (0: another rank's signal stopped the job)
  // The split over the run: the policy, every change of shares (the first at the start), and the
  // probe's points and every rank's fitted model (the same on every rank). wait_watts: this rank's
  // GPU power while idle, what waiting at the exchange is charged (NaN: not measured).
  SplitRecord split;
  double wait_watts = std::nan("");
  // fp16: steps skipped because a gradient overflowed, and the loss scale at the end (1 without).
  int64_t skipped_steps = 0;
  double final_grad_scale = 1.0;
  // Most device memory this rank's backend held at once over the run, bytes (Backend::memory_stats).
  int64_t peak_memory_bytes = 0;
  // CUDA graph: steps replayed from a captured graph, captures made (one, plus one after each time
  // the net's buffers moved), and why steps were not captured ("" when they were).
  int64_t graph_replays = 0;
  int64_t graph_captures = 0;
  std::string graph_note;
};

class DeviceCommunicator;

class UploadSlots;

// Feeds batches, steps the net and the solver, reads the loss only at display intervals, evaluates
// top-1/top-5 on the test set at each epoch end, writes checkpoints and resumes from them
// bit-identically (CPU). Host synchronisation happens only at display intervals, epoch ends,
// checkpoints, the edges of the timing window and, on GPU, when every pinned input buffer is waiting
// for its upload.
//
// Data parallel (TrainJob::parallel): every rank runs this loop on its slice of each global
// batch; gradients are summed across ranks in buckets during backward by the exchange attached to
// the step (GradientExchange, a StepCallback) and the update waits for them. The loss is weighted by each rank's share so the reduced update is
// the one-process update on the global batch. Displayed losses and test results are the job's
// (reduced over ranks); only rank 0 writes checkpoints; every rank reads one to resume.
struct ProbeSaved;  // trainer_split.cpp: tensors the start-up probe writes, kept to be put back

class Trainer {
 public:
  // `test` may be null (synthetic data). Throws ConfigError for inconsistent options.
  Trainer(const NetSpec& spec, Backend& backend, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, const SolverConfig& solver, TrainOptions options, TrainJob job = {},
          TrainMeasurement measurement = {}, TrainFaults faults = {});
  ~Trainer();

  TrainResult run(const TrainCallbacks& callbacks = {});
  // With `stopped`: a stop signal on any rank ends the pass early and sets *stopped on every rank
  // (the result is then partial); without, the pass always runs to the end.
  EvalResult evaluate(int64_t iteration, bool* stopped = nullptr);

  Net& net() { return *net_; }
  const SgdSolver& solver() const { return *solver_; }
  int64_t iterations_per_epoch() const { return iterations_per_epoch_; }
  int64_t total_iterations() const { return total_iterations_; }
  int64_t local_batch() const { return split_.local; }               // this rank's samples per iteration
  // Every rank's samples per iteration now (a probe or `auto` may have changed the first split);
  // empty in a single process.
  const std::vector<int64_t>& rank_batches() const { return job_.parallel.rank_batches; }
  // null in a single process
  const GradientBuckets* buckets() const { return exchange_ ? &exchange_->buckets() : nullptr; }
  // Whether the steps update each bucket's parameters as its exchange ends (DataParallel::
  // update_per_bucket, where the step allows it).
  bool updates_per_bucket() const { return exchange_ && exchange_->queues_update(); }
  // Whether the exchange sums the net's compute gradients in place (DataParallel::
  // exchange_compute_grads, where the precision allows it).
  bool exchanges_compute_grads() const { return plan_.sum_compute_grads; }
  // How many layers form their gradients from gathered rows (DataParallel::gather_gradients).
  size_t gathering_layers() const { return net_->gathering_layers(); }
  const GradientPlan& gradient_plan() const { return plan_; }  // decided once, in the constructor
  // The run configuration (TrainJob::run_config) stored in the checkpoint run() resumed from;
  // empty when it did not resume.
  const std::string& resumed_run_config() const { return resumed_run_config_; }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

  // This rank's part of the global batch, worked out (and the global batch checked) once.
  struct BatchSplit {
    int64_t global = 0;        // the global batch: the sum of the ranks' batches
    int64_t local = 0;         // samples per iteration on this rank
    int64_t shard_begin = 0;   // where this rank's slice starts in each global batch
    double share = 1.0;        // local / global batch: the loss scale (exactly 1 in a single process)
    float loss_weight = 1.0f;  // the share as the weight of this rank's loss in the job-wide sums
  };

  // The values that change from one step to the next, gathered here (step_scalars). Everything
  // else the step touches keeps its address from one iteration to the next: the net's buffers, the
  // input pool or the loader's pinned slots, the divergence flag and the loss sums are allocated
  // once, in the constructor. Capturing the step as a CUDA graph then needs only these values read
  // from device memory instead of passed as arguments.
  struct StepScalars {
    int64_t iteration = 0;         // position in the data order and the timeline
    uint64_t dropout_seed = 0;     // the iteration
    int64_t solver_iteration = 0;  // the learning rate's position in its schedule (the extension repeats the last)
    int64_t pool_slot = -1;        // device_pool: the input batch (the loader picks its own buffers)
    int32_t nonfinite_tag = 0;     // iteration + 1: what the divergence flag records
    bool warmup = false;           // left out of the phase means
  };

  // run()'s bookkeeping between steps (trainer_run.cpp).
  struct RunState {
    explicit RunState(measure::EnergyMonitor* energy) : window(energy) {}
    int64_t start = 0, warmup = 0;
    int64_t end = 0;  // where training stops: the total, or the boundary agreed after a stop signal
    SteadyWindow window;
    int64_t display_steps = 0;  // steps run in the display interval
    Clock::time_point display_since;
    double display_paused = 0;  // evaluation and checkpoint time inside the display window
    Clock::time_point run_since;
    double paused = 0;          // evaluation and checkpoint time since run_since
    int64_t epoch_steps = 0;    // steps run in the epoch
    // fp16: the loss scale's skipped-step count when the display interval and the epoch began; the
    // steps skipped since are not in the loss sums.
    int64_t display_skipped = 0, epoch_skipped = 0;
    int64_t last_checkpoint = -1;
    std::optional<EvalResult> last_test;
    bool evaluated_at_end = false;
    bool final_test_stopped = false;  // a stop signal ended the test after the last step (finish())
    int64_t settle_until = -1;  // auto: the window restarts after this iteration (a new split settling)
  };

  // Setup (trainer.cpp).
  BatchSplit plan_batch() const;  // the global batch and this rank's slice of it; ConfigError
  void check_options() const;
  void make_loader();
  // Whether batches of `d` go up as bytes and are decoded on the device (TrainOptions::host_decode).
  bool decodes_on_device(const Dataset& d) const;
  void fill_pool();  // device_pool: the batches on the device, filled once

  // The step and its pieces (trainer.cpp). Each piece queues work only (no host sync); the phase
  // loops (trainer_run.cpp) run the same pieces without the step's phase marks.
  StepScalars step_scalars(int64_t t, int64_t solver_iteration, bool warmup) const;
  void step(const StepScalars& s, double& wait_seconds);
  void feed(const StepScalars& s, double& wait_seconds);  // marks data and h2d
  void forward(const StepScalars& s);
  // Backward; with `exchange`, the attached step callback (the data-parallel exchange) is handed
  // each layer's gradients as backward produces them.
  void backward(const StepScalars& s, bool exchange);
  void gradients_ready();  // the exchanged gradients are the job's after this (data parallel)
  void inject_fault(const StepScalars& s);  // the fault injection of the step that options name
  void flag_divergence();
  void update(const StepScalars& s);
  // The step's device-side values (iteration, divergence tag, learning rate), written before the
  // step's work is queued or replayed: the work reads them from device memory.
  void write_step_values(const StepScalars& s);
  // Forward to update, with a timing mark after each phase: into `timer`, or (null, while capturing)
  // as the captured work's own timing points.
  void step_work(const StepScalars& s, PhaseTimer* timer);
  void mark_phase(TimelinePhase phase, PhaseTimer* timer);
  // Why the step cannot be captured (empty: it can); decided once, in the constructor.
  std::string graph_blocker() const;
  void drop_graph();  // the net's buffers are about to move (reshape): capture again later

  // comm_busy, the communication's own busy time per step (trainer_run.cpp): the communicator's stream
  // time when it times itself (NCCL), else the host time inside the exchange's calls (MPI).
  void begin_comm_busy(int64_t iteration);
  void end_comm_busy();
  // The communicator's per-iteration times (of iterations <= up_to) into the timeline, or dropped.
  void take_comm_busy(bool keep, int64_t up_to = std::numeric_limits<int64_t>::max());
  void take_resolved_comm_busy();  // the same for the iterations the timer has resolved, without waiting
  void resolve_phases();           // after a synchronisation: every ended iteration into the timeline

  // Host reads (trainer.cpp).
  void host_sync(const char* operation);
  float read_scalar(const Tensor& t, const char* operation);  // job-wide sum when data parallel
  double read_last_loss();  // the last step's loss over the global batch (a collective when parallel)
  // Reads the device-side divergence flag (set in every step by flag_divergence, or by the update
  // where the plan's update_checks_gradients); throws
  // RuntimeError naming the first non-finite iteration. Call where the host synchronises anyway.
  void check_finite();

  // The loop (trainer_run.cpp).
  void accumulate_loss(RunState& s);
  void display(RunState& s, int64_t t, const TrainCallbacks& cb, TrainResult& result);
  void pause_for_reports(RunState& s, int64_t t, const TrainCallbacks& cb);  // test, epoch end, checkpoint
  void finish(RunState& s, TrainResult& result);

  // Measurement windows (trainer_run.cpp).
  int64_t agree_max(int64_t value);  // the largest of every rank's value
  // Extra steps after the last iteration (`total`) until the energy window is long enough.
  // A stop signal ends either at a step agreed by every rank, marking `result` interrupted.
  int64_t extend_window(int64_t total, int64_t window_iterations, TrainResult& result);
  void run_phase_loops(TrainResult& result);  // measure: phases
  void stopped_after_training(TrainResult& result, const char* loop);  // marks `result`, says so once

  // Unequal ranks (trainer_split.cpp).
  void plan_split(TrainResult& result, int64_t start, const TrainCallbacks& cb);  // the probe and the policy's first shares
  bool probes_split() const;  // whether plan_split runs the start-up probe (model policies, auto from it)
  bool refines_split() const;  // whether maybe_rebalance refines the shares online (auto, energy, edp)
  ProbeSample time_probe(int64_t batch, const std::function<void()>& step, bool collective = false);
  double probe_window_seconds(bool joules) const;  // a probe window's length (joules: read the energy counter)
  std::vector<ProbeSample> probe_rank(const std::vector<int64_t>& batches);
  ProbeSample probe_update();  // the update's seconds and joules per step (batch 0: any share)
  ProbeSample probe_step();    // whole steps with the exchange, every rank together, at the even split
  void upload_probe_batch(int64_t n);  // the net reshaped to n samples, its input the first n of the set
  void keep_update_writes(ProbeSaved& saved) const;  // what an update writes, kept to be put back
  double measure_wait_watts();
  // auto, energy, edp: after step t, every rebalance_every steps, new shares when they pay (collective).
  void maybe_rebalance(RunState& s, int64_t t, const TrainCallbacks& cb);
  void apply_split(const std::vector<int64_t>& shares);  // after a host sync with no upload in flight
  void slow_down(Clock::time_point since, bool flush = false);  // --slowdown on CPU ranks

  // Checkpoints between steps (trainer_run.cpp; the checkpoints themselves: checkpoints_).
  void write_checkpoint(RunState& s, int64_t done, const TrainCallbacks& cb);
  // A stop signal agreed by every rank after iteration `done`: a checkpoint, and the run ends there.
  void stop_early(RunState& s, int64_t done, const TrainCallbacks& cb, TrainResult& result);

  Backend& backend_;
  std::shared_ptr<const Dataset> train_, test_;
  TrainOptions options_;
  TrainJob job_;
  TrainMeasurement measurement_;
  TrainFaults faults_;
  BatchSplit split_;
  SplitRecord split_record_;
  Rebalancer rebalancer_;     // auto, energy, edp: its speed estimates carry over from one decision to the next
  double slowdown_debt_ = 0;  // --slowdown: idle seconds owed (negative: a sleep overshot)
  std::unique_ptr<Net> net_;
  std::unique_ptr<SgdSolver> solver_;
  std::unique_ptr<Loader> loader_;            // absent with device_pool
  std::unique_ptr<UploadSlots> train_slots_;  // loader_'s buffers on their way to the device
  std::vector<Tensor> pool_data_, pool_labels_;
  int64_t iterations_per_epoch_ = 0, total_iterations_ = 0;
  // The data-parallel gradient exchange (null in a single process), attached to the step as its
  // callback: the step itself calls step_callback_ only.
  std::unique_ptr<GradientExchange> exchange_;
  StepCallback* step_callback_ = nullptr;
  std::unique_ptr<Evaluator> evaluator_;  // null without a test set
  std::unique_ptr<TrainCheckpoints> checkpoints_;
  std::string resumed_run_config_;
  Tensor nonfinite_;  // (1) i32: 0, or the first iteration (1-based) with a non-finite loss/gradient
  // fp16 loss scaling (needs_loss_scaling), all in device memory so that the step can be captured:
  // the overflow flag (i32 (1)), the scale and its inverse (f32 (2), the net's device gradient
  // scale) and the rule's state (i32 (3): clean steps in a row, skipped steps, this step skipped).
  Tensor overflow_, loss_scale_, scale_state_;
  // How the gradient buffers are written, exchanged and read (net/gradient_plan.hpp): decided once
  // in the constructor, the net's own (Net::gradient_plan), read by the exchange and the update.
  GradientPlan plan_;
  // This step's exchange has queued the update, bucket by bucket (checking the gradients it read);
  // update() then only closes it.
  bool update_queued_ = false;
  LossScaleFigures read_loss_scale();  // a host read (fp16 runs; else the neutral figures)
  // The mean loss of `steps` steps whose weighted losses sum to `sum`, `skipped_before` of the loss
  // scale's skipped steps counted when they began (updated to now); none where every one was skipped.
  std::optional<double> mean_loss(double sum, int64_t steps, int64_t& skipped_before);
  void write_loss_scale(const LossScaleFigures& f);
  // (1) each: the loss sums of the display interval and of the epoch, the last step's weighted loss
  // (the job-wide sum read at the end), and the loss of the last step the update applied (NaN before
  // the first; fp16's skipped steps leave it).
  Tensor display_loss_sum_, epoch_loss_sum_, last_loss_, step_loss_;
  // (2) i32 on the device: the step's iteration and its divergence tag (views below).
  Tensor step_values_, step_iteration_, step_tag_;
  // CUDA graph of step_work: captured after an uncaptured step with the same buffers, replayed
  // after. graph_note_: why steps are not captured ("" when they are).
  // Data parallel with NCCL, the exchange runs on the communication stream across backward's end,
  // so the timing points are event nodes of TrainOptions::graph_copies copies of the step
  // (CaptureOptions): a replay waits, if it must, for the phases of the step that many before it
  // to be read.
  std::unique_ptr<CapturedWork> graph_;
  // The timing points of the capture that close a phase (index, phase), and the communication
  // stream's busy brackets (indices of their two points), in capture order.
  std::vector<std::pair<size_t, TimelinePhase>> graph_phases_;
  std::vector<std::pair<size_t, size_t>> graph_brackets_;
  std::string graph_note_;
  int64_t steps_since_change_ = 0;  // uncaptured steps since the buffers last moved
  uint64_t graph_generation_ = 0;   // the net's generation() those steps ran with
  int64_t graph_captures_ = 0, graph_replays_ = 0;
  // Collectives a replay of graph_ starts (counted for the progress board at each launch), and
  // whether the capture already counted the next launch's.
  int64_t graph_collectives_ = 0;
  bool graph_counted_ = false;
  std::unique_ptr<PhaseTimer> phase_timer_;  // the current run()'s
  // The job's communicator when it times its own stream (NCCL): comm_busy comes from it; null on CPU
  // (comm_busy is then the host time spent in MPI calls and waits).
  DeviceCommunicator* device_comm_ = nullptr;
};

}  // namespace cnnscale
