// The convolution ops of cuda::ConvEngine and the forms a channels-last convolution may run in besides
// cuDNN on its operands as given: channel-padded, channels-first, lowered (im2col + GEMM) and
// width-lowered ((R x 1) over S*C channels). Each direction's form is decided at its first call by
// timed trials (cuda_conv_trials.hpp, their copies in transient buffers); the plans and what ran are
// in cuda_conv_plan.cpp, the searches of cuDNN's algorithms in cuda_conv_search.cpp, the lowered
// forms' copies and GEMMs in cuda_conv_lowered.cpp.
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
#include "backend/cuda/cuda_conv_trials.hpp"
#include "backend/width_lowering.hpp"
#include "core/log.hpp"

namespace cnnscale {

// The memory order one convolution call runs in: channels-last if any operand is. An operand of one
// pixel (a 1x1 filter, a 1x1 output) is the same bytes in both orders, so it may carry either tag.
static Layout conv_layout(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  const Layout l = conv_call_layout(a, b, c);
  for (const Tensor* t : {&a, &b, &c})
    if (t->layout() != l && t->shape().rank() == 4 && t->shape().h() * t->shape().w() > 1)
      throw_runtime("{} on cuda: operands {} {}, {} {} and {} {} mix memory orders", op, a.shape().to_string(),
                    layout_name(a.layout()), b.shape().to_string(), layout_name(b.layout()), c.shape().to_string(),
                    layout_name(c.layout()));
  return l;
}

// One direction of `plan` in its channels-first form (CudaBackendOptions::channels_first): inputs
// a and b reordered to NCHW, the direction run on plan.channels_first (searched by `find` at its
// first use, recorded in `algo`) into the NCHW copy of `out`, which is reordered back.
void cuda::ConvEngine::run_channels_first(ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, ConvCall find, ConvCall run,
                                          const ChannelsFirstOperand& a, const ChannelsFirstOperand& b,
                                          const ChannelsFirstOperand& out) {
  ConvPlan& first = *plan.channels_first;
  const Tensor at = reordered(a.slot, a.t, Layout::NCHW), bt = reordered(b.slot, b.t, Layout::NCHW);
  const Tensor outt = b_.staging(out.slot, out.t.shape(), out.t.dtype()).as_layout(Layout::NCHW);
  if ((first.*algo).algo < 0) (algos_.*find)(first, at, bt, outt);
  (algos_.*run)(first, at, bt, outt);
  reorder(outt, out.t);
}

// The forms nest, each decided at its first call: lowered, or else width-lowered, or else
// channels-first, or else cuDNN on the operands as given (channel-padded where that pays).
void cuda::ConvEngine::conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) {
  const ForwardOperands f =
      forward_operands(p, x, w, y, &ConvPlan::fwd_lowered, &ConvPlan::fwd_channels_first, &ConvPlan::fwd_width_lowered);
  auto cudnn = [&] {
    run_faster_order(
        "conv_forward", *f.given, &ConvPlan::fwd_channels_first, [&] { algos_.run_conv_forward(*f.plan, f.x, f.w, y); },
        [&] {
          run_channels_first(*f.given, &ConvPlan::fwd, &cuda::ConvAlgorithms::find_conv_forward,
                             &cuda::ConvAlgorithms::run_conv_forward, {x, 5}, {w, 6}, {y, 7});
        });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_forward", *f.given, &ConvPlan::fwd_width_lowered, cudnn,
                     [&] { run_width_lowered_forward(*f.given, x, w, nullptr, y); });
  };
  run_faster_form("conv_forward", *f.given, &ConvPlan::fwd_lowered, width_or_cudnn,
                  [&] { run_lowered_forward(*f.given, x, w, Tensor(), false, y); });
}

