// Net, built: the layers and blobs from the spec, activations (again at every reshape), the flat
// parameter and gradient buffers with their initial values, and the layers' state.
#include <algorithm>
#include <map>
#include <random>

#include "layers/filler.hpp"
#include "net/net_impl.hpp"

namespace cnnscale {

using net_detail::align_up;
using net_detail::Blob;
using net_detail::kParamAlignment;
using net_detail::NetLayer;

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

// Which buffer each consumer's gradient goes to. Per blob, the consumer that runs first in backward
// (the last to read it in forward) writes `diff`; each one running later that can add in place
// (Layer::can_add_bottom_diff, a layer other than the writer's) adds to it; the rest write
// extra_diffs, summed into `diff` before the producer's backward. Adding saves that sum's pass over
// the gradient: ResNet-50's block inputs, read by the block and its shortcut, spent 2.9 of a 42 ms
// bf16 step on it on an H100 (docs/measurements/2026-12-07-resnet50-step-h100.md).
void Net::Impl::plan_backward() {
  std::vector<std::vector<std::pair<size_t, size_t>>> consumers(blobs.size());  // (layer, bottom), forward order
  for (size_t l = 0; l < layers.size(); ++l) {
    NetLayer& nl = layers[l];
    bool any_bottom_grad = false;
    for (int b : nl.bottoms) any_bottom_grad |= blobs[b].needs_grad;
    // Layers without parameters whose inputs need no gradient (e.g. a ReLU right on `data`) are
    // skipped in backward; so are test-only layers and layers without a backward (Accuracy).
    nl.runs_backward = runs_in(nl.spec.phase, Phase::Train) && nl.layer->has_backward() &&
                       (!nl.layer->param_specs().empty() || any_bottom_grad);
    nl.propagate.assign(nl.bottoms.size(), false);
    nl.diff_slot.assign(nl.bottoms.size(), -1);
    nl.adds.assign(nl.bottoms.size(), false);
    if (!nl.runs_backward) continue;
    for (size_t i = 0; i < nl.bottoms.size(); ++i) {
      if (!blobs[nl.bottoms[i]].needs_grad) continue;
      nl.propagate[i] = true;
      consumers[nl.bottoms[i]].emplace_back(l, i);
    }
    for (int t : nl.tops) blobs[t].needs_grad = true;
  }
  for (size_t b = 0; b < blobs.size(); ++b) {
    if (consumers[b].empty()) continue;
    const size_t writer = consumers[b].back().first;
    for (auto it = consumers[b].rbegin(); it != consumers[b].rend(); ++it) {
      NetLayer& nl = layers[it->first];
      const size_t i = it->second;
      if (it != consumers[b].rbegin() && it->first < writer && nl.layer->can_add_bottom_diff(i)) {
        nl.diff_slot[i] = 0;
        nl.adds[i] = true;
        ++blobs[b].adders;
      } else {
        nl.diff_slot[i] = blobs[b].grad_consumers++;
      }
    }
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
    b.add_scratch = Tensor();
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
  share_add_scratch();
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
    std::vector<Tensor> scratch;
    for (size_t i = 0; i < nl.bottoms.size(); ++i)
      scratch.push_back(nl.adds.size() > i && nl.adds[i] ? blobs[nl.bottoms[i]].add_scratch : Tensor());
    nl.layer->set_bottom_diff_adds(nl.adds, std::move(scratch));
    for (int t : nl.tops) {
      nl.top_data.push_back(blobs[t].data);
      nl.top_diff.push_back(blobs[t].diff);  // undefined when nothing upstream needs it
    }
  }
}

// Where the backend cannot add a convolution's data gradient in place, it writes it to a scratch
// buffer and adds that. Backward runs its layers one after another on one stream, and each use of
// the scratch ends within its call, so one buffer per dtype, as large as the largest gradient added
// to, serves every adder (as a view of that gradient's shape and memory order): ResNet-50's sixteen
// block inputs at batch 256 in bf16 would otherwise hold some 2.9 GB of scratch for one 411 MB use
// at a time.
void Net::Impl::share_add_scratch() {
  if (backend.adds_gradients_in_place()) return;
  std::map<DType, int64_t> largest;
  for (const Blob& b : blobs)
    if (b.needs_grad && b.adders > 0) largest[b.dtype] = std::max(largest[b.dtype], b.diff.numel());
  std::map<DType, Tensor> shared;
  for (const auto& [dtype, numel] : largest) shared[dtype] = backend.alloc(Shape({numel}), dtype);
  for (Blob& b : blobs)
    if (b.needs_grad && b.adders > 0)
      b.add_scratch = shared.at(b.dtype).view(0, b.diff.shape()).as_layout(b.diff.layout());
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

}  // namespace cnnscale
