// The int8 convolution on the GPU (cuda::ConvAlgorithms; quantize_int8, one kernel of
// cuda_int8_kernels.cu, is with the element-wise ops in cuda_activation.cpp). It is one cuDNN graph:
// the int8 convolution summing in int32, then per output channel a multiply by the dequantising
// scale (input scale times the channel's weight scale) and the bias, the residual addend and the
// ReLU, all in fp32, and y stored once in its own dtype. The engine is the
// fastest of those cuDNN's heuristics offer for the shape, timed once on the call's own buffers;
// there is no other int8 path, so a shape without one is an error, not a quiet fall back to
// floating point.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_conv_timing.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"
#include "backend/engine_cache.hpp"
#include "core/log.hpp"

namespace cnnscale {

void cuda::ConvAlgorithms::conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq,
                                             const Tensor& scale, const Tensor& bias, const Tensor& addend,
                                             const Tensor& addend_scale, bool relu, const Tensor& y) {
  const char* op = "conv_forward_int8";
  cuda::expect_i8(op, "x", xq, b_.device_);
  cuda::expect_i8(op, "w", wq, b_.device_);
  if (y.dtype() == DType::I8) {
    cuda::expect_i8(op, "y", y, b_.device_);
    if (!relu) throw_runtime("{}: an int8 y follows a ReLU", op);
  } else {
    cuda::expect_float(op, "y", y, b_.device_);
  }
  cuda::expect_dtype(op, "scale", scale, DType::F32);
  cuda::expect_dtype(op, "bias", bias, DType::F32);
  const int64_t k = y.shape().c();
  cuda::expect_numel(op, "scale", scale, k);
  cuda::expect_numel(op, "bias", bias, k);
  if (addend.defined()) {
    // A floating-point addend is y's dtype, or the net's (any float) beside an int8 y.
    if (y.dtype() == DType::I8 && addend.dtype() != DType::I8)
      cuda::expect_float(op, "addend", addend, b_.device_);
    else if (addend.dtype() != DType::I8)
      cuda::expect_dtype(op, "addend", addend, y.dtype());
    cuda::expect_shape(op, "addend", addend, y.shape());
  }
  if (addend.defined() && (addend.dtype() == DType::I8 || y.dtype() == DType::I8) && !addend_scale.defined())
    throw_runtime("{}: an int8 addend, or any beside an int8 y, needs its scale", op);
  if (addend_scale.defined()) {
    if (!addend.defined()) throw_runtime("{}: an addend scale without an addend", op);
    cuda::expect_dtype(op, "addend_scale", addend_scale, DType::F32);
    cuda::expect_numel(op, "addend_scale", addend_scale, k);
  }
  for (const auto& [what, t] : {std::pair{"x", &xq}, {"w", &wq}, {"y", &y}})
    if (t->shape().rank() == 4 && t->layout() != Layout::NHWC)
      throw_runtime("{}: {} is {}; int8 convolutions run channels-last", op, what, layout_name(t->layout()));
  if (addend.defined() && addend.layout() != y.layout())
    throw_runtime("{}: the addend is {} but y is {}", op, layout_name(addend.layout()), layout_name(y.layout()));
  b_.activate();
  const std::string key =
      fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {}", xq.shape().to_string(), wq.shape().to_string(), p.stride_h,
                  p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups, dtype_name(y.dtype()),
                  addend.defined() ? dtype_name(addend.dtype()) : "-", addend_scale.defined(), relu);
  auto it = int8_conv_plans_.find(key);
  if (it == int8_conv_plans_.end())
    it = int8_conv_plans_.emplace(key, search_int8_conv(key, p, xq, wq, scale, bias, addend, addend_scale, relu, y))
             .first;
  const cuda::ConvGraphPlan& plan = *it->second;
  void* ws = b_.workspace(plan.workspace_bytes());
  const cudnnStatus_t st =
      plan.execute(b_.cudnn_, xq.raw(), wq.raw(), y.raw(), ws, bias.raw(), addend.defined() ? addend.raw() : nullptr,
                   scale.raw(), addend_scale.defined() ? addend_scale.raw() : nullptr);
  if (st != CUDNN_STATUS_SUCCESS) cuda::fail(st, "cudnnBackendExecute (int8 convolution)", __FILE__, __LINE__);
}

std::shared_ptr<cuda::ConvGraphPlan> cuda::ConvAlgorithms::search_int8_conv(
    const std::string& key, const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
    const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu, const Tensor& y) {
  const cuda::ConvGraphSpec spec = cuda::conv_int8_graph_spec(
      xq.shape(), wq.shape(), y.shape(), p, y.dtype(),
      addend.defined() ? std::optional<DType>(addend.dtype()) : std::nullopt, addend_scale.defined(), relu);
  void* z = addend.defined() ? addend.raw() : nullptr;
  void* z_scale = addend_scale.defined() ? addend_scale.raw() : nullptr;
  auto runs = [&](const cuda::ConvGraphPlan& plan, void* ws) {
    return cuda::ran(plan.execute(b_.cudnn_, xq.raw(), wq.raw(), y.raw(), ws, bias.raw(), z, scale.raw(), z_scale));
  };
  // A choice an earlier process measured on this GPU model: only its engine is compiled.
  EngineCache* cache = b_.options_.deterministic ? nullptr : EngineCache::from_environment();
  const std::string cache_key = cache ? engine_cache_key("int8 conv " + key) : std::string();
  if (cache)
    if (const auto hit = cache->find(cache_key)) {
      if (auto cached = cached_graph_plan(*hit, spec, runs)) {
        log::debug("int8 convolution {}: {} from the engine cache", key, *hit);
        return cached;
      }
      log::debug("int8 convolution {}: cached engine {} is not offered or did not run here; searching", key, *hit);
    }
  auto plans =
      cuda::conv_graph_plans(b_.cudnn_, spec, search_workspace_limit(), std::max(b_.options_.conv_graph_plans, 8));
  const std::string what =
      fmt::format("int8 convolution x {} w {} -> {} {}{}", xq.shape().to_string(), wq.shape().to_string(),
                  dtype_name(y.dtype()), y.shape().to_string(),
                  addend.defined() ? fmt::format(" + {} addend", dtype_name(addend.dtype())) : std::string());
  if (plans.empty())
    throw_runtime(
        "{}: cuDNN offers no engine for it on this GPU (int8 convolutions need channels-last operands "
        "whose channel counts are multiples of 4 or 16)",
        what);
  // Deterministic runs take the heuristics' first choice: no timing decides.
  if (b_.options_.deterministic) return std::move(plans.front());
  cuda::EventPair ev;
  std::shared_ptr<cuda::ConvGraphPlan> best;
  float best_ms = 0;
  std::string log_line;
  for (auto& candidate : plans) {
    cuda::SearchBuffer buf(std::max<size_t>(candidate->workspace_bytes(), size_t{1} << 20), b_.stream());
    if (buf.bytes() < candidate->workspace_bytes()) continue;
    auto run = [&] { return runs(*candidate, buf.ptr()); };
    if (!run()) continue;
    const float ms = cuda::median_run_ms(ev, b_.stream(), run);
    log_line += fmt::format(" [{} {:.3f} ms]", candidate->name(), ms);
    if (!best || ms < best_ms) {
      best_ms = ms;
      best = std::move(candidate);
    }
  }
  if (!best) throw_runtime("{}: none of cuDNN's {} engines for it ran", what, plans.size());
  log::debug("{}:{}; {} runs", what, log_line, best->name());
  if (cache) cache->put(cache_key, best->name());
  return best;
}

}  // namespace cnnscale
