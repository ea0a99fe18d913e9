// Net's private parts, shared by net.cpp (running it) and net_layout.cpp (building it and laying
// out its buffers): the blobs, the layers as the net holds them, and Net::Impl. Included by those
// two files only.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/net.hpp"
#include "net/net_spec_impl.hpp"

namespace cnnscale {

namespace net_detail {

// Parameter offsets in the flat buffers are rounded up to this many elements (256 bytes), so every
// parameter starts where cuDNN/cuBLAS vectorised paths want it. The gaps stay zero.
inline constexpr int64_t kParamAlignment = 64;

struct Blob {
  std::string name;
  DType dtype = DType::F32;
  Tensor data;
  // Gradient of the loss w.r.t. this blob. The first backward consumer writes `diff`; a later one
  // that can adds to it (plan_backward); every other writes its own entry of `extra_diffs`, summed
  // into `diff` right before the producer's backward (Caffe's Split layer, without a layer).
  Tensor diff;
  std::vector<Tensor> extra_diffs;
  // Where later consumers add to `diff` instead (Layer::can_add_bottom_diff): how many, and the
  // scratch they use where the backend cannot add in place (a view of the net's one shared buffer,
  // share_add_scratch).
  int adders = 0;
  Tensor add_scratch;
  bool needs_grad = false;  // produced by a layer that runs backward
  int grad_consumers = 0;   // consumers writing a buffer: `diff` and each of extra_diffs
};

struct NetLayer {
  std::unique_ptr<Layer> layer;
  SpecLayer spec;
  std::vector<int> bottoms, tops;  // blob indices
  bool runs_backward = false;
  std::vector<bool> propagate;   // per bottom
  std::vector<int> diff_slot;    // per bottom: -1 none, 0 the blob's diff, k its extra_diffs[k - 1]
  std::vector<bool> adds;        // per bottom: adds to the blob's diff (slot 0) written before it
  // What forward/backward receive; rebuilt whenever activations are (re)allocated.
  std::vector<Tensor> bottom_data, top_data, top_diff, bottom_diff;
};

inline int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

}  // namespace net_detail

struct Net::Impl {
  Backend& backend;
  DType compute = DType::F32;
  Layout layout = Layout::NCHW;  // preferred for 4-d activations (Backend::activation_layout_for)
  NetUse use = NetUse::Training;
  int64_t batch = 0;
  uint64_t seed = 0;
  std::vector<int64_t> input_shape;
  std::vector<net_detail::Blob> blobs;
  std::map<std::string, int> blob_index;
  std::vector<net_detail::NetLayer> layers;
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
  void share_add_scratch();
  void plan_backward();
  void allocate_params();
  void allocate_state();
  void sum_extra_diffs(const net_detail::Blob& blob);
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

}  // namespace cnnscale
