// Convolution plans: made per shape, parameters, dtype and memory order (conv_plan) and found
// again (find_conv_plan); operands reordered between memory orders or copied with their channels
// padded; and what a plan ran, as conv_implementation names it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/conv_form_choice.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_conv_timing.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"
#include "backend/width_lowering.hpp"
#include "core/log.hpp"

namespace cnnscale {

namespace {

// Channels-last tensor-core convolutions want whole 16-byte pixels: 8 channels of 2 bytes, or 4 of
// 4 bytes (TF32).
constexpr int64_t kPixelQuantumBytes = 16;
int64_t channel_quantum(DType dtype) { return kPixelQuantumBytes / static_cast<int64_t>(dtype_size(dtype)); }

}  // namespace

// Plans are per shape, parameters, dtype and memory order.
cuda::ConvEngine::ConvKey cuda::ConvEngine::conv_key(const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                                     Layout layout) {
  return {x[0],       x[1],       x[2],    x[3],    w[0],         w[1],         w[2],         w[3],
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups,
          static_cast<int64_t>(dtype) * 2 + (layout == Layout::NHWC ? 1 : 0)};
}

ConvPlan& cuda::ConvEngine::conv_plan(const char* op, const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                      Layout layout) {
  if (x.rank() != 4 || w.rank() != 4)
    throw_runtime("{} on cuda: x {} and w {} must be 4-d (N, C, H, W) / (K, C/groups, R, S)", op, x.to_string(),
                  w.to_string());
  if (p.groups < 1 || x.c() != w.c() * p.groups || w.n() % p.groups != 0 || w.h() != p.kernel_h ||
      w.w() != p.kernel_w || p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.pad_h < 0 ||
      p.pad_w < 0)
    throw_runtime("{} on cuda: inconsistent x {} w {} kernel {}x{} stride {}x{} pad {}x{} dilation {}x{} groups {}", op,
                  x.to_string(), w.to_string(), p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                  p.dilation_h, p.dilation_w, p.groups);
  const ConvKey key = conv_key(p, x, w, dtype, layout);
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return *it->second;

  auto plan = std::make_unique<ConvPlan>();
  plan->dtype = dtype;
  plan->layout = layout;
  plan->channels = x.c();
  plan->x_shape = x;
  plan->w_shape = w;
  plan->params = p;
  cuda::set_nchw(plan->x, x, op, dtype, layout);
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, cuda::cudnn_type(dtype), cuda::cudnn_format(layout),
                                         cuda::to_int_dim(w[0], op),
                                         cuda::to_int_dim(w[1], op), cuda::to_int_dim(w[2], op),
                                         cuda::to_int_dim(w[3], op)));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                                              p.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, p.groups));
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, algos_.conv_math(dtype)));
  int n = 0, k = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &n, &k, &oh, &ow));
  // The shape rule every backend and the layers share; cuDNN must agree with it.
  Shape expected{x[0], w[0], conv_output_dim(x[2], p.kernel_h, p.stride_h, p.pad_h, p.dilation_h),
                 conv_output_dim(x[3], p.kernel_w, p.stride_w, p.pad_w, p.dilation_w)};
  plan->y_shape = Shape{n, k, oh, ow};
  if (plan->y_shape != expected || oh < 1 || ow < 1)
    throw_runtime("{} on cuda: cuDNN output {} differs from cnnscale's {} for x {} w {}", op, plan->y_shape.to_string(),
                  expected.to_string(), x.to_string(), w.to_string());
  cuda::set_nchw(plan->y, plan->y_shape, op, dtype, layout);
  ConvPlan& made = *conv_plans_.emplace(key, std::move(plan)).first->second;
  const int64_t quantum = channel_quantum(dtype);
  if (layout == Layout::NHWC && p.groups == 1 && x.c() % quantum != 0 &&
      b_.options_.channel_padding != ConvChannelPadding::Never) {
    Shape xp = x, wp = w;
    xp[1] = wp[1] = (x.c() + quantum - 1) / quantum * quantum;
    made.padded = &conv_plan(op, p, xp, wp, dtype, layout);  // map nodes stay put: `made` is still valid
  }
  // Measured needs timing: deterministic runs choose without it, so they stay channels-last.
  const bool first_form = b_.options_.channels_first == ConvChannelsFirst::Always ||
                          (b_.options_.channels_first == ConvChannelsFirst::Measured && !b_.options_.deterministic);
  if (layout == Layout::NHWC && p.groups == 1 && x.c() % quantum != 0 && first_form)
    made.channels_first = &conv_plan(op, p, x, w, dtype, Layout::NCHW);
  // Width lowering: for the same first convolutions, where tensor cores compute (strict fp32 stays
  // on cuDNN's own forms, as with lowering) and where the copy is not out of proportion.
  const bool width_form = (b_.options_.width_lowering == ConvWidthLowering::Always ||
                           (b_.options_.width_lowering == ConvWidthLowering::Measured && !b_.options_.deterministic)) &&
                          layout == Layout::NHWC && x.c() % quantum != 0 &&
                          (dtype != DType::F32 || b_.options_.allow_tf32);
  const std::optional<WidthLowering> l = width_form ? width_lowering(p, x, w, quantum) : std::nullopt;
  if (l && width_lowering_fits(l->x, x, dtype)) {
    made.width_lowered = &conv_plan(op, l->params, l->x, l->w, dtype, layout);
    made.width_lowered->serves_width_lowering = true;
    made.width_field = l->field;
  }
  return made;
}

