// SgdSolver implementation: per-parameter update of the f32 masters on the net's backend, no host
// synchronisation.
#include "solver/sgd_solver.hpp"

namespace cnnscale {

std::vector<NamedParam> named_params(const Net& net) {
  std::vector<NamedParam> out;
  for (Layer* layer : net.layers())
    for (Param& p : layer->params()) out.push_back({layer->name() + "/" + p.spec.name, &p});
  return out;
}

SgdSolver::SgdSolver(Net& net, const SolverConfig& config, int64_t iterations_per_epoch, int64_t total_iterations)
    : net_(net),
      config_(config),
      schedule_(config, iterations_per_epoch, total_iterations),
      params_(named_params(net)) {
  for (const auto& np : params_) history_.push_back(net_.backend().alloc(np.param->master.shape()));
}

void SgdSolver::step(int64_t iteration) {
  const double rate = schedule_.lr(iteration);
  Backend& backend = net_.backend();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = *params_[i].param;
    // lr_mult 0 freezes a parameter: its history stays zero, so skipping the update is exact.
    if (p.spec.lr_mult == 0.0f) continue;
    backend.sgd_update(p.master, p.master_diff, history_[i], static_cast<float>(rate * p.spec.lr_mult),
                       static_cast<float>(config_.momentum),
                       static_cast<float>(config_.weight_decay * p.spec.decay_mult));
  }
}

}  // namespace cnnscale
