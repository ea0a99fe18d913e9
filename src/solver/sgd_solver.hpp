// SgdSolver: Caffe's SGD with momentum and L2 weight decay over every learnable parameter of a Net,
// with lr x lr_mult and weight_decay x decay_mult per parameter, all in one multi-tensor update over
// the net's flat buffers. Owns the momentum history (checkpointed with the weights).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "net/net.hpp"
#include "solver/lr_schedule.hpp"
#include "solver/solver_config.hpp"

namespace cnnscale {

// A parameter with its checkpoint name "<layer>/<param>" (e.g. "conv1/weight").
struct NamedParam {
  std::string name;
  Param* param = nullptr;
};

// Every learnable parameter of the net, in layer order.
std::vector<NamedParam> named_params(const Net& net);

class SgdSolver {
 public:
  // Reads the gradients as the net's gradient plan says (Net::gradient_plan: set before this):
  // with update_reads_mirror_grads, the mirrored parameters' where backward left them (the net's
  // compute-copy gradients), which needs abilities(net).reads_mirror_grads.
  SgdSolver(Net& net, const SolverConfig& config, int64_t iterations_per_epoch, int64_t total_iterations);

  // What the update of `net` can do, known before it is made (for the gradient plan).
  struct Abilities {
    bool one_launch = false;  // one launch over the flat buffers (capturable(), plan_parts)
    // The one launch can read the mirrored parameters' gradients where backward left them: it also
    // writes the copies, on a backend that reads them (Backend::sgd_reads_mirror_grads).
    bool reads_mirror_grads = false;
  };
  static Abilities abilities(const Net& net);

  // Applies the gradients of `iteration` (0-based count of completed steps) to the weights.
  void step(int64_t iteration) {
    set_rate(iteration);
    apply();
  }
  // step() in two parts, for a step captured for replay: set_rate writes the iteration's learning
  // rate to device memory (before each replay); apply queues the update, which reads it there
  // (captured once). apply() alone is capturable only when the update is one launch (capturable()).
  // `skip` (i32 (1) in device memory, or undefined): non-zero there leaves every weight and history
  // as it is (a step skipped by fp16 loss scaling); the per-parameter updates read it on the host.
  // `check` (never with `skip`): flag non-finite gradients as the update reads them (GradCheck),
  // instead of a pass of its own over every gradient before it.
  void set_rate(int64_t iteration);
  void apply(const Tensor& skip = Tensor(), const GradCheck& check = GradCheck());
  bool capturable() const { return flat_history_.defined(); }
  double lr(int64_t iteration) const { return schedule_.lr(iteration); }

  // apply() in parts, for an exchange that hands over the gradients one bucket at a time
  // (GradientBuckets::set_on_reduced): `ends` are the buckets' ends in the flat buffer, ascending,
  // the last its size. Part k updates every parameter whose last element lies in bucket k, so each
  // is updated once, after its last piece is summed; together the parts do what apply() does, bit
  // for bit. Only where the update is one launch (capturable()), never with a skip (fp16's loss
  // scaling decides a skip from every gradient).
  void plan_parts(const std::vector<int64_t>& ends);
  size_t parts() const { return parts_.size(); }
  // Queues part k at the rate set_rate wrote, checking what it reads if `check` is defined.
  void apply_part(size_t k, const GradCheck& check = GradCheck());
  // After every part of a step is queued: tells the net the compute copies were written.
  void parts_applied();
  const SolverConfig& config() const { return config_; }
  const LrSchedule& schedule() const { return schedule_; }
  const std::vector<NamedParam>& params() const { return params_; }
  // Momentum history, parallel to params().
  const std::vector<Tensor>& history() const { return history_; }

 private:
  Net& net_;
  SolverConfig config_;
  LrSchedule schedule_;
  std::vector<NamedParam> params_;
  std::vector<Tensor> history_;  // views into flat_history_ when the update is one launch
  Tensor flat_history_;          // (P) same offsets as net.flat_params()
  struct Segment {
    int32_t begin, end;
    float lr_mult, decay_mult;
    std::array<int32_t, 4> mirror;  // SgdMirrors' map entry
  };
  std::vector<Segment> segments_;  // the table on the host, ascending
  // Backend::sgd_update_segments' table on the device: ranges, mults and (with `with_map`)
  // SgdMirrors' map of segments_[first, last), offsets relative to `base`.
  struct Table {
    Tensor ranges, mults, map;
  };
  Table upload_table(size_t first, size_t last, int64_t base, bool with_map) const;
  Table table_;  // every segment's, for apply()
  // plan_parts(): each part's table, its offsets relative to `begin` (the first element it updates).
  struct Part {
    int64_t begin = 0, end = 0;
    Table table;  // undefined where no parameter ends in the part's bucket
  };
  std::vector<Part> parts_;
  SgdMirrors mirrors_;                     // where the update also writes the compute copies
  Tensor rate_;                            // (1) f32: the learning rate of the step being applied
  double host_rate_ = 0;                   // the same, for the per-parameter updates
};

}  // namespace cnnscale
