// The lowered and width-lowered forms of a channels-last convolution: the copies they run on and
// the GEMMs or (R x 1) convolutions that follow. Which form runs is decided by the timed trials in
// cuda_conv.cpp.
#include <cstdint>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/width_lowering.hpp"

namespace cnnscale {
namespace {

// A lowered input bigger than this, or than kMaxLoweredGrowth times the input, is not tried: the
// GEMM would then mostly move the copies (ResNet's 3x3 convolutions, 9 times their input, are
// still timed; the gait nets' 7x7 conv1 over 50 channels, 40 times, is not).
constexpr size_t kMaxLoweredBytes = size_t{1} << 30;
constexpr int64_t kMaxLoweredGrowth = 16;
// Lowered rows are padded to this many elements (16 bytes in 16 bits), which cuBLASLt's
// tensor-core kernels want of every leading dimension.
constexpr int64_t kLoweredColumnQuantum = 8;

// The bytes of a channels-last tensor (NHWC activations, KRSC filters) as a row-major matrix, as the
// GEMMs of the lowered form take them (tagged NCHW: a 2-d matrix has no channels to reorder).
Tensor as_rows(const Tensor& t, int64_t rows, int64_t cols) {
  return t.reshape(Shape{rows, cols}).as_layout(Layout::NCHW);
}

// A receptive field's r*s*c values: the lowered row before its padding, and a KRSC filter row.
int64_t lowered_field(const ConvPlan& plan) {
  return plan.channels * plan.params.kernel_h * plan.params.kernel_w;
}

// The im2col kernel keeps three ints per lowered column in shared memory (48 KiB at most).
constexpr int64_t kMaxLoweredCols = 4096;
// A width-lowered input bigger than this, or than kMaxWidthLoweredGrowth times the input, is not
// tried. The gait nets' conv1 at batch 256 lowers to 0.58 GB in 16 bits and 1.17 GB in TF32 (7
// times the input); a full im2col there would be 40 times.
constexpr size_t kMaxWidthLoweredBytes = size_t{2} << 30;
constexpr int64_t kMaxWidthLoweredGrowth = 16;

}  // namespace

// ---- lowered convolutions ------------------------------------------------------------------------

// The lowered convolution (conv_lowering): whether `plan` may run lowered at all; its input
// lowered into staging slot 4, lowered_shape(plan) for GEMMs; its filter as (k, lowered columns)
// rows (a view of w, or a zero-padded copy in staging `slot`); the two directions.

Shape cuda::ConvEngine::lowered_shape(const ConvPlan& plan) {
  const int64_t q = kLoweredColumnQuantum, cols = (lowered_field(plan) + q - 1) / q * q;
  return Shape{plan.y_shape.n() * plan.y_shape.h() * plan.y_shape.w(), cols};
}

bool cuda::ConvEngine::lowerable(const ConvPlan& plan) const {
  if (b_.options_.conv_lowering == ConvLowering::Never) return false;
  if (b_.options_.conv_lowering == ConvLowering::Measured && b_.options_.deterministic) return false;  // no timing
  if (plan.layout != Layout::NHWC || plan.params.groups != 1 || plan.serves_width_lowering) return false;
  if (plan.dtype == DType::F32 && !b_.options_.allow_tf32) return false;  // strict fp32 stays on cuDNN
  const Shape lowered = lowered_shape(plan);
  if (lowered[1] > kMaxLoweredCols) return false;
  const int64_t elements = lowered.numel();
  return elements * static_cast<int64_t>(dtype_size(plan.dtype)) <= static_cast<int64_t>(kMaxLoweredBytes) &&
         elements <= kMaxLoweredGrowth * plan.x_shape.numel();
}

Tensor cuda::ConvEngine::lowered_or_kept(KeptForm form, const ConvPlan& plan, const Tensor& x, bool forward,
                                         const cuda::Im2colShape& g, const Tensor& into) {
  ConvFormState::KeptLowering& kept = forms_.kept[form];
  const Tensor& held = b_.staging_[kept.slot];
  const bool kept_slot = held.defined() && into.storage() == held.storage();
  // A trial counts on the kept lowering only where later steps will find it too (sole_user).
  if (!forward && (plan.sole_user || kept_slot) && kept.plan == &plan && kept.x == x.raw()) {
    CNNSCALE_CHECK(held.bytes() >= into.bytes(), "kept lowering in staging slot {} for {}", kept.slot,
                   into.shape().to_string());
    return Tensor(held.storage(), 0, into.shape(), into.dtype()).as_layout(into.layout());
  }
  cuda::launch_im2col_nhwc(plan.dtype, g, x.raw(), into.raw(), b_.stream());
  ++forms_.input_lowerings;
  if (kept_slot) {
    kept.plan = forward ? &plan : nullptr;
    kept.x = forward ? x.raw() : nullptr;
    ++kept.writes;
  }
  return into;
}

void cuda::ConvEngine::forward_begins(ConvPlan& plan) {
  for (ConvFormState::KeptLowering& kept : forms_.kept) {
    if (kept.plan == &plan) kept.plan = nullptr;
    plan.slot_writes_at_forward[&kept - forms_.kept.data()] = kept.writes;
  }
  ++plan.forwards_since_filter_gradient;
}

// The forward's lowering goes to staging slot 4, or in its timed trial to the trial's transient
// buffer (forms_.lowered_search_input); a filter gradient reads the forward's kept lowering of x where
// there is one, in its trial too (lowered_or_kept).
Tensor cuda::ConvEngine::lowered_input(const ConvPlan& plan, const Tensor& x, bool forward) {
  const Shape shape = lowered_shape(plan);
  const ConvParams& p = plan.params;
  cuda::Im2colShape g;
  g.n = plan.x_shape.n();
  g.c = plan.channels;
  g.h = plan.x_shape.h();
  g.w = plan.x_shape.w();
  g.r = p.kernel_h;
  g.s = p.kernel_w;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  g.pad_h = p.pad_h;
  g.pad_w = p.pad_w;
  g.dilation_h = p.dilation_h;
  g.dilation_w = p.dilation_w;
  g.oh = plan.y_shape.h();
  g.ow = plan.y_shape.w();
  g.cols = shape[1];
  const bool in_trial = forms_.lowered_search_plan == &plan && forms_.lowered_search_input.defined();
  const Tensor col = in_trial ? forms_.lowered_search_input
                              : b_.staging(forms_.kept[ConvFormState::kLoweredForm].slot, shape, plan.dtype);
  CNNSCALE_CHECK(col.shape() == shape && col.dtype() == plan.dtype, "lowered input {} for {}", col.shape().to_string(),
                 shape.to_string());
  return lowered_or_kept(ConvFormState::kLoweredForm, plan, x, forward, g, col);
}

Tensor cuda::ConvEngine::lowered_filter(const ConvPlan& plan, const Tensor& w, size_t slot) {
  const int64_t k = plan.w_shape.n(), field = lowered_field(plan), cols = lowered_shape(plan)[1];
  if (cols == field) return as_rows(w, k, cols);  // KRSC rows are the lowered rows already
  Tensor padded = b_.staging(slot, Shape{k, cols}, plan.dtype);
  cuda::launch_copy_rows(plan.dtype, k, w.raw(), field, padded.raw(), cols, b_.stream());
  return padded;
}

// y (n*oh*ow, k), which is y in NHWC, = lowered x (n*oh*ow, cols) times the filter rows (k, cols)
// transposed, with the bias and ReLU in the GEMM's epilogue.
void cuda::ConvEngine::run_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias,
                                           bool relu, const Tensor& y) {
  const Tensor col = lowered_input(plan, x, /*forward=*/true);
  // Slot 3: slots 0 and 1 may hold the padded operands of the cuDNN form, timed beside this one.
  const Tensor rows = lowered_filter(plan, w, 3);
  b_.linear_forward(col, rows, bias, relu, as_rows(y, col.shape()[0], plan.w_shape.n()));
}