Tensor cuda::ConvEngine::reordered(size_t slot, const Tensor& t, Layout to) {
  Tensor out = b_.staging(slot, t.shape(), t.dtype()).as_layout(to);
  reorder(t, out);
  return out;
}

void cuda::ConvEngine::reorder(const Tensor& src, const Tensor& dst) {
  cuda::set_desc(b_.desc_a_, src, "reorder");
  cuda::set_desc(b_.desc_b_, dst, "reorder");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnTransformTensor(b_.cudnn_, &one, b_.desc_a_, src.raw(), &zero, b_.desc_b_, dst.raw()));
}

Tensor cuda::ConvEngine::channels_staging(size_t slot, const Tensor& t, int64_t channels) {
  Shape s = t.shape();
  s[1] = channels;
  return b_.staging(slot, s, t.dtype()).as_layout(Layout::NHWC);
}

Tensor cuda::ConvEngine::with_channels(size_t slot, const Tensor& t, int64_t channels) {
  Tensor out = channels_staging(slot, t, channels);
  const int64_t pixels = t.numel() / t.shape().c();
  cuda::launch_copy_rows(t.dtype(), pixels, t.raw(), t.shape().c(), out.raw(), channels, b_.stream());
  return out;
}

void cuda::ConvEngine::unpad_channels(const Tensor& padded, const Tensor& dst) {
  const int64_t pixels = dst.numel() / dst.shape().c();
  cuda::launch_copy_rows(dst.dtype(), pixels, padded.raw(), padded.shape().c(), dst.raw(), dst.shape().c(),
                         b_.stream());
}

const ConvPlan* cuda::ConvEngine::find_conv_plan(const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                                 Layout layout) const {
  if (x.rank() != 4 || w.rank() != 4) return nullptr;
  const ConvKey key = conv_key(p, x, w, dtype, layout);
  auto it = conv_plans_.find(key);
  return it == conv_plans_.end() ? nullptr : it->second.get();
}

// ---- what ran ------------------------------------------------------------------------------------

