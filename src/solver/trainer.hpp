// Trainer: the training loop of `cnnscale train` (and later of every sweep run): its options, its
// results and the class. Where the parts live: trainer.cpp (setup and the step), trainer_run.cpp (the
// loop), trainer_eval.cpp, trainer_measure.cpp (energy windows, phase loops), trainer_checkpoint.cpp.
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
#include "solver/sgd_solver.hpp"
#include "solver/solver_config.hpp"
#include "solver/steady_window.hpp"

namespace cnnscale {

struct TrainOptions {
  int64_t batch = 64;      // the global batch (data parallel: the sum of parallel.rank_batches)
  int64_t test_batch = 0;  // per rank; 0: this rank's training batch
  int64_t epochs = 0;      // exactly one of epochs and iterations is > 0
  int64_t iterations = 0;
  uint64_t seed = 1;
  int data_threads = 1;          // threads filling each training batch (LoaderOptions::threads)
  AugmentOptions augment;        // of the training batches (never the test set's)
  // Where batches of a byte-stored dataset (Dataset::byte_affine) are normalised and augmented.
  // Auto: GPU runs upload the bytes and decode them on the device (LoaderOptions::bytes), CPU runs
  // fill floats on the host. Host: the host, GPU runs too (--host-decode). Backend: through
  // Backend::decode_bytes, CPU runs too: the CPU backend's decode is the reference the GPU kernel is
  // tested against, and this runs the byte path end to end without a GPU (tests).
  enum class InputDecode { Auto, Host, Backend };
  InputDecode input_decode = InputDecode::Auto;
  int64_t display = 50;          // iterations between loss reads (host syncs)
  int64_t timing_warmup = 10;    // first iterations of this process left out of samples/s
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // iterations (0: only at epoch ends and the end)
  std::string resume;            // checkpoint path, "auto" (newest in checkpoint_dir) or empty
  // Resume even where the checkpoint's network, solver settings or data differ from this run's
  // (fine-tuning); each difference is logged. Without it such a resume is refused, naming one.
  bool resume_allow_changes = false;
  // Synthetic data: generate `pool_batches` distinct batches once, keep them on the device and
  // cycle through them (iteration i uses batch i mod pool), so input costs no host work or h2d.
  bool device_pool = false;
  int pool_batches = 8;
  // Unequal ranks (parallel/split_policy.hpp, trainer_split.cpp). proportional, energy and edp
  // replace parallel.rank_batches by the shares their start-up probe's models choose (each probe
  // point times at least probe_seconds of forward+backward); auto starts from proportional's probed
  // shares (auto_probe) or from parallel.rank_batches; auto, energy and edp refine their shares
  // online after every rebalance_every steps (0: never). Every split gives the one-process update.
  SplitPolicy split = SplitPolicy::Even;
  int64_t rebalance_every = kDefaultRebalanceEvery;
  // Why auto probes first by default: its online measure, the step less its exposed exchange, also
  // holds the time a fast rank's backward loses to the overlapped exchange while that waits for the
  // slow ranks, so from an even start it underrates the fast ranks and settles short of balance (on
  // one 132-SM + three 40-SM H200 partitions, CaffeNet bf16: 95+54+54+53 after 40 steps, where the
  // probe chooses 140+39+39+38 and runs 15% faster). The probe times forward+backward alone.
  bool auto_probe = true;
  double rebalance_hysteresis = 0.03;
  double probe_seconds = 0.5;
  // CPU emulation of a slower device: after its forward and after its backward the rank idles
  // (slowdown - 1) times as long as the pass took, so it computes `slowdown` times slower. 1: off.
  double slowdown = 1.0;
  // Numeric precision (core/precision.hpp): bf16/fp16 keep activations and the weights' compute
  // copies in 16 bits over fp32 master weights; the backend must have been made with the same one.
  Precision precision = Precision::FP32;
  // Replay the training step (forward, backward, divergence flag, update) from a CUDA graph
  // captured after one uncaptured step, where the backend can capture and the step allows it
  // (TrainResult::graph_note says why not otherwise). false: every step is queued op by op.
  bool cuda_graph = true;
  // Train the network with each batch norm's following ReLU (and residual sum), and each
  // convolution's and fully connected layer's following ReLU, fused into it (net/fuse.hpp): the
  // same function and parameters, fewer passes over memory. Checkpoints keep the network as
  // written. false: every layer as written.
  bool fuse_epilogues = true;
  // Mark the end of forward and backward inside the step (each mark a stream event; in a captured
  // step, a split between two graphs). false: forward, backward and update are timed as one phase,
  // reported under update, to measure what the marks cost.
  bool phase_marks = true;
  // Copies of a data-parallel step's CUDA graph (timing points as event nodes, whose events are
  // fixed at capture): how many steps the host may queue ahead of the device, since a copy is
  // launched again only once its last replay has been read. 1: a step is launched once the step
  // before has ended. Replays of a graph that forks streams, queued behind the running one, slowed
  // each of its kernel launches: on one H200 (ResNet-34, bf16, 64 a GPU, a data-parallel job of one
  // rank) the forward kernels ran as long but 0.14 ms further apart in all with 3 copies, a step
  // took 6.27 ms; 2 copies 6.22; 1 copy 6.07, against 5.97 for the one-process run. The host's wait
  // between steps costs less than that.
  int graph_copies = 1;
  static constexpr int kMaxGraphCopies = 16;  // each copy is a whole instantiated step graph
};

// The rest of what a Trainer is handed sits beside TrainOptions (the user's settings), each in a
// struct of its own: the job's ranks and the run's identity (TrainJob), how run() is measured
// (TrainMeasurement) and the tests' fault injection (TrainFaults).

// What the job hands the trainer: its ranks and how they exchange gradients (a null communicator:
// a single process), and the run's identity, stored in checkpoints and compared on resume.
struct TrainJob {
  DataParallel parallel;     // default: a single process
  std::string run_config;    // JSON of the run's options, stored in checkpoints
  std::string network_yaml;  // resolved network, stored in checkpoints
};

// How run() measures around the training; nothing here changes what is trained.
struct TrainMeasurement {
  // Energy (null: no energy windows, as in tests and `cnnscale time`). When it measures anything,
  // a steady window shorter than min_window_seconds is extended after training by extra steps
  // (same work, learning rate of the last step; recorded in the timeline as iterations >= total).
  measure::EnergyMonitor* energy = nullptr;
  MeasureMode measure = MeasureMode::Steady;
  double min_window_seconds = 3.0;    // NVML's counter moves every ~100 ms: a few seconds
  double phase_window_seconds = 1.0;  // each phase-isolated loop
  int phase_repeats = 3;
  void check() const;  // ConfigError naming the flag of a value out of range
};

// Fault injection for the tests of the divergence check (CNNSCALE_INJECT_NONFINITE_AT in train).
struct TrainFaults {
  int64_t inject_nonfinite_at = 0;  // iteration N (1-based) gets a NaN loss and NaN gradients; 0: never
};

struct EvalResult {
  int64_t samples = 0;
  double top1 = 0, top5 = 0, loss = 0;  // fractions in [0, 1]; loss averaged per sample
  int top5_k = 5;                       // min(5, classes)
  double seconds = 0;
};

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
// ConfigError for a choice the device cannot take (Host on the CPU, where decoding is on the host
// anyway); `train` asks before any work, the trainer again.
void check_input_decode(TrainOptions::InputDecode decode, bool cpu);

class UploadSlots;

// Feeds batches, steps the net and the solver, reads the loss only at display intervals, evaluates
// top-1/top-5 on the test set at each epoch end, writes checkpoints and resumes from them
// bit-identically (CPU). Host synchronisation happens only at display intervals, epoch ends,
// checkpoints, the edges of the timing window and, on GPU, when every pinned input buffer is waiting
// for its upload.
//
// Data parallel (TrainJob::parallel): every rank runs this loop on its slice of each global
// batch; gradients are summed across ranks in buckets during backward (parallel/gradient_buckets.hpp)
// and the update waits for them. The loss is weighted by each rank's share so the reduced update is
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
  const GradientBuckets* buckets() const { return buckets_.get(); }  // null in a single process
  // Whether the steps update each bucket's parameters as its exchange ends (DataParallel::
  // update_per_bucket, where the step allows it).
  bool updates_per_bucket() const { return buckets_ && buckets_->per_bucket_work(); }
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
  BatchSplit plan_batch() const;  // checks the global batch; ConfigError
  void check_options() const;
  void make_loader();
  // Whether batches of `d` go up as bytes and are decoded on the device (TrainOptions::host_decode).
  bool decodes_on_device(const Dataset& d) const;
  void fill_pool();  // device_pool: the batches on the device, filled once

