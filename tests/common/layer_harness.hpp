// Test harness: builds one layer from a YAML snippet the way the net does (key check, shape
// inference, parameters in one flat buffer, state, seeded fillers, setup) on any Backend, so CPU
// gradient checks and CUDA-vs-CPU parity tests share it. Plus small host<->tensor helpers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "layers/layer.hpp"

namespace cnnscale::testing {

struct LayerHarness {
  Backend* backend = nullptr;
  std::unique_ptr<Layer> layer;
  std::vector<Shape> bottom_shapes, top_shapes;
  std::vector<Tensor> bottoms, bottom_diffs;  // diffs only for float bottoms (undefined for labels)
  std::vector<Tensor> tops, top_diffs;
  Tensor flat_params, flat_grads;  // (P) all parameters / gradients, views bound into layer->params()
  uint64_t seed = 1;               // LayerContext::seed (dropout masks)
  uint64_t iteration = 0;          // LayerContext::iteration

  void forward(Phase phase = Phase::Train);
  // Propagates to every float bottom; writes every parameter gradient (the compute copy's diff).
  void backward(Phase phase = Phase::Train);
};

// `yaml` is one layer mapping, e.g. "type: Convolution\nnum_output: 4\nkernel: 3". `name`,
// `bottom` and `top` may be omitted (defaults: "layer", bottom0.., top0). Errors carry the path
// "layers[0]", as in a network file. f32 bottoms are filled from U(-1, 1), i32 bottoms with 0;
// parameters from their fillers with std::mt19937_64(seed) in order, exactly as the net does.
// `compute`: the layer's activation dtype (bf16/f16 on CUDA): float bottoms, their diffs and the tops
// a layer keeps in it are allocated so, and 16-bit parameters get a compute copy beside the f32
// master in flat_params (filled with the same values, rounded).
LayerHarness make_layer(Backend& backend, const std::string& yaml, const std::vector<Shape>& bottom_shapes,
                        uint64_t seed = 1, const std::vector<DType>& bottom_dtypes = {},
                        DType compute = DType::F32);

// f32, bf16 or f16 tensors as float on the host (16-bit ones converted on the backend).
std::vector<float> to_host(Backend& backend, const Tensor& t);
void from_host(Backend& backend, const Tensor& t, const std::vector<float>& values);
void set_labels(Backend& backend, const Tensor& t, const std::vector<int32_t>& labels);
void fill_uniform(Backend& backend, const Tensor& t, uint64_t seed, float lo, float hi);
// A random permutation of {0, spacing, 2 * spacing, ...} minus its mean: distinct values so that
// max pooling has no ties and no perturbation smaller than spacing / 2 moves a maximum.
void fill_distinct(Backend& backend, const Tensor& t, uint64_t seed, float spacing);

}  // namespace cnnscale::testing