namespace {

// cuDNN's names of its legacy algorithms, by direction, in cudnn_ops.h's enum order.
const char* legacy_algorithm_name(cuda::ConvDirection direction, int algo) {
  static const char* const kForward[] = {"implicit GEMM", "implicit precomputed GEMM", "GEMM", "direct", "FFT",
                                         "FFT tiling", "Winograd", "Winograd nonfused"};
  static const char* const kData[] = {"algo 0", "algo 1", "FFT", "FFT tiling", "Winograd", "Winograd nonfused"};
  static const char* const kFilter[] = {"algo 0", "algo 1", "FFT", "algo 3", "Winograd", "Winograd nonfused",
                                        "FFT tiling"};
  auto pick = [&](const auto& names) -> const char* {
    return algo >= 0 && algo < static_cast<int>(std::size(names)) ? names[algo] : "?";
  };
  switch (direction) {
    case cuda::ConvDirection::Forward: return pick(kForward);
    case cuda::ConvDirection::BackwardData: return pick(kData);
    default: return pick(kFilter);
  }
}

// The cuDNN choice of one direction: its graph-API plan, or its legacy algorithm (with tensor
// cores where its math type says so); empty where the direction was not searched.
std::string cudnn_choice(const ConvAlgoChoice& c, cuda::ConvDirection direction) {
  if (c.graph) return "cuDNN graph " + c.graph->name();
  if (c.algo < 0) return {};
  return fmt::format("cuDNN {}{}", legacy_algorithm_name(direction, c.algo),
                     cuda::is_tensor_op(c.math) ? " (tensor cores)" : "");
}

// One direction of `plan` as it runs: the forms in the order they nest (run_faster_form,
// run_faster_width, run_faster_order), then channel padding, then cuDNN's choice on the plan that
// runs; empty where the direction was not run. bias_relu: the forward is conv_forward_bias_relu's.
std::string direction_implementation(const ConvPlan& plan, cuda::ConvDirection d, bool bias_relu, bool addend,
                                     bool bias_only = false) {
  using Choice = ConvPlan::Choice;
  using Dir = cuda::ConvDirection;
  const bool fwd = d == Dir::Forward, filter = d == Dir::BackwardFilter;
  const Choice lowered = fwd ? (bias_relu ? plan.fwd_bias_relu_lowered : plan.fwd_lowered)
                             : filter ? plan.bwd_filter_lowered : Choice::No;
  const Choice width = fwd ? (bias_relu ? plan.fwd_bias_relu_width_lowered : plan.fwd_width_lowered)
                           : filter ? plan.bwd_filter_width_lowered : Choice::No;
  const Choice first = fwd ? (bias_relu ? plan.fwd_bias_relu_channels_first : plan.fwd_channels_first)
                            : filter ? plan.bwd_filter_channels_first : plan.bwd_data_channels_first;
  const bool padded = (fwd ? plan.fwd_padded : filter ? plan.bwd_filter_padded : plan.bwd_data_padded) && plan.padded;
  ConvAlgoChoice ConvPlan::*algo = fwd ? &ConvPlan::fwd : filter ? &ConvPlan::bwd_filter : &ConvPlan::bwd_data;
  // The lowered forward has the bias and ReLU in its GEMM's epilogue; the other forms run them
  // after the convolution, unless cuDNN's fused plan runs.
  const std::string apart = fwd && bias_relu ? (addend ? " + bias, addend, ReLU" : " + bias, ReLU") : "";
  // A residual or bias-only forward runs its fused plan, or conv_forward's form followed by the ops.
  if (fwd && addend && plan.fwd_residual)
    return fmt::format("cuDNN graph {} (bias, addend, ReLU fused)", plan.fwd_residual->name());
  if (fwd && addend) return direction_implementation(plan, d, false, false) + apart;
  if (fwd && bias_only && plan.fwd_bias) return fmt::format("cuDNN graph {} (bias fused)", plan.fwd_bias->name());
  if (fwd && bias_only) return direction_implementation(plan, d, false, false) + " + bias";
  if (lowered == Choice::Yes) return "lowered: im2col + cuBLASLt GEMM";
  if (width == Choice::Yes && plan.width_lowered)
    return fmt::format("width-lowered ({}x1 over {} channels): {}", plan.width_lowered->params.kernel_h,
                       plan.width_lowered->channels,
                       direction_implementation(*plan.width_lowered, d, bias_relu, false));
  if (first == Choice::Yes && plan.channels_first)
    return "channels-first copies: " + cudnn_choice(plan.channels_first->*algo, d) + apart;
  const ConvPlan& runs = padded ? *plan.padded : plan;
  const std::string pad = padded ? fmt::format("padded to {} channels: ", plan.padded->channels) : std::string();
  if (fwd && bias_relu && runs.fwd_bias_relu)
    return fmt::format("{}cuDNN graph {} (bias, ReLU fused)", pad, runs.fwd_bias_relu->name());
  const std::string chosen = cudnn_choice(runs.*algo, d);
  return chosen.empty() ? chosen : pad + chosen + apart;
}

}  // namespace

std::string cuda::ConvEngine::conv_implementation(const ConvSignature& call) const {
  const ConvPlan* plan = find_conv_plan(call.p, call.x, call.w, call.dtype, call.layout);
  if (!plan) return {};
  std::string out;
  auto add = [&](const char* name, cuda::ConvDirection d) {
    const std::string how = direction_implementation(*plan, d, call.bias_relu, call.addend, call.bias_only);
    if (!how.empty()) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", name, how);
  };
  add("fwd", cuda::ConvDirection::Forward);
  add("dgrad", cuda::ConvDirection::BackwardData);
  if (call.adds && plan->bwd_data_adds != ConvPlan::Adds::Never)
    out += plan->bwd_data_adds == ConvPlan::Adds::InPlace ? ", adding to its input's gradient in place"
                                                          : ", adding to its input's gradient through a scratch copy";
  add("wgrad", cuda::ConvDirection::BackwardFilter);
  return out;
}

}  // namespace cnnscale