  // The step and its pieces (trainer.cpp). Each piece queues work only (no host sync); the phase
  // loops (trainer_measure.cpp) run the same pieces without the step's phase marks.
  StepScalars step_scalars(int64_t t, int64_t solver_iteration, bool warmup) const;
  void step(const StepScalars& s, double& wait_seconds);
  void feed(const StepScalars& s, double& wait_seconds);  // marks data and h2d
  void forward(const StepScalars& s);
  // Backward; with `exchange` (and data parallel), each gradient bucket's allreduce starts as soon
  // as backward has produced it.
  void backward(const StepScalars& s, bool exchange);
  void wait_gradients();  // the exchanged gradients are the job's after this (data parallel)
  void inject_fault(const StepScalars& s);  // the fault injection of the step that options name
  void flag_divergence();
  void update(const StepScalars& s);
  // The step's device-side values (iteration, divergence tag, learning rate), written before the
  // step's work is queued or replayed: the work reads them from device memory.
  void write_step_values(const StepScalars& s);
  // Forward to update, with a timing mark after each phase: into `timer`, or (null, while capturing)
  // as the captured work's own timing points.
  void step_work(const StepScalars& s, PhaseTimer* timer);
  // Why the step cannot be captured (empty: it can); decided once, in the constructor.
  std::string graph_blocker() const;
  void drop_graph();  // the net's buffers are about to move (reshape): capture again later

