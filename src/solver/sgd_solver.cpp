// SgdSolver implementation: the update of the f32 masters on the net's backend, no host
// synchronisation: one launch over the flat buffers (Backend::sgd_update_segments), or one per
// parameter where the parameters are not all in one flat buffer.
#include "solver/sgd_solver.hpp"

#include <algorithm>
#include <climits>

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
  Backend& backend = net_.backend();
  const Tensor& flat = net_.flat_params();
  bool in_flat = flat.defined() && flat.numel() <= INT32_MAX;
  for (const auto& np : params_) in_flat &= np.param->master.storage() == flat.storage();
  if (!in_flat) {
    for (const auto& np : params_) history_.push_back(backend.alloc(np.param->master.shape()));
    return;
  }
  // One history buffer with the masters' offsets, and the segment table of the one-launch update.
  flat_history_ = backend.alloc(flat.shape());
  std::vector<int32_t> ranges;
  std::vector<float> mults;
  for (const auto& np : params_) {
    const Param& p = *np.param;
    const auto begin = static_cast<int64_t>((p.master.offset_bytes() - flat.offset_bytes()) / sizeof(float));
    history_.push_back(flat_history_.view(begin, p.master.shape()));
    if (p.spec.lr_mult == 0.0f) continue;  // frozen: its history stays zero, so no update is exact
    ranges.push_back(static_cast<int32_t>(begin));
    ranges.push_back(static_cast<int32_t>(begin + p.master.numel()));
    mults.push_back(p.spec.lr_mult);
    mults.push_back(p.spec.decay_mult);
  }
  // The backend wants ascending segments; the net lays parameters out last layer first.
  std::vector<size_t> order(ranges.size() / 2);
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[2 * a] < ranges[2 * b]; });
  std::vector<int32_t> sorted_ranges;
  std::vector<float> sorted_mults;
  for (size_t k : order) {
    sorted_ranges.insert(sorted_ranges.end(), {ranges[2 * k], ranges[2 * k + 1]});
    sorted_mults.insert(sorted_mults.end(), {mults[2 * k], mults[2 * k + 1]});
  }
  if (sorted_ranges.empty()) return;
  segment_ranges_ = backend.alloc(Shape{static_cast<int64_t>(sorted_ranges.size())}, DType::I32);
  segment_mults_ = backend.alloc(Shape{static_cast<int64_t>(sorted_mults.size())});
  backend.upload(sorted_ranges.data(), segment_ranges_);
  backend.upload(sorted_mults.data(), segment_mults_);
  backend.synchronize();  // the host vectors go out of scope
}

void SgdSolver::step(int64_t iteration) {
  const double rate = schedule_.lr(iteration);
  Backend& backend = net_.backend();
  if (flat_history_.defined()) {
    if (segment_ranges_.defined())
      backend.sgd_update_segments(net_.flat_params(), net_.flat_grads(), flat_history_, segment_ranges_,
                                  segment_mults_, static_cast<float>(rate), static_cast<float>(config_.momentum),
                                  static_cast<float>(config_.weight_decay));
    return;
  }
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