void cuda::ConvEngine::prime_switched_forward(const Tensor& x) {
  const ConvFormState::SwitchedForward f = std::exchange(forms_.switched_forward, {});
  ConvPlan& plan = *f.plan;
  const bool bias_relu =
      f.decision == &ConvPlan::fwd_bias_relu_lowered || f.decision == &ConvPlan::fwd_bias_relu_width_lowered;
  const size_t size = dtype_size(plan.dtype);
  const int64_t k = plan.y_shape.c();
  // SearchBuffer asks for at least 1 MiB and may get less than asked: then the next forward makes
  // what the form keeps, as any first call does.
  auto bytes = [&](int64_t n) { return std::max(static_cast<size_t>(n) * size, size_t{1} << 20); };
  SearchBuffer wb(bytes(plan.w_shape.numel()), b_.stream()), yb(bytes(plan.y_shape.numel()), b_.stream()),
      bb(bytes(k), b_.stream());
  auto undo = [&](const std::string& why) {
    log::debug("x {} w {}: the forward keeps its form ({})", plan.x_shape.to_string(), plan.w_shape.to_string(), why);
    plan.*f.decision = ConvPlan::Choice::No;
    plan.*f.filter_decision = f.filter_alone ? ConvPlan::Choice::Yes : ConvPlan::Choice::No;
  };
  if (wb.bytes() < bytes(plan.w_shape.numel()) || yb.bytes() < bytes(plan.y_shape.numel()) || bb.bytes() < bytes(k))
    return undo("no scratch memory to run it ahead");
  auto scratch = [&](const SearchBuffer& b, const Shape& shape) {
    CUDA_CHECK(cudaMemsetAsync(b.ptr(), 0, b.bytes(), b_.stream()));
    return Tensor(std::make_shared<Storage>(b.ptr(), b.bytes(), b_.device(), nullptr), 0, shape, plan.dtype);
  };
  try {
    const Tensor w = scratch(wb, plan.w_shape).as_layout(plan.layout);
    const Tensor y = scratch(yb, plan.y_shape).as_layout(plan.layout);
    if (bias_relu)
      conv_forward_bias_relu(plan.params, x, w, scratch(bb, Shape{k}), y);
    else
      conv_forward(plan.params, x, w, y);
    --plan.forwards_since_filter_gradient;  // not a layer's forward
  } catch (const RuntimeError& e) {
    undo(e.what());
  }
}

ForwardOperands cuda::ConvEngine::forward_operands(const ConvParams& p, const Tensor& x, const Tensor& w,
                                                   const Tensor& y, ConvPlan::Choice ConvPlan::*lowered,
                                                   ConvPlan::Choice ConvPlan::*first,
                                                   ConvPlan::Choice ConvPlan::*width) {
  cuda::expect_float("conv_forward", "x", x, b_.device_);
  cuda::expect_float("conv_forward", "w", w, b_.device_);
  cuda::expect_float("conv_forward", "y", y, b_.device_);
  cuda::expect_dtype("conv_forward", "w", w, x.dtype());
  cuda::expect_dtype("conv_forward", "y", y, x.dtype());
  b_.activate();
  ConvPlan& plan = conv_plan("conv_forward", p, x.shape(), w.shape(), x.dtype(), conv_layout("conv_forward", x, w, y));
  cuda::expect_shape("conv_forward", "y", y, plan.y_shape);
  forward_begins(plan);  // this forward may not lower x again
  // Running lowered, channels-first or width-lowered: those forms read x and w as given, so no
  // padded copies are made.
  if (plan.*lowered == ConvPlan::Choice::Yes || plan.*first == ConvPlan::Choice::Yes ||
      plan.*width == ConvPlan::Choice::Yes)
    return {&plan, x, w, &plan};
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor xp, wp;
  auto pad = [&] {
    if (xp.defined()) return;
    xp = with_channels(0, x, c);
    wp = with_channels(1, w, c);
  };
  if (!runs_padded(
          "conv_forward", plan, &ConvPlan::fwd, &ConvPlan::fwd_padded, [&] { algos_.find_conv_forward(plan, x, w, y); },
          [&] {
            pad();
            algos_.find_conv_forward(*plan.padded, xp, wp, y);
          }))
    return {&plan, x, w, &plan};
  pad();
  return {plan.padded, xp, wp, &plan};
}

