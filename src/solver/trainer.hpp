// Trainer: the training loop of `cnnscale train` (and later of every sweep run): feeds batches,
// steps the net and the solver, reads the loss only at display intervals, evaluates top-1/top-5 on
// the test set at each epoch end, writes checkpoints and resumes from them bit-identically (CPU).
//
// Host synchronisation happens only at display intervals, epoch ends, checkpoints, the edges of
// the timing window and, on GPU, when every pinned input buffer is waiting for its upload.
//
// Data parallel (TrainOptions::parallel): every rank runs this loop on its slice of each global
// batch; gradients are summed across ranks in buckets during backward (parallel/gradient_buckets.hpp)
// and the update waits for them. The loss is weighted by each rank's share so the reduced update is
// the one-process update on the global batch. Displayed losses and test results are the job's
// (reduced over ranks); only rank 0 writes checkpoints; every rank reads one to resume.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "io/measure_mode.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/gradient_buckets.hpp"
#include "measure/energy_monitor.hpp"
#include "measure/phase_timer.hpp"
#include "net/net.hpp"
#include "solver/sgd_solver.hpp"
#include "solver/solver_config.hpp"

namespace cnnscale {

struct TrainOptions {
  int64_t batch = 64;      // the global batch (data parallel: the sum of parallel.rank_batches)
  int64_t test_batch = 0;  // per rank; 0: this rank's training batch
  int64_t epochs = 0;      // exactly one of epochs and iterations is > 0
  int64_t iterations = 0;
  uint64_t seed = 1;
  int64_t display = 50;          // iterations between loss reads (host syncs)
  int64_t timing_warmup = 10;    // first iterations of this process left out of samples/s
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // iterations (0: only at epoch ends and the end)
  std::string resume;            // checkpoint path, "auto" (newest in checkpoint_dir) or empty
  // Synthetic data: generate `pool_batches` distinct batches once, keep them on the device and
  // cycle through them (iteration i uses batch i mod pool), so input costs no host work or h2d.
  bool device_pool = false;
  int pool_batches = 8;
  std::string run_config;    // JSON of the run's options, stored in checkpoints
  std::string network_yaml;  // resolved network, stored in checkpoints
  DataParallel parallel;     // default: a single process
  // Energy (null: no energy windows, as in tests and `cnnscale time`). When it measures anything,
  // a steady window shorter than min_window_seconds is extended after training by extra steps
  // (same work, learning rate of the last step; recorded in the timeline as iterations >= total).
  measure::EnergyMonitor* energy = nullptr;
  MeasureMode measure = MeasureMode::Steady;
  double min_window_seconds = 3.0;    // NVML's counter moves every ~100 ms: a few seconds
  double phase_window_seconds = 1.0;  // each phase-isolated loop
  int phase_repeats = 3;
  // Fault injection for the tests of the divergence check (CNNSCALE_INJECT_NONFINITE_AT in train):
  // iteration N (1-based) gets a NaN loss and NaN gradients. 0: never.
  int64_t inject_nonfinite_at = 0;
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
  double loss = 0;   // mean over the iterations since the previous display
  double lr = 0;
  double samples_per_s = 0;  // over the same iterations (host clock)
};

struct EpochInfo {
  int64_t epoch = 0;  // completed epochs
  int64_t iteration = 0;
  double train_loss = 0;  // mean training loss over the epoch's iterations (the job's)
  double lr = 0;          // learning rate of the epoch's last iteration
  std::optional<EvalResult> test;
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
  // With TrainOptions::energy: the steady window (the timed iterations plus the extension), and for
  // `measure: phases` every loop of every repeat.
  std::optional<measure::EnergyReading> window;
  int64_t extension_iterations = 0;
  std::vector<PhaseLoopRecord> phase_loops;
  // Stopped early by a stop signal (core/stop_signal.hpp) at a step boundary agreed by every rank:
  // `iterations` is where it stopped, a checkpoint of that point was written (with a checkpoint
  // directory), and no extension window, phase loops or final test were run.
  bool interrupted = false;
  int stop_signal = 0;  // the signal this rank received (0: another rank's signal stopped the job)
};

class DeviceCommunicator;

class Trainer {
 public:
  // `test` may be null (synthetic data). Throws ConfigError for inconsistent options.
  Trainer(const NetSpec& spec, Backend& backend, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, const SolverConfig& solver, TrainOptions options);
  ~Trainer();

