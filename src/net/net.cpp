// Net: a NetSpec allocated on a Backend. Activations and their diffs per blob, Caffe's Split
// semantics for blobs read by several layers, every parameter in one flat data buffer and one flat
// gradient buffer, forward and backward without host synchronisation.
// Mixed precision (compute dtype bf16/f16): activations and their gradients are 16-bit (losses and
// accuracies f32); the f32 flat buffers stay the masters, mirrored by 16-bit flat buffers (the
// mirrored parameters packed in the same order) that conv/fully-connected layers compute with.
// Each forward refreshes the 16-bit weights from the masters (one conversion per parameter) and
// widens the f32 input; each backward widens a layer's 16-bit gradients into the f32 flat gradient
// right after that layer, before the data-parallel exchange can see them, dividing out the fp16
// loss scale on the way.
// Where the backend wants channels-last (Backend::activation_layout_for: on a GPU, 16-bit and TF32),
// 4-d activations and convolution filters are NHWC (filters KRSC). The masters stay NCHW, so
// checkpoints, initialisation and the exchange are the same in every precision; channels-last f32
// filters get f32 mirrors, and the conversions between masters and compute copies permute them.
#include <cmath>
#include <utility>

#include "net/net_impl.hpp"

namespace cnnscale {

using net_detail::Blob;
using net_detail::NetLayer;

void Net::Impl::sum_extra_diffs(const Blob& blob) {
  for (const auto& d : blob.extra_diffs) backend.axpby(1.0f, d, 1.0f, blob.diff);
}

Net::Net(const NetSpec& spec, Backend& backend, int64_t batch, uint64_t seed, DType compute, NetUse use,
         bool copies_at_master_offsets)
    : impl_(std::make_unique<Impl>(backend)) {
  impl_->use = use;
  impl_->copies_at_master_offsets = copies_at_master_offsets;
  if (compute != DType::F32 && compute != DType::BF16 && compute != DType::F16)
    throw_config("compute dtype {} is not f32, bf16 or f16", dtype_name(compute));
  impl_->compute = compute;
  impl_->layout = backend.activation_layout_for(compute);
  impl_->seed = seed;
  impl_->build(spec.impl(), batch);
}

Net::~Net() = default;

Backend& Net::backend() const { return impl_->backend; }
int64_t Net::batch() const { return impl_->batch; }
NetUse Net::use() const { return impl_->use; }

void Net::reshape(int64_t batch) {
  if (batch <= 0) throw_config("batch size must be positive, got {}", batch);
  if (batch == impl_->batch) return;
  check_batch_fits(impl_->bounds, batch);  // as at build: refused by name, not a bad_alloc midway
  impl_->allocate_activations(batch);
  ++impl_->generation;
}

uint64_t Net::generation() const { return impl_->generation; }

void Net::freeze_weights(bool frozen) {
  impl_->weights_frozen = frozen;
  impl_->mirrors_current = false;  // the masters may have been written just before
}

const Tensor& Net::input() const { return impl_->blobs[0].data; }
const Tensor& Net::labels() const { return impl_->blobs[1].data; }

void Net::forward(Phase phase, uint64_t iteration, const std::function<void(size_t layer_index)>& after_layer,
                  const std::function<void()>& after_copies) {
  Impl& m = *impl_;
  if (m.use == NetUse::Inference && phase != Phase::Test)
    throw_runtime("this net was built for inference: it runs test-phase forwards only");
  LayerContext ctx = m.context(phase, iteration);
  // The masters may have changed since the last forward (an update, a checkpoint, a broadcast).
  // Each once, by parameter: channels-last filters are permuted (KCRS -> KRSC) on the way. Not
  // where the update that just ran wrote the copies itself.
  const bool from_update = std::exchange(m.mirrors_from_update, false);
  if (!from_update && !(m.weights_frozen && m.mirrors_current))
    for (const Param* p : m.mirrored_params) m.backend.convert(p->master, p->data);
  m.mirrors_current = true;
  if (m.input_compute.defined()) m.backend.convert(m.blobs[0].data, m.input_compute);
  if (after_copies) after_copies();
  for (size_t l = 0; l < m.layers.size(); ++l) {
    NetLayer& nl = m.layers[l];
    if (!runs_in(nl.spec.phase, phase)) continue;
    nl.layer->forward(ctx, nl.bottom_data, nl.top_data);
    if (after_layer) after_layer(l);
  }
  if (!m.combine_losses) return;
  m.backend.fill(m.loss_sum, 0.0f);
  for (int l : m.loss_layers) {
    const NetLayer& nl = m.layers[static_cast<size_t>(l)];
    if (runs_in(nl.spec.phase, phase)) m.backend.axpby(nl.spec.loss_weight, nl.top_data[0], 1.0f, m.loss_sum);
  }
}

void Net::backward(uint64_t iteration, const std::function<void(size_t layer_index)>& after_layer,
                   BackwardPass pass) {
  Impl& m = *impl_;
  if (m.use == NetUse::Inference) throw_runtime("this net was built for inference: it has no backward");
  LayerContext ctx = m.context(Phase::Train, iteration);
  // Unmirrored parameters (batch norm) computed their gradients from the scaled loss too.
  const bool scaled = m.grad_scale_on_device.defined() || m.grad_scale != 1.0;
  const bool reads_mirror_grads = m.plan.update_reads_mirror_grads;
  CNNSCALE_CHECK(!(scaled && reads_mirror_grads), "a gradient scale with the update reading the unscaled mirror gradients");
  const bool exchanged = pass == BackwardPass::Exchanged;
  const bool gathering = exchanged && m.gathering_layers > 0;
  // An exchange that sums the compute gradients in place rounds the unmirrored ones a bucket at a time.
  const bool round_unmirrored = reads_mirror_grads && m.copies_at_master_offsets && !(exchanged && m.plan.sum_compute_grads);
  for (size_t l = m.layers.size(); l-- > 0;) {
    NetLayer& nl = m.layers[l];
    if (nl.runs_backward) {
      for (int t : nl.tops) m.sum_extra_diffs(m.blobs[t]);
      ctx.gather_rows = gathering && m.gathers.at(l) ? m.gather_rows : 0;
      nl.layer->backward(ctx, nl.bottom_data, nl.top_data, nl.top_diff, nl.propagate, nl.bottom_diff);
      for (const Param& p : nl.layer->params()) {
        if ((p.spec.mirrored() && !reads_mirror_grads) || scaled)
          apply_grad_scale(p.diff, p.master_diff, /*inverse=*/true);
        // The update reads this one from its slot too (the exchange sums it there).
        if (!p.spec.mirrored() && round_unmirrored)
          m.backend.convert(p.master_diff, m.compute_grads.view(m.master_offset(p), p.master_diff.shape()));
      }
    }
    if (after_layer) after_layer(l);
  }
}

void Net::set_iteration_on_device(const Tensor* iteration) {
  CNNSCALE_CHECK(!iteration || (iteration->dtype() == DType::I32 && iteration->numel() == 1),
                 "the device iteration must be i32 (1)");
  impl_->iteration_on_device = iteration;
}

void Net::set_loss_scale(double scale) {
  if (!(scale > 0)) throw_config("loss scale must be > 0, got {}", scale);
  impl_->loss_scale = scale;
}
double Net::loss_scale() const {
  return impl_->loss_scale;
}
void Net::set_grad_scale(double scale) {
  if (!(scale > 0) || !std::isfinite(scale)) throw_config("gradient scale must be finite and > 0, got {}", scale);
  CNNSCALE_CHECK(!impl_->grad_scale_on_device.defined() || scale == 1.0, "the gradient scale is on the device");
  impl_->grad_scale = scale;
}
double Net::grad_scale() const { return impl_->grad_scale; }
void Net::set_grad_scale_on_device(const Tensor& scale) {
  Impl& m = *impl_;
  if (!scale.defined()) {
    m.grad_scale_on_device = Tensor();
    return;
  }
  CNNSCALE_CHECK(scale.dtype() == DType::F32 && scale.numel() == 2, "the device gradient scale must be f32 (2)");
  CNNSCALE_CHECK(m.grad_scale == 1.0, "a gradient scale on the host ({}) and one on the device", m.grad_scale);
  m.grad_scale_on_device = scale;
}
const Tensor& Net::grad_scale_on_device() const { return impl_->grad_scale_on_device; }
void Net::apply_grad_scale(const Tensor& src, const Tensor& dst, bool inverse) const {
  const Impl& m = *impl_;
  const Tensor& s = m.grad_scale_on_device;
  if (s.defined()) return m.backend.convert_scaled_at(src, dst, inverse ? s.view(1, Shape{1}) : s);
  m.backend.convert(src, dst, static_cast<float>(inverse ? 1.0 / m.grad_scale : m.grad_scale));
}
DType Net::compute_dtype() const { return impl_->compute; }
void Net::set_rank_exchange(RankExchange* ranks) {
  impl_->ranks = ranks;
}

void Net::set_gradient_plan(const GradientPlan& plan) {
  Impl& m = *impl_;
  CNNSCALE_CHECK(!m.planned, "the net's gradient plan is set once");
  plan.check();
  CNNSCALE_CHECK(!plan.sum_compute_grads || copies_at_master_offsets(),
                 "a plan summing the compute gradients in place for a net without copies at its masters' offsets");
  CNNSCALE_CHECK(!plan.update_reads_mirror_grads || m.compute_grads.defined(),
                 "the update cannot read mirror gradients: none are mirrored");
  m.plan = plan;
  m.planned = true;
  if (!plan.gather_gradients) return;
  m.gathers.assign(m.layers.size(), false);
  m.gather_rows = plan.gather_rows;
  if (!m.ranks) return;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const NetLayer& nl = m.layers[l];
    m.gathers[l] = nl.runs_backward && !nl.layer->params().empty() &&
                   nl.layer->gathers_gradients(plan.gather_rows, m.ranks->ranks());
    m.gathering_layers += m.gathers[l] ? 1 : 0;
  }
}