// The fused plan runs where cuDNN's graph API has one for the shape and it measured faster than
// the convolution's own choice followed by the bias and ReLU kernels; otherwise those three run, as
// on every backend. Strict fp32 (no tensor-core engines) and deterministic runs (no timing) keep
// the three ops.
void cuda::ConvEngine::conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                              const Tensor& y) {
  cuda::expect_float("conv_forward_bias_relu", "bias", bias, b_.device_);
  cuda::expect_dtype("conv_forward_bias_relu", "bias", bias, x.dtype());
  cuda::expect_numel("conv_forward_bias_relu", "bias", bias, y.shape().c());
  const ForwardOperands f =
      forward_operands(p, x, w, y, &ConvPlan::fwd_bias_relu_lowered, &ConvPlan::fwd_bias_relu_channels_first,
                       &ConvPlan::fwd_bias_relu_width_lowered);
  ConvPlan& plan = *f.plan;
  if (!plan.fwd_bias_relu_searched && f.given->fwd_bias_relu_lowered != ConvPlan::Choice::Yes &&
      f.given->fwd_bias_relu_channels_first != ConvPlan::Choice::Yes &&
      f.given->fwd_bias_relu_width_lowered != ConvPlan::Choice::Yes)
    algos_.search_bias_relu(plan, f.x, f.w, bias, y);
  auto cudnn = [&] {
    if (plan.fwd_bias_relu) {
      void* ws = b_.workspace(plan.fwd_bias_relu->workspace_bytes());
      const cudnnStatus_t st = plan.fwd_bias_relu->execute(b_.cudnn_, f.x.raw(), f.w.raw(), y.raw(), ws, bias.raw());
      if (st == CUDNN_STATUS_SUCCESS) return;
      // Misaligned views: the three ops below. Anything else is an error.
      if (st != CUDNN_STATUS_BAD_PARAM) cuda::fail(st, "cudnnBackendExecute (fused convolution)", __FILE__, __LINE__);
    }
    algos_.run_conv_forward(plan, f.x, f.w, y);
    b_.bias_add(bias, y);
    b_.relu_forward(y, y);
  };
  auto cudnn_in_faster_order = [&] {
    run_faster_order("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_channels_first, cudnn, [&] {
      run_channels_first(*f.given, &ConvPlan::fwd, &cuda::ConvAlgorithms::find_conv_forward,
                         &cuda::ConvAlgorithms::run_conv_forward, {x, 5}, {w, 6}, {y, 7});
      b_.bias_add(bias, y);
      b_.relu_forward(y, y);
    });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_width_lowered, cudnn_in_faster_order,
                     [&] { run_width_lowered_forward(*f.given, x, w, &bias, y); });
  };
  run_faster_form("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_lowered, width_or_cudnn,
                  [&] { run_lowered_forward(*f.given, x, w, bias, true, y); });
}

// The operands of a fused forward (conv_forward_bias, conv_forward_residual) checked, and its plan.
ConvPlan& cuda::ConvEngine::fused_forward_plan(const char* op, const ConvParams& p, const Tensor& x, const Tensor& w,
                                               const Tensor& bias, const Tensor* addend, const Tensor& y) {
  cuda::expect_float(op, "x", x, b_.device_);
  cuda::expect_float(op, "bias", bias, b_.device_);
  cuda::expect_dtype(op, "bias", bias, x.dtype());
  cuda::expect_numel(op, "bias", bias, y.shape().c());
  if (addend) {
    cuda::expect_float(op, "addend", *addend, b_.device_);
    cuda::expect_dtype(op, "addend", *addend, y.dtype());
    cuda::expect_shape(op, "addend", *addend, y.shape());
    if (addend->layout() != y.layout())
      throw_runtime("{}: the addend is {} but y is {}", op, layout_name(addend->layout()), layout_name(y.layout()));
  }
  b_.activate();
  return conv_plan(op, p, x.shape(), w.shape(), x.dtype(), conv_layout("conv_forward", x, w, y));
}

// Runs `fused` where a search found one faster; false where the ops apart must run (none found, or
// misaligned views). Anything but BAD_PARAM from cuDNN is an error.
bool cuda::ConvEngine::run_fused_plan(const char* op, const std::shared_ptr<cuda::ConvGraphPlan>& fused,
                                      const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor* addend,
                                      const Tensor& y) {
  if (!fused) return false;
  void* ws = b_.workspace(fused->workspace_bytes());
  const cudnnStatus_t st =
      fused->execute(b_.cudnn_, x.raw(), w.raw(), y.raw(), ws, bias.raw(), addend ? addend->raw() : nullptr);
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (st != CUDNN_STATUS_BAD_PARAM)
    cuda::fail(st, fmt::format("cudnnBackendExecute ({})", op).c_str(), __FILE__, __LINE__);
  return false;
}

