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
#include <map>
#include <random>
#include <utility>

#include "layers/filler.hpp"
#include "net/net_spec_impl.hpp"

namespace cnnscale {

namespace {

// Parameter offsets in the flat buffers are rounded up to this many elements (256 bytes), so every
// parameter starts where cuDNN/cuBLAS vectorised paths want it. The gaps stay zero.
constexpr int64_t kParamAlignment = 64;

struct Blob {
  std::string name;
  DType dtype = DType::F32;
  Tensor data;
  // Gradient of the loss w.r.t. this blob. The first backward consumer writes `diff`; every further
  // consumer writes its own entry of `extra_diffs`, which are summed into `diff` right before the
  // producer's backward (Caffe's Split layer, without a layer).
  Tensor diff;
  std::vector<Tensor> extra_diffs;
  bool needs_grad = false;  // produced by a layer that runs backward
  int grad_consumers = 0;
};

struct NetLayer {
  std::unique_ptr<Layer> layer;
  SpecLayer spec;
  std::vector<int> bottoms, tops;  // blob indices
  bool runs_backward = false;
  std::vector<bool> propagate;   // per bottom
  std::vector<int> diff_slot;    // per bottom: -1 none, 0 the blob's diff, k its extra_diffs[k - 1]
  // What forward/backward receive; rebuilt whenever activations are (re)allocated.
  std::vector<Tensor> bottom_data, top_data, top_diff, bottom_diff;
};

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

}  // namespace

struct Net::Impl {
  Backend& backend;
  DType compute = DType::F32;
  Layout layout = Layout::NCHW;  // preferred for 4-d activations (Backend::activation_layout_for)
  NetUse use = NetUse::Training;
  int64_t batch = 0;
  uint64_t seed = 0;
  std::vector<int64_t> input_shape;
  std::vector<Blob> blobs;
  std::map<std::string, int> blob_index;
  std::vector<NetLayer> layers;
  Tensor flat_params, flat_grads;        // (P) f32 masters
  Tensor compute_params, compute_grads;  // packed compute copies (16-bit, or channels-last f32 filters)
  bool copies_at_master_offsets = false;  // see Net::Net: compute_params/grads are (P), master offsets
  Tensor input_compute;                  // the input in the compute dtype and layout, where either differs
  double grad_scale = 1.0;               // fp16 loss scale, divided out when gradients are widened
  Tensor grad_scale_on_device;           // or in device memory: (2) f32, the scale and its inverse
  std::vector<Param*> params;      // network order
  std::vector<std::pair<std::string, Tensor>> state;
  std::vector<int> loss_layers;
  bool combine_losses = false;  // more than one loss layer, or a weight other than 1
  Tensor loss_sum;              // (1), used when combine_losses
  double loss_scale = 1.0;
  RankExchange* ranks = nullptr;
  const Tensor* iteration_on_device = nullptr;
  uint64_t generation = 0;  // reshapes so far (each moves every activation buffer)

  LayerContext context(Phase phase, uint64_t iteration) {
    LayerContext ctx{backend, phase, seed, iteration};
    ctx.loss_scale = loss_scale * grad_scale;
    if (grad_scale_on_device.defined()) ctx.grad_scale_on_device = &grad_scale_on_device;
    ctx.ranks = ranks;
    ctx.iteration_on_device = iteration_on_device;
    return ctx;
  }

  explicit Impl(Backend& b) : backend(b) {}

