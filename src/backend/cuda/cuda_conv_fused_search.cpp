// cuDNN graph-API plans that fuse a convolution forward with its epilogue (bias, bias + ReLU,
// bias + residual addend + ReLU): each searched, or read from the engine cache, and kept only where
// it measures faster than the same function as separate ops (faster_fused_plan). The searches of
// the unfused directions are in cuda_conv_search.cpp.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_conv_timing.hpp"
#include "backend/engine_cache.hpp"
#include "core/log.hpp"

namespace cnnscale {

using cuda::EventPair;
using cuda::median_run_ms;
using cuda::ran;
using cuda::SearchBuffer;

void cuda::ConvAlgorithms::search_bias_relu(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias,
                                            const Tensor& y) {
  plan.fwd_bias_relu_searched = true;
  plan.fwd_bias_relu = faster_fused_plan(
      "conv_forward_bias_relu", plan, cuda::conv_bias_relu_graph_spec,
      [&] {
        run_conv_forward(plan, x, w, y);
        b_.bias_add(bias, y);
        b_.relu_forward(y, y);
      },
      {x, w, bias, nullptr, y});
}

void cuda::ConvAlgorithms::search_residual(ConvPlan& plan, const ConvParams& p, const Tensor& x, const Tensor& w,
                                           const Tensor& bias, const Tensor& addend, const Tensor& y) {
  plan.fwd_residual_searched = true;
  plan.fwd_residual = faster_fused_plan(
      "conv_forward_residual", plan, cuda::conv_residual_graph_spec,
      // The ops apart as they would run: conv_forward makes its own choices in the first, untimed run.
      [&] {
        engine_.conv_forward(p, x, w, y);
        b_.bias_add(bias, y);
        b_.axpby(1.0f, addend, 1.0f, y);
        b_.relu_forward(y, y);
      },
      {x, w, bias, &addend, y});
}

void cuda::ConvAlgorithms::search_bias(ConvPlan& plan, const ConvParams& p, const Tensor& x, const Tensor& w,
                                       const Tensor& bias, const Tensor& y) {
  plan.fwd_bias_searched = true;
  plan.fwd_bias = faster_fused_plan(
      "conv_forward_bias", plan, cuda::conv_bias_graph_spec,
      [&] {
        engine_.conv_forward(p, x, w, y);
        b_.bias_add(bias, y);
      },
      {x, w, bias, nullptr, y});
}

// The fastest of the graph plans the API offers for the spec that `fused_spec` makes of `plan` (run
// on `operands` with a workspace), where it measures faster than `apart`, the same function as
// separate ops; null otherwise, and always in deterministic or strict-fp32 runs (no timing, no
// tensor-core engines).
std::shared_ptr<cuda::ConvGraphPlan> cuda::ConvAlgorithms::faster_fused_plan(const char* op, const ConvPlan& plan,
                                                                             FusedSpec fused_spec,
                                                                             const std::function<void()>& apart,
                                                                             const FusedOperands& operands) {
  const cuda::ConvGraphSpec spec = fused_spec(plan.dtype, plan.layout, plan.x_shape, plan.w_shape, plan.y_shape,
                                              plan.params, b_.options_.allow_tf32);
  auto execute = [&](const cuda::ConvGraphPlan& candidate, void* ws) {
    return candidate.execute(b_.cudnn_, operands.x.raw(), operands.w.raw(), operands.y.raw(), ws,
                             operands.bias.raw(), operands.addend ? operands.addend->raw() : nullptr);
  };
  if (b_.options_.deterministic || b_.options_.conv_graph_plans <= 0 ||
      (plan.dtype == DType::F32 && !b_.options_.allow_tf32))
    return nullptr;
  // An earlier process's verdict on this GPU model: the ops apart, or the one engine to compile.
  EngineCache* cache = EngineCache::from_environment();
  const std::string cache_key = cache ? engine_cache_key(conv_cache_text(op, plan)) : std::string();
  if (cache)
    if (const auto hit = cache->find(cache_key)) {
      if (*hit == kEngineCacheApart) return nullptr;
      if (auto cached = cached_graph_plan(
              *hit, spec, [&](const cuda::ConvGraphPlan& p, void* ws) { return ran(execute(p, ws)); })) {
        log::debug("{} x {} w {}: fused plan {} from the engine cache", op, plan.x_shape.to_string(),
                   plan.w_shape.to_string(), *hit);
        return cached;
      }
    }
  auto plans = cuda::conv_graph_plans(b_.cudnn_, spec, search_workspace_limit(), b_.options_.conv_graph_plans);
  if (plans.empty()) {
    log::debug("{} x {} w {}: the graph API offers no fused plan", op, plan.x_shape.to_string(),
               plan.w_shape.to_string());
    if (cache) cache->put(cache_key, kEngineCacheApart);
    return nullptr;
  }
  EventPair ev;
  // The median of timed runs after one untimed run that loads the kernels; negative if one failed.
  auto median_ms = [&](auto&& run) { return run() ? median_run_ms(ev, b_.stream(), run) : -1.0f; };
  const float apart_ms = median_ms([&] {
    apart();
    return true;
  });
  std::string log_line;
  float best_ms = apart_ms;
  std::shared_ptr<cuda::ConvGraphPlan> best;
  for (auto& candidate : plans) {
    SearchBuffer buf(std::max<size_t>(candidate->workspace_bytes(), size_t{1} << 20), b_.stream());
    if (buf.bytes() < candidate->workspace_bytes()) continue;
    const float ms = median_ms([&] { return ran(execute(*candidate, buf.ptr())); });
    if (ms < 0.0f) continue;
    log_line += fmt::format(" [{} {:.3f} ms]", candidate->name(), ms);
    if (ms < best_ms) {
      best_ms = ms;
      best = std::move(candidate);
    }
  }
  log::debug("{} x {} w {}: apart {:.3f} ms, fused plans:{}; {}", op, plan.x_shape.to_string(),
             plan.w_shape.to_string(), apart_ms, log_line.empty() ? " none ran" : log_line,
             best ? "fused plan " + best->name() + " runs" : std::string("ops apart run"));
  if (cache) cache->put(cache_key, best ? best->name() : std::string(kEngineCacheApart));
  return best;
}

}  // namespace cnnscale
