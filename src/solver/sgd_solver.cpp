// SgdSolver implementation: the update of the f32 masters on the net's backend, no host
// synchronisation: one launch over the flat buffers (Backend::sgd_update_segments), or one per
// parameter where the parameters are not all in one flat buffer.
#include "solver/sgd_solver.hpp"

#include <algorithm>
#include <array>
#include <climits>

namespace cnnscale {

std::vector<NamedParam> named_params(const Net& net) {
  std::vector<NamedParam> out;
  for (Layer* layer : net.layers())
    for (Param& p : layer->params()) out.push_back({layer->name() + "/" + p.spec.name, &p});
  return out;
}

namespace {

// Whether every parameter's master lies in the net's one flat buffer, which the one launch indexes with i32.
bool in_flat_buffer(const Net& net, const std::vector<NamedParam>& params) {
  const Tensor& flat = net.flat_params();
  bool in_flat = flat.defined() && flat.numel() <= INT32_MAX;
  for (const auto& np : params) in_flat &= np.param->master.storage() == flat.storage();
  return in_flat;
}

// Whether the one launch also writes the compute copies: every mirrored parameter lies in the one
// mirror buffer (a frozen one is converted by the first forward and never changes after).
bool writes_mirrors(const Net& net, const std::vector<NamedParam>& params) {
  const Tensor& mirror = net.flat_mirrors();
  bool write_mirrors = mirror.defined() && mirror.numel() <= INT32_MAX;
  for (const auto& np : params)
    if (np.param->spec.mirrored()) write_mirrors &= np.param->data.storage() == mirror.storage();
  return write_mirrors;
}

}  // namespace

SgdSolver::Abilities SgdSolver::abilities(const Net& net) {
  const std::vector<NamedParam> params = named_params(net);
  Abilities a;
  a.one_launch = in_flat_buffer(net, params);
  // The constructor's mirrors_: the one launch writes the copies and updates some parameter.
  bool learned = false;
  for (const auto& np : params) learned |= np.param->spec.lr_mult != 0.0f;
  a.reads_mirror_grads = a.one_launch && learned && writes_mirrors(net, params) &&
                         net.backend().sgd_reads_mirror_grads() && net.flat_mirror_grads().defined();
  return a;
}

SgdSolver::SgdSolver(Net& net, const SolverConfig& config, int64_t iterations_per_epoch, int64_t total_iterations)
    : net_(net),
      config_(config),
      schedule_(config, iterations_per_epoch, total_iterations),
      params_(named_params(net)) {
  Backend& backend = net_.backend();
  const bool reads_mirror_grads = net_.gradient_plan().update_reads_mirror_grads;
  CNNSCALE_CHECK(!reads_mirror_grads || abilities(net_).reads_mirror_grads,
                 "this update cannot read the mirrored gradients");
  const Tensor& flat = net_.flat_params();
  if (!in_flat_buffer(net_, params_)) {
    for (const auto& np : params_) history_.push_back(backend.alloc(np.param->master.shape()));
    return;
  }
  // One history buffer with the masters' offsets, and the segment table of the one-launch update.
  flat_history_ = backend.alloc(flat.shape());
  const Tensor& mirror = net_.flat_mirrors();
  const bool write_mirrors = writes_mirrors(net_, params_);
  for (const auto& np : params_) {
    const Param& p = *np.param;
    const auto begin = static_cast<int64_t>((p.master.offset_bytes() - flat.offset_bytes()) / sizeof(float));
    history_.push_back(flat_history_.view(begin, p.master.shape()));
    if (p.spec.lr_mult == 0.0f) continue;  // frozen: its history stays zero, so no update is exact
    std::array<int32_t, 4> entry{-1, 1, 1, 0};
    // Copies at the masters' offsets: an unmirrored parameter's slot, whence the update reads its
    // gradient where it reads the mirrored ones' (the copy it then writes there is never read).
    if (write_mirrors && !p.spec.mirrored() && net_.copies_at_master_offsets())
      entry = {static_cast<int32_t>(begin), 1, 1, 0};
    if (write_mirrors && p.spec.mirrored()) {
      const Shape& s = p.master.shape();
      // Filters kept channels-last are the one reordering convert() makes between master and copy.
      const bool reordered = p.data.layout() != p.master.layout();
      CNNSCALE_CHECK(!reordered || s.rank() == 4, "parameter {} is reordered but not 4-d: {}", np.name,
                     s.to_string());
      entry = {static_cast<int32_t>((p.data.offset_bytes() - mirror.offset_bytes()) / dtype_size(mirror.dtype())),
               reordered ? static_cast<int32_t>(s.c()) : 1, reordered ? static_cast<int32_t>(s.h() * s.w()) : 1,
               reordered ? 1 : 0};
    }
    segments_.push_back({static_cast<int32_t>(begin), static_cast<int32_t>(begin + p.master.numel()),
                         p.spec.lr_mult, p.spec.decay_mult, entry});
  }
  if (segments_.empty()) return;
  // The backend wants ascending segments; the net lays parameters out last layer first.
  std::sort(segments_.begin(), segments_.end(), [](const Segment& a, const Segment& b) { return a.begin < b.begin; });
  table_ = upload_table(0, segments_.size(), 0, write_mirrors);
  if (write_mirrors) mirrors_ = {mirror, table_.map, reads_mirror_grads ? net_.flat_mirror_grads() : Tensor()};
}

SgdSolver::Table SgdSolver::upload_table(size_t first, size_t last, int64_t base, bool with_map) const {
  std::vector<int32_t> ranges, map;
  std::vector<float> mults;
  for (size_t k = first; k < last; ++k) {
    const Segment& g = segments_[k];
    ranges.insert(ranges.end(), {static_cast<int32_t>(g.begin - base), static_cast<int32_t>(g.end - base)});
    mults.insert(mults.end(), {g.lr_mult, g.decay_mult});
    map.insert(map.end(), g.mirror.begin(), g.mirror.end());
  }
  Backend& backend = net_.backend();
  Table t{backend.alloc(Shape{static_cast<int64_t>(ranges.size())}, DType::I32),
          backend.alloc(Shape{static_cast<int64_t>(mults.size())}), Tensor()};
  backend.upload(ranges.data(), t.ranges);
  backend.upload(mults.data(), t.mults);
  if (with_map) {
    t.map = backend.alloc(Shape{static_cast<int64_t>(map.size())}, DType::I32);
    backend.upload(map.data(), t.map);
  }
  backend.synchronize();  // the host vectors go out of scope
  return t;
}

void SgdSolver::plan_parts(const std::vector<int64_t>& ends) {
  CNNSCALE_CHECK(capturable(), "the update in parts needs the one-launch update over the flat buffers");
  CNNSCALE_CHECK(std::is_sorted(ends.begin(), ends.end()) && !ends.empty() && ends.back() == net_.flat_params().numel(),
                 "update parts: {} ends, not ascending to the flat buffer's {} elements", ends.size(),
                 net_.flat_params().numel());
  parts_.clear();
  size_t next = 0;  // first segment not in a part yet
  for (int64_t end : ends) {
    Part part;
    const size_t first = next;
    while (next < segments_.size() && segments_[next].end <= end) ++next;
    if (next > first) {
      part.begin = segments_[first].begin;
      part.end = segments_[next - 1].end;
      part.table = upload_table(first, next, part.begin, mirrors_.defined());
    }
    parts_.push_back(std::move(part));  // empty where no parameter ends in this bucket
  }
}

void SgdSolver::apply_part(size_t k, const GradCheck& check) {
  CNNSCALE_CHECK(k < parts_.size(), "update part {} of {}", k, parts_.size());
  CNNSCALE_CHECK(rate_.defined(), "SgdSolver::apply_part before set_rate");
  const Part& part = parts_[k];
  if (!part.table.ranges.defined()) return;
  const Shape n{part.end - part.begin};
  SgdMirrors mirrors;
  if (mirrors_.defined()) mirrors = {mirrors_.mirror, part.table.map, mirrors_.grads};
  net_.backend().sgd_update_segments_at(net_.flat_params().view(part.begin, n), net_.flat_grads().view(part.begin, n),
                                        flat_history_.view(part.begin, n), part.table.ranges, part.table.mults, rate_,
                                        static_cast<float>(config_.momentum), static_cast<float>(config_.weight_decay),
                                        Tensor(), mirrors, check);
}

void SgdSolver::parts_applied() {
  if (mirrors_.defined()) net_.mirrors_written_by_update();
}

void SgdSolver::set_rate(int64_t iteration) {
  host_rate_ = schedule_.lr(iteration);
  if (flat_history_.defined()) {
    if (!rate_.defined()) rate_ = net_.backend().alloc(Shape{1});
    net_.backend().fill(rate_, static_cast<float>(host_rate_));
  }
}

void SgdSolver::apply(const Tensor& skip, const GradCheck& check) {
  Backend& backend = net_.backend();
  CNNSCALE_CHECK(!(skip.defined() && check.defined()), "SgdSolver::apply: a gradient check with a skip");
  if (flat_history_.defined()) {
    CNNSCALE_CHECK(rate_.defined(), "SgdSolver::apply before set_rate");
    if (table_.ranges.defined()) {
      backend.sgd_update_segments_at(net_.flat_params(), net_.flat_grads(), flat_history_, table_.ranges,
                                     table_.mults, rate_, static_cast<float>(config_.momentum),
                                     static_cast<float>(config_.weight_decay), skip, mirrors_, check);
      if (mirrors_.defined()) net_.mirrors_written_by_update();
    } else if (check.defined()) {  // every parameter frozen: nothing to update, still a step to check
      backend.flag_nonfinite_at(net_.flat_grads(), check.tag, check.flag);
    }
    return;
  }
  if (check.defined())
    for (const auto& np : params_) backend.flag_nonfinite_at(np.param->master_diff, check.tag, check.flag);
  if (skip.defined()) {
    int32_t skipped = 0;
    backend.download(skip, &skipped);
    if (skipped != 0) return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = *params_[i].param;
    // lr_mult 0 freezes a parameter: its history stays zero, so skipping the update is exact.
    if (p.spec.lr_mult == 0.0f) continue;
    backend.sgd_update(p.master, p.master_diff, history_[i], static_cast<float>(host_rate_ * p.spec.lr_mult),
                       static_cast<float>(config_.momentum),
                       static_cast<float>(config_.weight_decay * p.spec.decay_mult));
  }
}

}  // namespace cnnscale
