// One run's results as plain data, independent of how they were measured (GPU events, host clocks,
// NVML, RAPL): what results_writer stores in run.h5 / summary.json / CSV and read_run_results
// returns. Missing numbers are NaN, unknown strings are std::nullopt; summary figures in run_summary.hpp.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/step_phase.hpp"
#include "io/provenance.hpp"
#include "io/run_summary.hpp"

namespace cnnscale {

inline constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// The summary's time_<phase>_s figure of each phase, in TimelinePhase order.
inline constexpr std::array<NumberFigure RunSummary::*, kTimelinePhaseNames.size()> kPhaseTimeFigures = {
    &RunSummary::time_data_s,      &RunSummary::time_h2d_s,       &RunSummary::time_forward_s,
    &RunSummary::time_backward_s,  &RunSummary::time_allreduce_s, &RunSummary::time_comm_busy_s,
    &RunSummary::time_update_s,    &RunSummary::time_total_s};

struct GpuInfo {
  int64_t rank = 0;  // the MPI rank that drives this GPU
  std::optional<std::string> host, name, uuid, driver;
  double power_limit_w = kMissing;
  // What sets the GPU's speed in a mix of unequal GPUs; 0, NaN and nullopt: unknown (older files).
  int64_t sm_count = 0;
  int64_t memory_bytes = 0;
  double peak_sm_clock_mhz = kMissing;
  std::optional<std::string> compute_capability;
  bool operator==(const GpuInfo&) const = default;
};

struct SystemInfo {
  std::vector<std::string> hosts;
  std::vector<GpuInfo> gpus;  // one per rank that has a GPU; empty on CPU runs
  std::optional<std::string> cuda_version, cudnn_version, nccl_version, mpi_version;
  // Where NCCL exchanged gradients: rank 0's NCCL_* environment after the communicator's set-up
  // (cnnscale's own NCCL_ALGO included), "NAME=value" separated by spaces, sorted; "" when none
  // is set. Null where NCCL was not used (one rank, CPU ranks) and in files from before it.
  std::optional<std::string> nccl_env;
  // The engine cache file (CNNSCALE_ENGINE_CACHE) the GPU backend took measured kernel choices from
  // instead of searching (convolution algorithms, fused and int8 engines); null when none was set,
  // on CPU runs and in files from before it was recorded.
  std::optional<std::string> engine_cache;
};

// Seconds per (iteration, rank, phase), row-major; iterations are recorded in order, warm-up included.
class Timeline {
 public:
  Timeline() = default;
  explicit Timeline(int64_t ranks) : ranks_(ranks) {}

  int64_t ranks() const { return ranks_; }
  int64_t iterations() const { return static_cast<int64_t>(iteration_.size()); }
  // Appends one iteration with every phase of every rank missing (NaN); returns its row index.
  int64_t add_iteration(int64_t iteration, bool warmup) {
    iteration_.push_back(iteration);
    warmup_.push_back(warmup ? 1 : 0);
    seconds_.resize(seconds_.size() + static_cast<size_t>(ranks_ * kTimelinePhaseCount), kMissing);
    return iterations() - 1;
  }
  double& at(int64_t row, int64_t rank, TimelinePhase p) { return seconds_[index(row, rank, p)]; }
  double at(int64_t row, int64_t rank, TimelinePhase p) const { return seconds_[index(row, rank, p)]; }

  const std::vector<int64_t>& iteration() const { return iteration_; }
  const std::vector<uint8_t>& warmup() const { return warmup_; }  // 1: warm-up, excluded from summaries
  const std::vector<double>& seconds() const { return seconds_; }

  // Whole-array replacement, for the reader; sizes must agree (checked by the caller).
  void assign(int64_t ranks, std::vector<int64_t> iteration, std::vector<uint8_t> warmup, std::vector<double> seconds) {
    ranks_ = ranks;
    iteration_ = std::move(iteration);
    warmup_ = std::move(warmup);
    seconds_ = std::move(seconds);
  }