// dw rows (k, cols) = dy (n*oh*ow, k) transposed times lowered x (n*oh*ow, cols), the zero columns
// past r*s*c cut off on the way into dw (KRSC).
void cuda::ConvEngine::run_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                                   const Tensor& dw) {
  const Tensor col = lowered_input(plan, x, /*forward=*/false);
  const int64_t k = plan.w_shape.n(), field = lowered_field(plan), cols = col.shape()[1];
  const Tensor dy_rows = as_rows(dy, col.shape()[0], k);
  if (cols == field) return b_.linear_backward_params(col, dy_rows, as_rows(dw, k, cols), Tensor());
  const Tensor dw_rows = b_.staging(2, Shape{k, cols}, plan.dtype);
  b_.linear_backward_params(col, dy_rows, dw_rows, Tensor());
  cuda::launch_copy_rows(plan.dtype, k, dw_rows.raw(), cols, dw.raw(), field, b_.stream());
}

// ---- width-lowered convolutions ------------------------------------------------------------------

// The width-lowered form (width_lowering): x lowered into staging slot 8, the filter's rows padded
// into slot 9; the forward (with the bias and ReLU where `bias` is given) and the filter gradient
// (through slot 9) run as plan.width_lowered's own convolutions, searched and formed as any.
// A forward's lowered input stays in slot 8 for the filter gradient of the same plan and x that
// follows it (forms_.kept): `forward` says which of the two asks.

