// time_network (time_network.hpp).
#include "experiment/time_network.hpp"

#include <functional>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "infer/calibrate_run.hpp"
#include "net/fold.hpp"
#include "net/fuse.hpp"
#include "net/int8_spec.hpp"
#include "solver/sgd_solver.hpp"

namespace cnnscale {

void check_time_request(const TimeRequest& r) {
  if (!r.fold && !r.options.inference) throw_config("--no-fold applies to --inference timing");
  if (!r.calibration.empty() && !r.options.inference) throw_config("--calibration applies to --inference timing");
}

TimedNetwork time_network(const TimeRequest& r, Backend& backend) {
  return time_network(r, backend, r.options);
}

TimedNetwork time_network(const TimeRequest& r, Backend& backend, const LayerTimingOptions& given) {
  check_time_request(r);
  TimedNetwork out;
  const NetSpec* timed = &r.spec;
  std::optional<FoldedSpec> folded;
  if (r.options.inference && r.fold) {
    timed = &folded.emplace(fold_batch_norm(*timed)).spec;
    out.folded_batch_norms = folded->folded.size();
  }
  std::optional<FusedSpec> fused;
  if (r.fuse) {
    timed = &fused.emplace(fuse_epilogues(*timed)).spec;
    out.fused_epilogues = fused->fused.size();
  }
  std::optional<Int8Spec> int8;
  if (!r.calibration.empty()) {
    timed = &int8.emplace(with_int8_scales(*timed, infer::read_int8_input_scales(r.calibration),
                                           int8_activations_run(backend, compute_dtype(r.options.precision))))
                 .spec;
    out.int8_layers = int8->int8.size();
    out.int8_outputs = int8->outputs.size();
  }
  // The training step's own update (one segmented launch that also writes the compute copies and,
  // as in a one-process train step, reads the mirrored gradients where backward left them), at
  // learning rate 0 so the weights stay as they are.
  LayerTimingOptions options = given;
  std::unique_ptr<SgdSolver> solver;
  options.make_update = [&](Net& net) -> std::function<void()> {
    SolverConfig config;
    config.lr = 0.0;
    // fp16 trains with loss scaling, which keeps the widening pass (Trainer): so does its timing.
    GradientPlan plan;
    plan.update_reads_mirror_grads =
        !needs_loss_scaling(r.options.precision) && SgdSolver::abilities(net).reads_mirror_grads;
    net.set_gradient_plan(plan);
    solver = std::make_unique<SgdSolver>(net, config, /*iterations_per_epoch=*/1, /*total_iterations=*/1);
    solver->set_rate(0);
    return [&] { solver->apply(); };
  };
  out.result = time_layers(*timed, backend, options);
  return out;
}

}  // namespace cnnscale