void cuda::ConvEngine::conv_forward_residual(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                             const Tensor& addend, const Tensor& y) {
  ConvPlan& plan = fused_forward_plan("conv_forward_residual", p, x, w, bias, &addend, y);
  if (!plan.fwd_residual_searched) algos_.search_residual(plan, p, x, w, bias, addend, y);
  if (run_fused_plan("conv_forward_residual", plan.fwd_residual, x, w, bias, &addend, y)) return;
  conv_forward(p, x, w, y);
  b_.bias_add(bias, y);
  b_.axpby(1.0f, addend, 1.0f, y);
  b_.relu_forward(y, y);
}

void cuda::ConvEngine::conv_forward_bias(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                         const Tensor& y) {
  ConvPlan& plan = fused_forward_plan("conv_forward_bias", p, x, w, bias, nullptr, y);
  if (!plan.fwd_bias_searched) algos_.search_bias(plan, p, x, w, bias, y);
  if (run_fused_plan("conv_forward_bias", plan.fwd_bias, x, w, bias, nullptr, y)) return;
  conv_forward(p, x, w, y);
  b_.bias_add(bias, y);
}

void cuda::ConvEngine::conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  cuda::expect_float("conv_backward_data", "w", w, b_.device_);
  cuda::expect_float("conv_backward_data", "dy", dy, b_.device_);
  cuda::expect_float("conv_backward_data", "dx", dx, b_.device_);
  cuda::expect_dtype("conv_backward_data", "dy", dy, w.dtype());
  cuda::expect_dtype("conv_backward_data", "dx", dx, w.dtype());
  b_.activate();
  ConvPlan& plan = conv_plan("conv_backward_data", p, dx.shape(), w.shape(), w.dtype(),
                             conv_layout("conv_backward_data", dx, w, dy));
  cuda::expect_shape("conv_backward_data", "dy", dy, plan.y_shape);
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor wp, dxp;
  auto pad = [&] {
    if (wp.defined()) return;
    wp = with_channels(1, w, c);
    dxp = channels_staging(2, dx, c);
  };
  const bool padded = runs_padded(
      "conv_backward_data", plan, &ConvPlan::bwd_data, &ConvPlan::bwd_data_padded,
      [&] { algos_.find_conv_backward_data(plan, w, dy, dx); },
      [&] {
        pad();
        algos_.find_conv_backward_data(*plan.padded, wp, dy, dxp);
      });
  auto cudnn = [&] {
    if (!padded) return algos_.run_conv_backward_data(plan, w, dy, dx);
    pad();
    algos_.run_conv_backward_data(*plan.padded, wp, dy, dxp);
    unpad_channels(dxp, dx);
  };
  run_faster_order("conv_backward_data", plan, &ConvPlan::bwd_data_channels_first, cudnn, [&] {
    run_channels_first(plan, &ConvPlan::bwd_data, &cuda::ConvAlgorithms::find_conv_backward_data,
                       &cuda::ConvAlgorithms::run_conv_backward_data, {w, 6}, {dy, 7}, {dx, 5});
  });
}

