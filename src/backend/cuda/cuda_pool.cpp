// Max/average pooling on CUDA with Caffe's semantics. cuDNN runs every shape where Caffe's output
// size equals cuDNN's floor rule (CaffeNet's 55->27->13->6, global pooling, all floor-mode
// shapes). In Caffe's ceil mode the output can have one more row/column whose window hangs past
// the bottom/right padding: that is asymmetric padding, which cuDNN's pooling descriptor cannot
// express, and Caffe's average divisor (window clipped at H + pad) differs from both of cuDNN's
// average modes there. Those shapes run cnnscale's kernels (cuda_pool_kernels.cu), in either memory
// order, as does every channels-last max-pooling backward (see pool_backward). Both paths take f32,
// bf16 or f16 (one dtype per call).
#include <utility>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"

namespace cnnscale {
namespace {

int64_t floor_pool_dim(int64_t in, int kernel, int stride, int pad) { return (in + 2 * pad - kernel) / stride + 1; }

// Validates p, x and y against Caffe's shape rule; returns the expected y shape.
Shape checked_pool_shape(const char* op, const PoolParams& p, const Tensor& x) {
  if (x.shape().rank() != 4) throw_runtime("{} on cuda: x {} must be (N, C, H, W)", op, x.shape().to_string());
  if (p.kernel_h < 1 || p.kernel_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 || p.pad_w < 0 ||
      p.pad_h >= p.kernel_h || p.pad_w >= p.kernel_w || p.kernel_h > x.shape().h() + 2 * p.pad_h ||
      p.kernel_w > x.shape().w() + 2 * p.pad_w)
    throw_runtime("{} on cuda: kernel {}x{} stride {}x{} pad {}x{} invalid for x {} (Caffe needs pad < kernel)", op,
                  p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, x.shape().to_string());
  return Shape{x.shape().n(), x.shape().c(),
               pool_output_dim(x.shape().h(), p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
               pool_output_dim(x.shape().w(), p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode)};
}

cuda::PoolGeometry geometry(const PoolParams& p, const Shape& x, const Shape& y, Layout layout) {
  cuda::PoolGeometry g;
  g.planes = x.n() * x.c();
  g.channels = cuda::to_int_dim(x.c(), "pool");
  g.channels_last = layout == Layout::NHWC;
  g.height = cuda::to_int_dim(x.h(), "pool");
  g.width = cuda::to_int_dim(x.w(), "pool");
  g.pooled_height = cuda::to_int_dim(y.h(), "pool");
  g.pooled_width = cuda::to_int_dim(y.w(), "pool");
  g.kernel_h = p.kernel_h;
  g.kernel_w = p.kernel_w;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  g.pad_h = p.pad_h;
  g.pad_w = p.pad_w;
  return g;
}

}  // namespace

bool cuda::Pooling::cudnn_can_pool(const PoolParams& p, const Shape& x) {
  return pool_output_dim(x.h(), p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode) ==
             floor_pool_dim(x.h(), p.kernel_h, p.stride_h, p.pad_h) &&
         pool_output_dim(x.w(), p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode) ==
             floor_pool_dim(x.w(), p.kernel_w, p.stride_w, p.pad_w);
}

// With floor-sized output no window passes the padded extent, so Caffe's average divisor is
// always kernel_h * kernel_w: cuDNN's COUNT_INCLUDE_PADDING. Max pooling ignores padding in both.
static cudnnPoolingMode_t cudnn_pool_mode(const PoolParams& p, bool deterministic) {
  if (p.mode == PoolMode::Average) return CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  return deterministic ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_MAX;
}

// Without it, ResNet's pool1 backward spent most of its time finding every window's argmax again
// from x, which the forward has at hand (docs/measurements/2026-11-25-cuda-kernel-choices.md).
int64_t cuda::Pooling::pool_saved_bytes(const PoolParams& p, const Shape& shape, DType dtype, Layout layout) const {
  if (p.mode != PoolMode::Max || layout != Layout::NHWC || shape.rank() != 4 || dtype_size(dtype) > 4) return 0;
  const Shape ys{shape.n(), shape.c(), pool_output_dim(shape.h(), p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
                 pool_output_dim(shape.w(), p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode)};
  if (ys.numel() <= 0 || !cuda::max_pool_gathers_argmax(geometry(p, shape, ys, layout), dtype)) return 0;
  return ys.numel();
}

// The argmax bytes in `saved` for a pooling of x into y, or null where there are none to use (none
// saved for this shape, or `saved` too small or misaligned for them): a forward writes them and its
// backward reads them under the same test, so a backward never reads bytes its forward did not
// write (the backward's own packed-kernel test includes the forward's).
static uint8_t* saved_argmax(const cuda::Pooling& b, const PoolParams& p, const Tensor& x, const Tensor& y,
                             const Tensor& saved) {
  if (!saved.defined()) return nullptr;
  const int64_t bytes = b.pool_saved_bytes(p, x.shape(), x.dtype(), x.layout());
  // 8-byte aligned: the 16-bit kernels move a pack's 8 argmax bytes as one word.
  if (bytes == 0 || y.layout() != Layout::NHWC || static_cast<int64_t>(saved.bytes()) < bytes ||
      reinterpret_cast<uintptr_t>(saved.raw()) % 8 != 0)
    return nullptr;
  return static_cast<uint8_t*>(saved.raw());
}

void cuda::Pooling::pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& saved) {
  cuda::expect_float("pool_forward", "x", x, b_.device_);
  cuda::expect_float("pool_forward", "y", y, b_.device_);
  cuda::expect_dtype("pool_forward", "y", y, x.dtype());
  Shape ys = checked_pool_shape("pool_forward", p, x);
  cuda::expect_shape("pool_forward", "y", y, ys);
  if (y.numel() == 0) return;
  b_.activate();
  // Channels-last max pooling runs cnnscale's packed kernel where the channels allow 16-byte packs:
  // cuDNN's read its input at about a third of the memory bandwidth
  // (docs/measurements/2026-11-25-cuda-kernel-choices.md).
  if (x.layout() == Layout::NHWC && p.mode == PoolMode::Max && y.layout() == Layout::NHWC &&
      cuda::launch_max_pool_forward_nhwc(geometry(p, x.shape(), ys, x.layout()), x.dtype(), x.raw(), y.raw(),
                                         b_.stream(), saved_argmax(*this, p, x, y, saved)))
    return;
  if (!cudnn_can_pool(p, x.shape())) {
    cuda::expect_layout("pool_forward", "y", y, x.layout());
    cuda::PoolGeometry g = geometry(p, x.shape(), ys, x.layout());
    if (p.mode == PoolMode::Max)
      cuda::launch_caffe_max_pool_forward(g, x.dtype(), x.raw(), y.raw(), b_.stream());
    else
      cuda::launch_caffe_avg_pool_forward(g, x.dtype(), x.raw(), y.raw(), b_.stream());
    return;
  }
  CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_desc_, cudnn_pool_mode(p, b_.options_.deterministic),
                                          CUDNN_NOT_PROPAGATE_NAN, p.kernel_h, p.kernel_w, p.pad_h, p.pad_w, p.stride_h,
                                          p.stride_w));
  cuda::set_desc(b_.desc_a_, x, "pool_forward");
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_desc_, b_.desc_a_, &n, &c, &h, &w));
  if (Shape{n, c, h, w} != ys)
    throw_runtime("pool_forward on cuda: cuDNN output ({}, {}, {}, {}) differs from Caffe's {} for x {}", n, c, h, w,
                  ys.to_string(), x.shape().to_string());
  cuda::set_desc(b_.desc_b_, y, "pool_forward");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingForward(b_.cudnn_, pool_desc_, &one, b_.desc_a_, x.raw(), &zero, b_.desc_b_, y.raw()));
}