 private:
  size_t index(int64_t row, int64_t rank, TimelinePhase p) const {
    return static_cast<size_t>((row * ranks_ + rank) * kTimelinePhaseCount + static_cast<int64_t>(p));
  }
  int64_t ranks_ = 0;
  std::vector<int64_t> iteration_;
  std::vector<uint8_t> warmup_;
  std::vector<double> seconds_;
};

// One GPU's power samples, columnar; every column has the same length, missing values are NaN.
struct PowerSeries {
  int64_t rank = 0;
  std::optional<std::string> uuid;
  std::vector<double> t_s;          // seconds since the run's time origin
  std::vector<double> power_w;      // instant power
  std::vector<double> avg_power_w;  // NVML's averaged power
  std::vector<double> energy_mj;    // total-energy counter
  std::vector<double> sm_clock_mhz;
  std::vector<double> temperature_c;
};

struct EpochRecord {
  int64_t epoch = 0;
  int64_t iteration = 0;  // iterations completed at the end of this epoch
  double loss = kMissing;
  double top1 = kMissing;  // fractions in [0, 1]
  double top5 = kMissing;
  double lr = kMissing;
  // Seconds of training to the end of this epoch: wall time since this process began training, less
  // evaluations and checkpoints (NaN in files written before it was recorded). A resumed run counts
  // from its resume.
  double seconds = kMissing;
};

// "complete": the run reached its end. "interrupted": stopped early by a signal (SIGTERM, SIGUSR1,
// SIGINT) at a step boundary after writing a checkpoint; its figures cover the steps that ran and
// `--resume auto` continues it (the resumed run's results then replace this folder).
inline constexpr std::string_view kRunComplete = "complete";
inline constexpr std::string_view kRunInterrupted = "interrupted";

// How the global batch was divided among ranks over the run (parallel/split_policy.hpp): the policy,
// every split in force with the iteration it took effect at (the first at the run's first iteration;
// `auto`, `energy` and `edp` add one per online refinement), and for model-based policies the start-up probe's
// measurements and the per-rank models fitted to them.
struct SplitChange {
  int64_t iteration = 0;        // first iteration run with these shares
  std::vector<int64_t> shares;  // samples per rank, in rank order
  bool operator==(const SplitChange&) const = default;
};
struct ProbePoint {  // one rank's forward+backward at one local batch
  int64_t rank = 0, batch = 0;
  double seconds = kMissing;  // per step
  double joules = kMissing;   // per step; NaN without an energy reading
  bool operator==(const ProbePoint&) const = default;
};
struct RankModel {  // step seconds = a + b n, step joules = c + d n, at n samples; waiting costs wait_watts
  int64_t rank = 0;
  double seconds_fixed = kMissing, seconds_per_sample = kMissing;
  double joules_fixed = kMissing, joules_per_sample = kMissing;
  double wait_watts = kMissing;
  bool operator==(const RankModel&) const = default;
};
struct SplitRecord {
  std::string policy = "even";
  // Steps between the online refinements of the shares (auto, energy, edp); 0: the start-up shares
  // were kept (every other policy, or --rebalance-every 0); -1: not recorded (files written before
  // energy and edp refined: their auto refined, their energy and edp did not).
  int64_t refine_every = -1;
  std::vector<SplitChange> changes;
  std::vector<ProbePoint> probe;
  std::vector<RankModel> models;
  // Whole steps (forward, backward with the exchange, update) the probe timed on every rank
  // together at the even split, one point per rank, and the exchange's cost per step fitted from
  // them (parallel/split_policy.hpp ExchangeCost; NaN where not measured: one rank, or files
  // written before the exchange was probed).
  std::vector<ProbePoint> steps;
  double exchange_seconds = kMissing, exchange_joules = kMissing;
  // How the online refinement read each interval's measured compute (parallel/split_policy.hpp
  // kRefineModel: "step_ratio", the rank's whole probed step scaled by measured / expected); empty
  // where nothing refined (refine_every 0) or in files written before it was recorded, whose
  // refinement (refine_every > 0, or -1 for auto) re-estimated the time per sample alone.
  std::string refine_model;
  // Equal when every member is, the exchange's NaN (not measured) counting as equal to NaN, so that
  // records without an exchange compare equal (the NaN inside a probe point or a model does not:
  // compare those one by one).
  bool operator==(const SplitRecord& o) const {
    const auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
    return policy == o.policy && refine_every == o.refine_every && refine_model == o.refine_model &&
           changes == o.changes && probe == o.probe && models == o.models && steps == o.steps &&
           same(exchange_seconds, o.exchange_seconds) && same(exchange_joules, o.exchange_joules);
  }
};

// The training loss and learning rate at every display step (--display), columnar: what the
// progress lines print, for a training curve. A resumed run's curve continues the one its
// interrupted run recorded up to the resume point (start_iteration: the first point's run began
// there, 0 for a run from scratch; -1 in files written before the curve was recorded).
struct TrainingCurve {
  int64_t start_iteration = -1;
  std::vector<int64_t> iteration;    // iterations completed at the display step
  std::vector<double> loss;          // mean training loss since the previous display step (the job's)
  std::vector<double> lr;            // learning rate of the display step's iteration
  std::vector<double> samples_per_s;  // rank 0's host clock over the same iterations
  bool operator==(const TrainingCurve&) const = default;
};

struct RunResults {
  std::string experiment;
  std::string run_id;
  std::string status = std::string(kRunComplete);
  std::string config_text;  // the resolved YAML/JSON of the run
  SystemInfo system;
  Timeline timeline;
  std::vector<PowerSeries> power;
  std::vector<EpochRecord> epochs;
  RunSummary summary;
  std::map<std::string, std::string> methods;  // figure name -> how it was obtained
  // The same kind of figures for each rank alone (index = rank): its GPU's energy, its own time.
  std::vector<RankSummary> rank_summary;
  SplitRecord split;  // empty `changes` in files written before splits were recorded
  // Where the run came from; nullopt in files written before it was recorded.
  std::optional<Provenance> provenance;
  TrainingCurve curve;
};

}  // namespace cnnscale