const GradientPlan& Net::gradient_plan() const { return impl_->plan; }
size_t Net::gathering_layers() const { return impl_->gathering_layers; }

void Net::set_gather_rows(int64_t rows) {
  CNNSCALE_CHECK(rows >= 1, "gathered rows must be >= 1, got {}", rows);
  impl_->gather_rows = rows;
}

bool Net::layer_gathers(size_t layer_index) const {
  const Impl& m = *impl_;
  return layer_index < m.gathers.size() && m.gathers[layer_index];
}

const Tensor& Net::loss() const {
  const Impl& m = *impl_;
  if (m.combine_losses) return m.loss_sum;
  if (m.loss_layers.empty()) throw_config("network has no loss layer (e.g. SoftmaxWithLoss)");
  return m.layers[static_cast<size_t>(m.loss_layers[0])].top_data[0];
}

const Tensor& Net::blob(const std::string& name) const {
  auto it = impl_->blob_index.find(name);
  if (it == impl_->blob_index.end()) throw_config("network has no blob named '{}'", name);
  return impl_->blobs[static_cast<size_t>(it->second)].data;
}

bool Net::has_blob(const std::string& name) const { return impl_->blob_index.count(name) > 0; }

std::vector<std::string> Net::accuracy_outputs() const {
  std::vector<std::string> out;
  for (const auto& nl : impl_->layers)
    if (nl.layer->type() == "Accuracy")
      for (const auto& t : nl.spec.config.tops) out.push_back(t);
  return out;
}

std::vector<Layer*> Net::layers() const {
  std::vector<Layer*> out;
  for (const auto& nl : impl_->layers) out.push_back(nl.layer.get());
  return out;
}

bool Net::runs_in_phase(size_t index, Phase phase) const {
  CNNSCALE_CHECK(index < impl_->layers.size(), "layer {} of {}", index, impl_->layers.size());
  return runs_in(impl_->layers[index].spec.phase, phase);
}

std::vector<Param*> Net::params() const { return impl_->params; }
const Tensor& Net::flat_params() const { return impl_->flat_params; }
const Tensor& Net::flat_grads() const { return impl_->flat_grads; }
const Tensor& Net::flat_mirrors() const { return impl_->compute_params; }
bool Net::copies_at_master_offsets() const {
  return impl_->copies_at_master_offsets && impl_->compute_params.defined();
}
void Net::mirrors_written_by_update() { impl_->mirrors_from_update = true; }
const Tensor& Net::flat_mirror_grads() const { return impl_->compute_grads; }
std::vector<std::pair<std::string, Tensor>> Net::state() const { return impl_->state; }

}  // namespace cnnscale