// Adds in place with the algorithm conv_backward_data chose, where that algorithm runs on the
// operands themselves (not on padded or reordered copies) and can add; otherwise the gradient is
// formed in the scratch and added after. The first call first runs conv_backward_data on the
// scratch, which makes its choices (timing candidates on its output) and whose result is dropped
// where adding in place works: every call then adds the same way, so a step's bits do not depend on
// whether it was the process's first (a resumed run's). That call also builds the adding plan and
// sizes its workspace, so a step captured as a CUDA graph after one uncaptured step builds and
// allocates nothing while captured.
void cuda::ConvEngine::conv_backward_data_add(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                                              const Tensor& scratch) {
  cuda::expect_float("conv_backward_data_add", "dx", dx, b_.device_);
  cuda::expect_dtype("conv_backward_data_add", "dx", dx, w.dtype());
  check_add_scratch(b_.name(), dx, scratch);
  b_.activate();
  ConvPlan& plan = conv_plan("conv_backward_data_add", p, dx.shape(), w.shape(), w.dtype(),
                             conv_layout("conv_backward_data_add", dx, w, dy));
  const bool first = plan.bwd_data_adds == ConvPlan::Adds::Never;
  if (first) conv_backward_data(p, w, dy, scratch);  // makes the choices read below
  const bool on_operands = plan.bwd_data.algo >= 0 && !plan.bwd_data_padded &&
                           plan.bwd_data_channels_first == ConvPlan::Choice::No && dy.shape() == plan.y_shape;
  if (on_operands && algos_.run_conv_backward_data_add(plan, w, dy, dx)) {
    plan.bwd_data_adds = ConvPlan::Adds::InPlace;
    return;
  }
  if (!first) conv_backward_data(p, w, dy, scratch);
  b_.axpby(1.0f, scratch, 1.0f, dx);
  plan.bwd_data_adds = ConvPlan::Adds::ThroughScratch;
}

void cuda::ConvEngine::conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  cuda::expect_float("conv_backward_filter", "x", x, b_.device_);
  cuda::expect_float("conv_backward_filter", "dy", dy, b_.device_);
  cuda::expect_float("conv_backward_filter", "dw", dw, b_.device_);
  cuda::expect_dtype("conv_backward_filter", "dy", dy, x.dtype());
  cuda::expect_dtype("conv_backward_filter", "dw", dw, x.dtype());
  b_.activate();
  ConvPlan& plan = conv_plan("conv_backward_filter", p, x.shape(), dw.shape(), x.dtype(),
                             conv_layout("conv_backward_filter", x, dw, dy));
  plan.sole_user = std::exchange(plan.forwards_since_filter_gradient, 0) <= 1;
  cuda::expect_shape("conv_backward_filter", "dy", dy, plan.y_shape);
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor xp, dwp;
  auto pad = [&] {
    if (xp.defined()) return;
    xp = with_channels(0, x, c);
    dwp = channels_staging(2, dw, c);
  };
  const bool padded = runs_padded(
      "conv_backward_filter", plan, &ConvPlan::bwd_filter, &ConvPlan::bwd_filter_padded,
      [&] { algos_.find_conv_backward_filter(plan, x, dy, dw); },
      [&] {
        pad();
        algos_.find_conv_backward_filter(*plan.padded, xp, dy, dwp);
      });
  auto cudnn = [&] {
    if (!padded) return algos_.run_conv_backward_filter(plan, x, dy, dw);
    pad();
    algos_.run_conv_backward_filter(*plan.padded, xp, dy, dwp);
    unpad_channels(dwp, dw);
  };
  auto cudnn_in_faster_order = [&] {
    run_faster_order("conv_backward_filter", plan, &ConvPlan::bwd_filter_channels_first, cudnn, [&] {
      run_channels_first(plan, &ConvPlan::bwd_filter, &cuda::ConvAlgorithms::find_conv_backward_filter,
                         &cuda::ConvAlgorithms::run_conv_backward_filter, {x, 5}, {dy, 7}, {dw, 6});
    });
  };
  auto width_or_cudnn = [&] {
    run_faster_width(
        "conv_backward_filter", plan, &ConvPlan::bwd_filter_width_lowered, cudnn_in_faster_order,
        [&] { run_width_lowered_backward_filter(plan, x, dy, dw); },
        [&] { width_lowered_input(plan, x, /*forward=*/true); });
  };
  run_faster_form(
      "conv_backward_filter", plan, &ConvPlan::bwd_filter_lowered, width_or_cudnn,
      [&] { run_lowered_backward_filter(plan, x, dy, dw); }, [&] { lowered_input(plan, x, /*forward=*/true); });
  // Not in the nested call of a width-lowered plan: this call's own staging is done with here.
  if (forms_.switched_forward.plan == &plan) prime_switched_forward(x);
}

}  // namespace cnnscale