void cuda::Pooling::pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                                  const Tensor& dx, const Tensor& saved) {
  cuda::expect_float("pool_backward", "x", x, b_.device_);
  cuda::expect_float("pool_backward", "y", y, b_.device_);
  cuda::expect_float("pool_backward", "dy", dy, b_.device_);
  cuda::expect_float("pool_backward", "dx", dx, b_.device_);
  for (const auto& [what, t] : {std::pair{"y", &y}, {"dy", &dy}, {"dx", &dx}})
    cuda::expect_dtype("pool_backward", what, *t, x.dtype());
  Shape ys = checked_pool_shape("pool_backward", p, x);
  cuda::expect_shape("pool_backward", "y", y, ys);
  cuda::expect_shape("pool_backward", "dy", dy, ys);
  cuda::expect_shape("pool_backward", "dx", dx, x.shape());
  if (dx.numel() == 0) return;
  b_.activate();
  // Channels-last max pooling backward always runs cnnscale's gather kernel: cuDNN's took about ten
  // times its traffic's time (docs/measurements/2026-11-25-cuda-kernel-choices.md);
  // the gather also routes ties exactly as the CPU does.
  if (!cudnn_can_pool(p, x.shape()) || (x.layout() == Layout::NHWC && p.mode == PoolMode::Max)) {
    for (const auto& [what, t] : {std::pair{"y", &y}, {"dy", &dy}, {"dx", &dx}})
      cuda::expect_layout("pool_backward", what, *t, x.layout());
    cuda::PoolGeometry g = geometry(p, x.shape(), ys, x.layout());
    // Argmax bytes where the backward gathers (max_pool_gathers_argmax): the forward's where it
    // saved them, else scratch for the two-pass kernels.
    uint8_t* const kept = p.mode == PoolMode::Max ? saved_argmax(*this, p, x, y, saved) : nullptr;
    if (p.mode == PoolMode::Max)
      cuda::launch_caffe_max_pool_backward(
          g, x.dtype(), x.raw(), y.raw(), dy.raw(), dx.raw(), b_.stream(),
          kept ? kept
          : cuda::max_pool_gathers_argmax(g, x.dtype())
              ? static_cast<uint8_t*>(b_.staging(3, Shape{(ys.numel() + 3) / 4}, DType::I32).raw())
              : nullptr,
          kept != nullptr);
    else
      cuda::launch_caffe_avg_pool_backward(g, x.dtype(), dy.raw(), dx.raw(), b_.stream());
    return;
  }
  CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_desc_, cudnn_pool_mode(p, b_.options_.deterministic),
                                          CUDNN_NOT_PROPAGATE_NAN, p.kernel_h, p.kernel_w, p.pad_h, p.pad_w, p.stride_h,
                                          p.stride_w));
  cuda::expect_layout("pool_backward", "dx", dx, x.layout());
  cuda::expect_layout("pool_backward", "dy", dy, y.layout());
  cuda::set_desc(b_.desc_a_, x, "pool_backward");
  cuda::set_desc(b_.desc_b_, y, "pool_backward");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingBackward(b_.cudnn_, pool_desc_, &one, b_.desc_b_, y.raw(), b_.desc_b_, dy.raw(), b_.desc_a_,
                                   x.raw(), &zero, b_.desc_a_, dx.raw()));
}

}  // namespace cnnscale
