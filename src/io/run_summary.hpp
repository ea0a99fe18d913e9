// A run's summary figures as named members: the job's (RunSummary) and each rank's (RankSummary).
// summary_schema.hpp lists every member with its name, kind and unit; that one table writes them to
// summary.json, run.h5 and the CSV and reads them back, so a new figure is one member and one row.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace cnnscale {

// A step that waits for its batch more than this share of its time is input-bound.
inline constexpr double kInputBoundShare = 0.05;

// One figure: absent (not written at all, e.g. threads_per_rank on GPU runs), null (written as
// null: unknown, e.g. energy without NVML) or a value. A NaN number is a value: summary.json writes
// it as null like any non-finite number, but the CSV says nan and run.h5 keeps the NaN.
template <class T>
class Figure {
 public:
  using value_type = T;

  Figure() = default;
  Figure(T v) : value_(std::move(v)), state_(State::Value) {}  // NOLINT(google-explicit-constructor)

  static Figure null() {
    Figure f;
    f.state_ = State::Null;
    return f;
  }

  bool written() const { return state_ != State::Absent; }
  bool is_null() const { return state_ == State::Null; }
  bool has_value() const { return state_ == State::Value; }
  // The value; std::logic_error naming no figure (the caller knows which) when null or absent.
  const T& value() const {
    if (state_ != State::Value) throw std::logic_error(state_ == State::Null ? "figure is null" : "figure is absent");
    return value_;
  }
  T value_or(T fallback) const { return has_value() ? value_ : std::move(fallback); }

  bool operator==(const Figure& o) const {
    if (state_ != o.state_) return false;
    if (state_ != State::Value) return true;
    if constexpr (std::is_floating_point_v<T>) {
      if (value_ != value_ && o.value_ != o.value_) return true;  // both NaN: the same figure read back
    }
    return value_ == o.value_;
  }

 private:
  enum class State { Absent, Null, Value };
  T value_{};
  State state_ = State::Absent;
};

using NumberFigure = Figure<double>;  // counts too: the schema's kind decides how they are written
using TextFigure = Figure<std::string>;

// The steady window's figures, for the job (slowest rank's time, every device's energy) and for
// each rank alone (its own time and energy); measure::compute_metrics derives them.
struct WindowFigures {
  NumberFigure seconds_per_batch;       // s
  NumberFigure samples_per_s;           // samples/s
  NumberFigure joules_per_batch;        // J
  NumberFigure watts;                   // W
  NumberFigure joules_per_sample;       // J
  NumberFigure gflops;                  // GFLOP/s
  NumberFigure gflops_per_watt;         // GFLOP/s/W
  NumberFigure edp_batch_js;            // J s
  NumberFigure whole_training_seconds;  // s
  NumberFigure whole_training_joules;   // J
  NumberFigure edp_training_js;         // J s
  bool operator==(const WindowFigures&) const = default;
};