bool cuda::ConvEngine::width_lowering_fits(const Shape& lowered_x, const Shape& x, DType dtype) {
  const int64_t elements = lowered_x.numel();
  return lowered_x.c() <= kMaxLoweredCols &&
         static_cast<size_t>(elements) * dtype_size(dtype) <= kMaxWidthLoweredBytes &&
         elements <= kMaxWidthLoweredGrowth * x.numel();
}

// Each image row of x as im2col lowers an image for a kernel one row high: output column q of row
// (n, h) gets the S kernel columns' C channels side by side, which is the width-lowered input
// (N, H, Q, Cl) channels-last (backend/width_lowering.hpp), zeros in the padding and past S*C.
// The filter gradient reuses what the forward of the same plan and x left in the kept slot, in its
// trial too; a forward in a trial lowers into the trial's transient slot, which keeps nothing
// (lowered_or_kept).
Tensor cuda::ConvEngine::width_lowered_input(const ConvPlan& plan, const Tensor& x, bool forward) {
  const ConvPlan& l = *plan.width_lowered;
  const ConvParams& p = plan.params;
  cuda::Im2colShape g;
  g.n = plan.x_shape.n() * plan.x_shape.h();
  g.c = plan.channels;
  g.h = 1;
  g.w = plan.x_shape.w();
  g.r = 1;
  g.s = p.kernel_w;
  g.stride_w = p.stride_w;
  g.pad_w = p.pad_w;
  g.dilation_w = p.dilation_w;
  g.oh = 1;
  g.ow = l.x_shape.w();
  g.cols = l.channels;
  return lowered_or_kept(
      ConvFormState::kWidthForm, plan, x, forward, g,
      b_.staging(forms_.kept[ConvFormState::kWidthForm].slot, l.x_shape, plan.dtype).as_layout(Layout::NHWC));
}

// The width-lowered filter's KRSC rows (k, r) are w's KRSC rows, S*C long, zero-padded to Cl.
void cuda::ConvEngine::run_width_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w,
                                                 const Tensor* bias, const Tensor& y) {
  const ConvPlan& l = *plan.width_lowered;
  const Tensor xl = width_lowered_input(plan, x, /*forward=*/true);
  const Tensor wl = b_.staging(9, l.w_shape, plan.dtype).as_layout(Layout::NHWC);
  cuda::launch_copy_rows(plan.dtype, plan.w_shape.n() * plan.params.kernel_h, w.raw(), plan.width_field, wl.raw(),
                         l.channels, b_.stream());
  if (bias)
    conv_forward_bias_relu(l.params, xl, wl, *bias, y);
  else
    conv_forward(l.params, xl, wl, y);
}

// The filter gradient of the (R x 1) convolution, its rows cut back from Cl to S*C into dw (KRSC).
void cuda::ConvEngine::run_width_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                                         const Tensor& dw) {
  const ConvPlan& l = *plan.width_lowered;
  const Tensor xl = width_lowered_input(plan, x, /*forward=*/false);
  const Tensor dwl = b_.staging(9, l.w_shape, plan.dtype).as_layout(Layout::NHWC);
  conv_backward_filter(l.params, xl, dy, dwl);
  cuda::launch_copy_rows(plan.dtype, plan.w_shape.n() * plan.params.kernel_h, dwl.raw(), l.channels, dw.raw(),
                         plan.width_field, b_.stream());
}

}  // namespace cnnscale