  TrainResult run(const TrainCallbacks& callbacks = {});
  EvalResult evaluate(int64_t iteration);

  Net& net() { return *net_; }
  const SgdSolver& solver() const { return *solver_; }
  int64_t iterations_per_epoch() const { return iterations_per_epoch_; }
  int64_t total_iterations() const { return total_iterations_; }
  int64_t local_batch() const { return local_batch_; }               // this rank's samples per iteration
  const GradientBuckets* buckets() const { return buckets_.get(); }  // null in a single process
  // The run configuration (TrainOptions::run_config) stored in the checkpoint run() resumed from;
  // empty when it did not resume.
  const std::string& resumed_run_config() const { return resumed_run_config_; }

 private:
  void feed(int64_t iteration, double& wait_seconds);  // marks data and h2d on phase_timer_
  // One training step of iteration `t` (data index, dropout seed) with the solver at
  // `solver_iteration`, recorded in the phase timer; queues work only (no sync).
  void step(int64_t t, int64_t solver_iteration, bool warmup, double& wait_seconds);
  // Extra steps after the last iteration (`total`) until the energy window is long enough.
  int64_t extend_window(int64_t total, int64_t window_iterations);
  void run_phase_loops(TrainResult& result);  // measure: phases
  int64_t agree_max(int64_t value);           // the largest of every rank's value
  void exchange_gradients_backward(int64_t iteration);
  void resolve_phases();  // after a synchronisation: every ended iteration into the timeline
  void host_sync(const char* operation);
  float read_scalar(const Tensor& t, const char* operation);  // job-wide sum when data parallel
  double read_last_loss();  // the last step's loss over the global batch (a collective when parallel)
  void check_resume_consistent(int64_t start);
  void release_uploaded();
  int64_t resume_from_checkpoint(const TrainCallbacks& callbacks, std::string& path);
  void check_compatible(const std::string& file, const std::string& saved_config) const;
  std::string save_checkpoint(int64_t done);
  // Reads the device-side divergence flag (set by flag_nonfinite in every step); throws
  // RuntimeError naming the first non-finite iteration. Call where the host synchronises anyway.
  void check_finite();

  Backend& backend_;
  std::shared_ptr<const Dataset> train_, test_;
  TrainOptions options_;
  std::unique_ptr<Net> net_;
  std::unique_ptr<SgdSolver> solver_;
  std::unique_ptr<Loader> loader_;  // absent with device_pool
  std::vector<Tensor> pool_data_, pool_labels_;
  std::vector<int> uploaded_slots_;  // loader buffers whose uploads may still be pending
  int64_t iterations_per_epoch_ = 0, total_iterations_ = 0;
  int64_t local_batch_ = 0, shard_begin_ = 0;  // this rank's slice of each global batch
  float loss_share_ = 1.0f;                    // local_batch_ / batch: weight of this rank's loss
  std::unique_ptr<GradientBuckets> buckets_;
  std::string scores_blob_;  // input of the loss layer: class scores for top-k accuracy
  std::string resumed_run_config_;
  Tensor nonfinite_;  // (1) i32: 0, or the first iteration (1-based) with a non-finite loss/gradient
  std::unique_ptr<PhaseTimer> phase_timer_;  // the current run()'s
  // The job's communicator when it times its own stream (NCCL): comm_busy comes from it; null on CPU
  // (comm_busy is then the host time spent in MPI calls and waits).
  DeviceCommunicator* device_comm_ = nullptr;
};

}  // namespace cnnscale