// The job's figures (`/summary`, summary.json's "summary", the CSV row); units in summary_schema.cpp.
struct RunSummary : WindowFigures {
  TextFigure net, data, device, precision, measure, allreduce_algo, gpu_names;
  TextFigure allreduce_dtype;  // the gradient exchange's dtype: fp32, bf16 or fp16 (--allreduce-dtype)
  TextFigure allreduce_tuning;  // NCCL's CTA policy and stream priority: "default" or what differs
  NumberFigure world_size, global_batch, seed, iterations, iterations_per_epoch, allreduce_overlap;
  // The solver's settings as given (--lr, --momentum, ...: solver/solver_config.hpp), one typed
  // figure each, so that runs group and compare by them; every one is recorded whatever the policy
  // (lr_policy says which of gamma, step, milestones and power its schedule reads). lr_milestones:
  // the multistep epochs, comma-joined ("" when none); lr_scaled: the base lr the schedule started
  // from, lr x global batch / lr_base_batch under lr_scaling linear, lr otherwise.
  NumberFigure lr, lr_scaled, momentum, weight_decay, lr_gamma, lr_step_epochs, lr_power;
  NumberFigure warmup_epochs, warmup_iterations, warmup_start_factor, lr_base_batch;
  TextFigure lr_policy, lr_milestones, lr_scaling;
  // 1 in a one-rank job kept on the data-parallel path (--one-rank-exchange); absent otherwise. It
  // measured that path, not the GPU alone: never a 1-GPU baseline (report).
  NumberFigure one_rank_exchange;
  // Mixed precision: fp16's steps skipped for an overflowed gradient and its loss scale at the end
  // (0 and 1 without loss scaling); device memory, the most any rank's backend held at once (bytes).
  NumberFigure skipped_steps, final_grad_scale, peak_memory_bytes;
  // The training step replayed from a CUDA graph: "on", or "off: <why not>" (rank 0's, as every
  // rank's reason is the same), and how many steps rank 0 replayed.
  TextFigure cuda_graph;
  NumberFigure graph_replays;
  // --mfu: rank 0's device's square-matmul peak in the run's compute precision (TFLOP/s) and the
  // job's gflops over the ranks' combined peak (a fraction).
  NumberFigure matmul_peak_tflops, mfu;
  NumberFigure threads_per_rank;  // CPU runs only
  NumberFigure window_iterations, window_extension_iterations, window_seconds;
  NumberFigure whole_epochs, whole_iterations;
  NumberFigure cpu_package_joules_per_batch, cpu_dram_joules_per_batch;
  // Slowest rank's mean seconds per phase (run_results.hpp's TimelinePhase order).
  NumberFigure time_data_s, time_h2d_s, time_forward_s, time_backward_s, time_allreduce_s, time_comm_busy_s,
      time_update_s, time_total_s;
  // The share of the step spent waiting for the batch (time_data_s / time_total_s), and 1 when it
  // passes kInputBoundShare: the run measures its input pipeline as much as its network.
  NumberFigure input_wait_share, input_bound;
  // --measure phases only: the phase-isolated loops, mean and sample std over repeats.
  NumberFigure loop_forward_s, loop_forward_s_std, loop_backward_s, loop_backward_s_std, loop_update_allreduce_s,
      loop_update_allreduce_s_std, loop_pooled_repeats;
  NumberFigure energy_forward_j, energy_forward_j_std, energy_backward_j, energy_backward_j_std,
      energy_update_allreduce_j, energy_update_allreduce_j_std, energy_full_step_j, energy_full_step_j_std;
  NumberFigure final_loss, test_top1, test_top5, test_loss;
  // Unequal ranks (see parallel/split_policy.hpp): the split policy and the shares it ended with
  // ("40+24"), how often `auto` changed them, the ranks' speeds ("132+66 SMs", "slowdown 1+3";
  // absent when every rank runs its whole device), and the window's balance figures: imbalance
  // ((max - mean) / max of the ranks' compute seconds per batch), the joules ranks spend waiting for
  // the slowest one, the ideal combined throughput (sum over ranks of local batch / compute seconds)
  // and the job's samples/s as a fraction of it. predicted_*: what the per-rank models said of the
  // chosen shares (model-based policies only).
  TextFigure split, split_shares, mix;
  NumberFigure split_changes, imbalance, waiting_joules_per_batch, ideal_samples_per_s, efficiency;
  NumberFigure predicted_seconds_per_batch, predicted_joules_per_sample;
  std::map<std::string, std::string> tags;  // --tag KEY=VALUE, written as `tag.KEY`
  bool operator==(const RunSummary&) const = default;
};

// One rank's own figures (`/summary/ranks/<r>`, summary.json's "ranks").
struct RankSummary : WindowFigures {
  NumberFigure rank;
  TextFigure host;
  TextFigure gpu_uuid;  // GPU runs only
  NumberFigure local_batch;
  NumberFigure gpu_sampled_joules_per_batch, cpu_package_joules_per_batch;
  // Per batch in the window: compute (the step less its exposed gradient exchange), the exposed
  // exchange, the part of it spent waiting for slower ranks (the slowest rank's compute minus this
  // rank's, per iteration), the power charged for waiting and the joules that makes. sms: the SMs
  // granted to a GPU partition (--sm-counts); slowdown: a CPU rank's emulated straggler factor.
  NumberFigure compute_s, exchange_wait_s, imbalance_wait_s, wait_watts, waiting_joules_per_batch;
  NumberFigure sms, slowdown;
  NumberFigure peak_memory_bytes;  // the most device memory its backend held at once, bytes
  TextFigure cuda_graph;           // its own: "on" or "off: <why not>"
  NumberFigure graph_replays;      // its steps replayed from the graph
  bool operator==(const RankSummary&) const = default;
};

}  // namespace cnnscale
