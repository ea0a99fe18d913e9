// Convolutions through cuDNN's graph (backend) API: one operation graph per convolution direction,
// the execution plans cuDNN's heuristics propose for it, and their execution.
// Why next to the legacy cudnnFind path (cuda_conv.cpp): the legacy API reaches only the engines
// behind its eight algorithm enums, while the graph API also offers the engines cuDNN 9 ranks by
// heuristics (some compiled at run time for the exact shape). The gait 2D-CNN's first convolution
// ran 25-30% slower with the best legacy algorithm than with what PyTorch, which uses the graph
// API, picked (docs/measurements/2026-11-25-convolution-choices.md). Both sets are timed on the
// real buffers and the faster wins, so a shape the legacy API serves best keeps its algorithm.
#pragma once
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/tensor.hpp"

namespace cnnscale::cuda {

enum class ConvDirection { Forward, BackwardData, BackwardFilter };

// A 4-d tensor as the graph API takes it: (N, C, H, W) extents with the strides of its memory order.
struct GraphTensor {
  std::array<int64_t, 4> dims{};
  std::array<int64_t, 4> strides{};
};

// One convolution direction: the operands' extents and strides, the storage type they share, and
// what the engines may do with the numbers.
struct ConvGraphSpec {
  ConvDirection direction = ConvDirection::Forward;
  cudnnDataType_t data_type = CUDNN_DATA_FLOAT;
  GraphTensor x, w, y;  // w as (K, C/groups, R, S); a grouped convolution is implied by x's C
  std::array<int64_t, 2> pad{}, stride{1, 1}, dilation{1, 1};
  bool allow_tf32 = false;  // f32 only: engines with the TENSOR_CORE note (TF32) allowed
  // The output adds to what it holds (the operation's beta 1): dx += for backward data
  // (Backend::conv_backward_data_add), likewise y and dw. Without the fused epilogues.
  bool accumulate = false;
  // Forward only: y = max(0, conv + bias), the bias (1, K, 1, 1) of data_type, as one graph (a
  // convolution into an fp32 intermediate, a pointwise add and a pointwise ReLU) that cuDNN's
  // runtime-fusion engines compile into one kernel.
  bool bias_relu = false;
  // With bias_relu: y = max(0, conv + bias + z), z a residual addend of y's extents, strides and
  // data_type, added in fp32 before the ReLU (conv_forward_residual).
  bool addend = false;
  // With bias_relu: false leaves the ReLU out, y = conv + bias (conv_forward_bias).
  bool relu = true;
  // int8 (with bias_relu; data_type CUDNN_DATA_INT8): the products summed in int32, then in fp32
  // y = acc * scale + bias (+ z, or + z * z_scale) (ReLU), scale, bias and z_scale fp32 (1, K, 1,
  // 1), y of y_type (an int8 y holds the result rounded and saturated), z of z_type.
  bool int8 = false;
  cudnnDataType_t y_type = CUDNN_DATA_FLOAT;
  cudnnDataType_t z_type = CUDNN_DATA_FLOAT;
  bool z_scaled = false;  // int8 with addend: z times z_scale before the sum
};

// Extents and strides of a 4-d operand of `shape` stored in `layout` (KRSC filters when NHWC).
GraphTensor graph_tensor(const Shape& shape, Layout layout);
// The forward spec with the bias and ReLU epilogue (ConvGraphSpec::bias_relu).
ConvGraphSpec conv_bias_relu_graph_spec(DType dtype, Layout layout, const Shape& x, const Shape& w, const Shape& y,
                                        const ConvParams& p, bool allow_tf32);
// The forward spec with the bias alone (ConvGraphSpec::relu false).
ConvGraphSpec conv_bias_graph_spec(DType dtype, Layout layout, const Shape& x, const Shape& w, const Shape& y,
                                   const ConvParams& p, bool allow_tf32);
// The int8 forward of conv_forward_int8 (ConvGraphSpec::int8), channels-last.
// `addend`: the addend's dtype (of y's, any float beside an int8 y, or i8), or none; `addend_scaled`:
// the addend is multiplied by a per-channel scale before the sum.
ConvGraphSpec conv_int8_graph_spec(const Shape& x, const Shape& w, const Shape& y, const ConvParams& p, DType y_dtype,
                                   std::optional<DType> addend, bool addend_scaled, bool relu);
// The forward spec with bias, residual addend and ReLU (ConvGraphSpec::addend).
ConvGraphSpec conv_residual_graph_spec(DType dtype, Layout layout, const Shape& x, const Shape& w, const Shape& y,
                                       const ConvParams& p, bool allow_tf32);
// The spec of one direction of the convolution x (*) w = y with parameters p, all operands of
// storage `dtype` in `layout`.
ConvGraphSpec conv_graph_spec(ConvDirection direction, DType dtype, Layout layout, const Shape& x, const Shape& w,
                              const Shape& y, const ConvParams& p, bool allow_tf32);

// A finalised execution plan for one ConvGraphSpec. Operands are passed in (x, w, y) order for
// every direction: forward reads x and w and writes y; backward data reads w and dy (y) and writes
// dx (x); backward filter reads x and dy and writes dw (w).
class ConvGraphPlan {
 public:
  ~ConvGraphPlan();
  ConvGraphPlan(const ConvGraphPlan&) = delete;
  ConvGraphPlan& operator=(const ConvGraphPlan&) = delete;

  size_t workspace_bytes() const { return workspace_bytes_; }
  // Engine index and knob choices, for logs.
  const std::string& name() const { return name_; }
  // Enqueues the convolution on the handle's stream. Returns cuDNN's status instead of throwing:
  // the search skips a plan that refuses to run; the run path checks it. `bias`: the bias of a
  // bias_relu plan, `addend` the addend of a residual one (BAD_PARAM if one is missing there, or
  // given to another plan).
  cudnnStatus_t execute(cudnnHandle_t handle, void* x, void* w, void* y, void* workspace, void* bias = nullptr,
                        void* addend = nullptr, void* scale = nullptr, void* addend_scale = nullptr) const;

 private:
  friend std::vector<std::unique_ptr<ConvGraphPlan>> conv_graph_plans(cudnnHandle_t, const ConvGraphSpec&, size_t, int,
                                                                      const std::string*);
  ConvGraphPlan() = default;
  // What the plan was built from (tensors, convolution, operation, graph, engine configuration),
  // kept alive as long as the plan; each descriptor is destroyed by its last owner.
  std::vector<std::shared_ptr<void>> owned_;
  std::shared_ptr<void> plan_;
  size_t workspace_bytes_ = 0;
  std::string name_;
  // The last variant pack (operand and workspace pointers) and the pointers it was built for.
  bool bias_relu_ = false, addend_ = false, int8_ = false, z_scaled_ = false;
  mutable std::shared_ptr<void> pack_;
  mutable std::array<void*, 8> pack_key_{};
};

// The plans cuDNN's heuristics (modes A then B; the fallback list where they have none) propose
// for `spec` that finalise on this device, pass the numerical-note filter, and need at most
// `max_workspace` bytes; at most `max_plans`, in the heuristics' order, without duplicates. Empty
// when the graph API supports nothing for the spec (the legacy algorithms then stand alone).
// `only_engine`: finalise just the engine of that name (an EngineCache hit), none if it is not
// offered: the other candidates are never compiled.
std::vector<std::unique_ptr<ConvGraphPlan>> conv_graph_plans(cudnnHandle_t handle, const ConvGraphSpec& spec,
                                                             size_t max_workspace, int max_plans,
                                                             const std::string* only_engine = nullptr);

}  // namespace cnnscale::cuda
