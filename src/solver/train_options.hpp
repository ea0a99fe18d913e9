// The settings a Trainer is handed, each kind in a struct of its own: TrainOptions (the user's
// settings), TrainJob (the job's ranks and the run's identity), TrainMeasurement (how run() is
// measured) and TrainFaults (the tests' fault injection).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/precision.hpp"
#include "data/loader.hpp"
#include "io/measure_mode.hpp"
#include "measure/energy_monitor.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale {

struct TrainOptions {
  int64_t batch = 64;      // the global batch, unless TrainJob::parallel.rank_batches split it (then their sum)
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
  // slow ranks, so from an even start it underrates the fast ranks and settles short of balance
  // (the probe's start ran 15% faster on one mix of H200 partitions:
  // docs/measurements/2026-11-26-training-step-choices.md). The probe times forward+backward alone.
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
  // each of its kernel launches (3 copies made a ResNet-34 step on one H200 3% longer than 1 copy:
  // docs/measurements/2026-11-26-scaling-four-gpus.md, "Where weak scaling loses"). The
  // host's wait between steps costs less than that.
  int graph_copies = 1;
  static constexpr int kMaxGraphCopies = 16;  // each copy is a whole instantiated step graph
};

// What the job hands the trainer: its ranks and how they exchange gradients (a null communicator:
// a single process), and the run's identity, stored in checkpoints and compared on resume.
struct TrainJob {
  DataParallel parallel;     // default: a single process
  std::string run_config;    // JSON of the run's options, stored in checkpoints
  std::string network_yaml;  // resolved network, stored in checkpoints
  // The precision the job's backend was made for (Job::precision), where the caller knows it: the
  // Trainer refuses a TrainOptions::precision other than it (one precision for backend and run).
  std::optional<Precision> backend_precision;
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

// ConfigError for a choice the device cannot take (Host on the CPU, where decoding is on the host
// anyway); `train` asks before any work, the trainer again.
void check_input_decode(TrainOptions::InputDecode decode, bool cpu);

}  // namespace cnnscale
