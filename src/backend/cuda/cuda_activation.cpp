// Activations on CUDA: ReLU through cnnscale's 16-byte-vectorised element-wise kernels (cuDNN's
// activation reached about half the HBM bandwidth on bf16 activations), softmax through cuDNN,
// dropout through cnnscale's counter-based kernel (the same mask as the CPU backend, element for
// element). ReLU and dropout run on f32, bf16 or f16 (one dtype per call); softmax is f32 (the loss
// layer keeps probabilities in fp32). quantize_int8 is one kernel too (cuda_int8_kernels.cu).
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"

namespace cnnscale {

void CudaBackend::relu_forward(const Tensor& x, const Tensor& y) {
  cuda::expect_float("relu_forward", "x", x, device_);
  cuda::expect_float("relu_forward", "y", y, device_);
  cuda::expect_dtype("relu_forward", "y", y, x.dtype());
  cuda::expect_layout("relu_forward", "y", y, x.layout());
  cuda::expect_numel("relu_forward", "y", y, x.numel());
  if (x.numel() == 0) return;
  activate();
  cuda::launch_relu_forward(x.dtype(), x.numel(), x.raw(), y.raw(), stream());
}

void CudaBackend::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  cuda::expect_float("relu_backward", "y", y, device_);
  cuda::expect_float("relu_backward", "dy", dy, device_);
  cuda::expect_float("relu_backward", "dx", dx, device_);
  cuda::expect_dtype("relu_backward", "dy", dy, y.dtype());
  cuda::expect_dtype("relu_backward", "dx", dx, y.dtype());
  cuda::expect_layout("relu_backward", "dy", dy, y.layout());
  cuda::expect_layout("relu_backward", "dx", dx, y.layout());
  cuda::expect_numel("relu_backward", "dy", dy, y.numel());
  cuda::expect_numel("relu_backward", "dx", dx, y.numel());
  if (y.numel() == 0) return;
  activate();
  // The interface keeps only y (so ReLU can run in place): y > 0 exactly where x > 0.
  cuda::launch_relu_backward(y.dtype(), y.numel(), y.raw(), dy.raw(), dx.raw(), stream());
}

namespace {

float dropout_scale(const char* op, float ratio) {
  if (!(ratio >= 0.0f && ratio < 1.0f)) throw_runtime("{} on cuda: ratio {} outside [0, 1)", op, ratio);
  return 1.0f / (1.0f - ratio);
}

}  // namespace

// Forward and backward are the same map (backward applies it to dy); the *_at forms read the
// iteration on the device.
void CudaBackend::run_dropout(const char* op, const char* in_name, const char* out_name, float ratio, uint64_t seed,
                              uint64_t rng_stream, const Tensor* iteration, uint64_t layer, const Tensor& in,
                              const Tensor& out) {
  const float scale = dropout_scale(op, ratio);
  cuda::expect_float(op, in_name, in, device_);
  cuda::expect_float(op, out_name, out, device_);
  cuda::expect_dtype(op, out_name, out, in.dtype());
  cuda::expect_layout(op, out_name, out, in.layout());
  cuda::expect_numel(op, out_name, out, in.numel());
  if (iteration) {
    cuda::expect_i32(op, "iteration", *iteration, device_);
    cuda::expect_numel(op, "iteration", *iteration, 1);
  }
  activate();
  cuda::launch_dropout(in.dtype(), in.numel(), ratio, scale, seed, rng_stream, iteration ? iteration->i32() : nullptr,
                       layer, in.raw(), out.raw(), stream());
}

void CudaBackend::dropout_forward(float ratio, uint64_t seed, uint64_t rng_stream, const Tensor& x, const Tensor& y) {
  run_dropout("dropout_forward", "x", "y", ratio, seed, rng_stream, nullptr, 0, x, y);
}

void CudaBackend::dropout_backward(float ratio, uint64_t seed, uint64_t rng_stream, const Tensor& dy,
                                   const Tensor& dx) {
  run_dropout("dropout_backward", "dy", "dx", ratio, seed, rng_stream, nullptr, 0, dy, dx);
}

void CudaBackend::dropout_forward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer,
                                     const Tensor& x, const Tensor& y) {
  run_dropout("dropout_forward_at", "x", "y", ratio, seed, 0, &iteration, layer, x, y);
}

void CudaBackend::dropout_backward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer,
                                      const Tensor& dy, const Tensor& dx) {
  run_dropout("dropout_backward_at", "dy", "dx", ratio, seed, 0, &iteration, layer, dy, dx);
}

// Row-wise softmax of (N, C) scores; other shapes count as (N, everything else), as in the CPU
// reference. ACCURATE subtracts the row maximum first, so large scores cannot overflow.
void CudaBackend::softmax_forward(const Tensor& x, const Tensor& prob) {
  cuda::expect_f32("softmax_forward", "x", x, device_);
  cuda::expect_f32("softmax_forward", "prob", prob, device_);
  cuda::expect_numel("softmax_forward", "prob", prob, x.numel());
  if (x.numel() == 0) return;
  activate();
  const int64_t n = x.shape().n();
  cuda::set_nchw(desc_a_, n, x.numel() / n, 1, 1, "softmax_forward");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, desc_a_, x.f32(),
                                  &zero, desc_a_, prob.f32()));
}

void CudaBackend::quantize_int8(const Tensor& x, float scale, const Tensor& q) {
  cuda::expect_float("quantize_int8", "x", x, device_);
  cuda::expect_i8("quantize_int8", "q", q, device_);
  if (!(scale > 0.0f)) throw_runtime("quantize_int8: scale {} is not positive", scale);
  const Shape& sx = x.shape();
  const Shape& sq = q.shape();
  const int64_t c = sx.rank() > 1 ? sx[1] : 1, cq = sq.rank() > 1 ? sq[1] : 1;
  const bool same_rows = sx.rank() == sq.rank() && sx[0] == sq[0] && sx.numel() / c == sq.numel() / cq;
  // Rows of channels: a channels-last tensor's pixels, an (N, C) tensor's samples; or, without
  // padding, any memory order both share.
  const bool rows_of_channels = sx.rank() == 2 || (x.layout() == Layout::NHWC && q.layout() == Layout::NHWC);
  if (!same_rows || cq < c || (cq > c && !rows_of_channels) || (cq == c && x.layout() != q.layout()))
    throw_runtime("quantize_int8: q {} ({}) does not hold x {} ({}) (more channels only, channels-last)",
                  sq.to_string(), layout_name(q.layout()), sx.to_string(), layout_name(x.layout()));
  activate();
  const int64_t rows = cq == c ? sx.numel() : sx.numel() / c;
  cuda::launch_quantize_int8(x.dtype(), rows, cq == c ? 1 : c, cq == c ? 1 : cq, x.raw(), q.raw(), scale, stream());
}

}  // namespace cnnscale