  void build(const NetSpec::Impl& spec, int64_t batch_size);
  NetSpec::Impl bounds;  // the spec's name, file and values_per_sample: what check_batch_fits reads
  void allocate_activations(int64_t batch_size);
  void plan_backward();
  void allocate_params();
  void allocate_state();
  void sum_extra_diffs(const Blob& blob);
  // Where `p`'s master lies in flat_params (elements).
  int64_t master_offset(const Param& p) const {
    return static_cast<int64_t>((p.master.offset_bytes() - flat_params.offset_bytes()) / sizeof(float));
  }
  // A zeroed activation tensor in the net's layout where that applies (4-d tensors of the compute
  // dtype, and int8 activations, which stand for the compute dtype's between int8 convolutions).
  Tensor activation(const Shape& shape, DType dtype) {
    const DType as = dtype == DType::I8 ? compute : dtype;
    return backend.alloc(shape, dtype).as_layout(activation_layout(layout, shape, as, compute));
  }
  std::vector<Param*> mirrored_params;  // compute copies, refreshed from their masters
  bool weights_frozen = false, mirrors_current = false;  // see Net::freeze_weights
  bool mirrors_from_update = false;                       // see Net::mirrors_written_by_update
  GradientPlan plan;              // see Net::set_gradient_plan
  bool planned = false;           // set_gradient_plan was called
  std::vector<bool> gathers;      // by layer: forms its gradients from gathered rows (plan.gather_gradients)
  size_t gathering_layers = 0;    // how many of gathers are set
  int64_t gather_rows = 0;        // rows every rank sends
};

void Net::Impl::build(const NetSpec::Impl& spec, int64_t batch_size) {
  if (batch_size <= 0) throw_config("batch size must be positive, got {}", batch_size);
  check_batch_fits(spec, batch_size);
  bounds.name = spec.name;
  bounds.file = spec.file;
  bounds.values_per_sample = spec.values_per_sample;
  input_shape = spec.input_shape;
  blobs.push_back(Blob{});
  blobs.back().name = "data";
  blobs.push_back(Blob{});
  blobs.back().name = "label";
  blobs.back().dtype = DType::I32;
  blob_index["data"] = 0;
  blob_index["label"] = 1;
  for (const auto& sl : spec.layers) {
    NetLayer nl;
    nl.spec = sl;
    LayerConfig config = sl.config;
    config.activation_dtype = compute;
    config.activation_layout = layout;
    nl.layer = create_layer(std::move(config));
    for (const auto& b : sl.config.bottoms) nl.bottoms.push_back(blob_index.at(b));  // NetSpec checked them
    for (const auto& t : sl.config.tops) {
      blob_index[t] = static_cast<int>(blobs.size());
      nl.tops.push_back(static_cast<int>(blobs.size()));
      blobs.push_back(Blob{});
      blobs.back().name = t;
    }
    if (nl.layer->is_loss()) {
      loss_layers.push_back(static_cast<int>(layers.size()));
      if (sl.loss_weight != 1.0f) combine_losses = true;
    }
    layers.push_back(std::move(nl));
  }
  if (loss_layers.size() > 1) combine_losses = true;
  // infer_shapes first: layers may only answer param_specs() after it.
  allocate_activations(batch_size);
  allocate_params();
  allocate_state();
  for (auto& nl : layers) nl.layer->setup(backend);
}

void Net::Impl::plan_backward() {
  for (auto& nl : layers) {
    bool any_bottom_grad = false;
    for (int b : nl.bottoms) any_bottom_grad |= blobs[b].needs_grad;
    // Layers without parameters whose inputs need no gradient (e.g. a ReLU right on `data`) are
    // skipped in backward; so are test-only layers and layers without a backward (Accuracy).
    nl.runs_backward = runs_in(nl.spec.phase, Phase::Train) && nl.layer->has_backward() &&
                       (!nl.layer->param_specs().empty() || any_bottom_grad);
    nl.propagate.assign(nl.bottoms.size(), false);
    nl.diff_slot.assign(nl.bottoms.size(), -1);
    if (!nl.runs_backward) continue;
    for (size_t i = 0; i < nl.bottoms.size(); ++i) {
      Blob& b = blobs[nl.bottoms[i]];
      if (!b.needs_grad) continue;
      nl.propagate[i] = true;
      nl.diff_slot[i] = b.grad_consumers++;
    }
    for (int t : nl.tops) blobs[t].needs_grad = true;
  }
}

void Net::Impl::allocate_activations(int64_t batch_size) {
  const bool first = batch == 0;
  batch = batch_size;
  // Drop the old activations before allocating the new ones, to keep peak memory down.
  for (auto& b : blobs) {
    b.data = Tensor();
    b.diff = Tensor();
    b.extra_diffs.clear();
  }
  input_compute = Tensor();
  blobs[0].data = backend.alloc(Shape({batch, input_shape[0], input_shape[1], input_shape[2]}), DType::F32);
  if (compute != DType::F32 || activation_layout(layout, blobs[0].data.shape(), compute, compute) != Layout::NCHW)
    input_compute = activation(blobs[0].data.shape(), compute);
  blobs[1].data = backend.alloc(Shape({batch}), DType::I32);
  for (auto& nl : layers) {
    std::vector<Shape> bottom_shapes;
    for (int b : nl.bottoms) bottom_shapes.push_back(blobs[b].data.shape());
    std::vector<Shape> top_shapes = nl.layer->infer_shapes(bottom_shapes);
    CNNSCALE_CHECK(top_shapes.size() == nl.tops.size(), "layer '{}' inferred {} top shapes for {} tops",
                   nl.layer->name(), top_shapes.size(), nl.tops.size());
    for (size_t i = 0; i < nl.tops.size(); ++i) {
      Blob& top = blobs[nl.tops[i]];
      top.dtype = nl.layer->top_dtype(i);
      top.data = activation(top_shapes[i], top.dtype);
    }
  }
  if (first && use == NetUse::Training) plan_backward();
  if (first && use == NetUse::Inference)  // no blob needs a gradient: no diff is allocated below
    for (auto& nl : layers) {
      nl.propagate.assign(nl.bottoms.size(), false);
      nl.diff_slot.assign(nl.bottoms.size(), -1);
    }
  for (auto& b : blobs) {
    if (!b.needs_grad) continue;
    b.diff = activation(b.data.shape(), b.dtype);
    for (int k = 1; k < b.grad_consumers; ++k) b.extra_diffs.push_back(activation(b.data.shape(), b.dtype));
  }
  for (auto& nl : layers) {
    nl.bottom_data.clear();
    nl.bottom_diff.clear();
    nl.top_data.clear();
    nl.top_diff.clear();
    for (size_t i = 0; i < nl.bottoms.size(); ++i) {
      const Blob& b = blobs[nl.bottoms[i]];
      nl.bottom_data.push_back(nl.bottoms[i] == 0 && input_compute.defined() ? input_compute : b.data);
      int slot = nl.diff_slot[i];
      nl.bottom_diff.push_back(slot < 0 ? Tensor() : slot == 0 ? b.diff : b.extra_diffs[slot - 1]);
    }
    for (int t : nl.tops) {
      nl.top_data.push_back(blobs[t].data);
      nl.top_diff.push_back(blobs[t].diff);  // undefined when nothing upstream needs it
    }
  }
}

void Net::Impl::allocate_params() {
  // Layout: layers from LAST to first, each layer's parameters in param_specs() order. Backward
  // produces gradients in that order, so a prefix of flat_grads is final early and a data-parallel
  // step can allreduce contiguous buckets while backward continues.
  std::vector<std::vector<ParamSpec>> specs;
  for (const auto& nl : layers) specs.push_back(nl.layer->param_specs());
  // The compute copies of mirrored parameters are packed in the same order into buffers of their
  // own: a TF32 net mirrors its convolution filters only, not its fully-connected weights.
  std::vector<std::vector<int64_t>> offsets(layers.size()), mirror_offsets(layers.size());
  int64_t total = 0, mirror_total = 0;
  for (size_t l = layers.size(); l-- > 0;) {
    for (const auto& s : specs[l]) {
      CNNSCALE_CHECK(s.dtype == DType::F32 || s.dtype == compute, "layer '{}' parameter '{}' is {} in a {} net",
                     layers[l].layer->name(), s.name, dtype_name(s.dtype), dtype_name(compute));
      total = align_up(total, kParamAlignment);
      offsets[l].push_back(total);
      total += s.shape.numel();
      mirror_offsets[l].push_back(-1);  // not mirrored
      if (!s.mirrored()) continue;
      mirror_total = align_up(mirror_total, kParamAlignment);
      mirror_offsets[l].back() = copies_at_master_offsets ? offsets[l].back() : mirror_total;
      mirror_total += s.shape.numel();
    }
  }
  // At the masters' offsets: one slot per parameter, so the buffers span the masters'.
  if (copies_at_master_offsets && mirror_total > 0) mirror_total = total;
  if (total == 0) return;
  flat_params = backend.alloc(Shape({total}), DType::F32);
  flat_grads = backend.alloc(Shape({total}), DType::F32);
  if (mirror_total > 0) {
    compute_params = backend.alloc(Shape({mirror_total}), compute);
    compute_grads = backend.alloc(Shape({mirror_total}), compute);
  }
  // Initialise on the host in NETWORK order from one seeded generator, so CPU and GPU nets (and
  // every rank) start from identical weights regardless of the buffer layout.
  std::vector<float> host(static_cast<size_t>(total), 0.0f);
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l < layers.size(); ++l) {
    auto& bound = layers[l].layer->params();
    bound.clear();
    for (size_t p = 0; p < specs[l].size(); ++p) {
      const ParamSpec& s = specs[l][p];
      fill_param(s, rng, host.data() + offsets[l][p]);
      Tensor master = flat_params.view(offsets[l][p], s.shape), master_diff = flat_grads.view(offsets[l][p], s.shape);
      if (!s.mirrored())
        bound.push_back({s, master, master_diff, master, master_diff});
      else
        bound.push_back({s, compute_params.view(mirror_offsets[l][p], s.shape).as_layout(s.layout),
                         compute_grads.view(mirror_offsets[l][p], s.shape).as_layout(s.layout), master, master_diff});
    }
    for (auto& p : bound) {
      params.push_back(&p);
      if (p.spec.mirrored()) mirrored_params.push_back(&p);
    }
  }
  backend.upload(host.data(), flat_params);
  // upload() may be asynchronous from pageable memory only up to the copy; wait so `host` can go.
  backend.synchronize();
}

void Net::Impl::allocate_state() {
  for (auto& nl : layers) {
    auto& bound = nl.layer->state();
    bound.clear();
    for (const auto& s : nl.layer->state_specs()) {
      Tensor t = backend.alloc(s.shape, DType::F32);
      if (s.init != 0.0f) backend.fill(t, s.init);
      bound.push_back(t);
      state.emplace_back(nl.layer->name() + "/" + s.name, t);
    }
  }
  if (combine_losses) loss_sum = backend.alloc(Shape({1}), DType::F32);
}

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