  // comm_busy, the communication's own busy time per step (trainer.cpp): the communicator's stream
  // time when it times itself (NCCL), else the host time inside the communication calls (MPI).
  template <class Call>
  void comm_timed(Call&& call);
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

  // Measurement windows (trainer_measure.cpp).
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

  // Checkpoints (trainer_checkpoint.cpp).
  int64_t resume_from_checkpoint(const TrainCallbacks& callbacks, std::string& path);
  void check_resume_consistent(int64_t start);
  void check_compatible(const std::string& file, const std::string& saved_config, const std::string& saved_solver,
                        const std::string& saved_network) const;
  bool checkpoint_due(int64_t done) const;
  void write_checkpoint(RunState& s, int64_t done, const TrainCallbacks& cb);
  std::string save_checkpoint(int64_t done);
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
  std::unique_ptr<GradientBuckets> buckets_;
  std::string scores_blob_;  // input of the loss layer: class scores for top-k accuracy
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
  struct LossScaleFigures {
    double scale = 1.0;
    int64_t clean_steps = 0, skipped_steps = 0;
  };
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
  double host_comm_seconds_ = 0;             // the step's host time in communication calls (CPU)
  // The job's communicator when it times its own stream (NCCL): comm_busy comes from it; null on CPU
  // (comm_busy is then the host time spent in MPI calls and waits).
  DeviceCommunicator* device_comm_ = nullptr;
};

}  // namespace cnnscale
