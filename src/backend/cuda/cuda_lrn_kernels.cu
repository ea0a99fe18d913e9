// Cross-channel LRN over channels-last tensors: each pixel's channels are one contiguous row, so the
// window [c - pre_pad, c + size - pre_pad - 1] (Caffe's) lies in that row. cuDNN's LRN takes NCHW
// only (and no bf16); before these kernels a 16-bit channels-last LRN went through an f32 NCHW copy
// of each operand, four passes over memory around the op (14% of CaffeNet's bf16 step at batch 64
// on an H100). One thread per element, fp32 math; the few reads per window hit the cache lines
// its neighbouring threads (the row's other channels) load anyway.
#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"

namespace cnnscale::cuda {
namespace {

struct LrnWindow {
  int size, pre_pad;
  float alpha_over_size, beta, k;
};

// scale_c = k + alpha / size * sum of x^2 over c's window, within one row of `channels`.
template <typename T, typename I>
__device__ __forceinline__ float lrn_scale(const T* row, I c, I channels, const LrnWindow& w) {
  const I lo = c >= static_cast<I>(w.pre_pad) ? c - static_cast<I>(w.pre_pad) : I{0};
  I hi = c + static_cast<I>(w.size - w.pre_pad - 1);
  if (hi > channels - 1) hi = channels - 1;
  float sum = 0.0f;
  for (I j = lo; j <= hi; ++j) {
    const float v = to_float(row[j]);
    sum += v * v;
  }
  return w.k + w.alpha_over_size * sum;
}

template <typename T, typename I>
__global__ void lrn_rows_forward_kernel(I n, I channels, LrnWindow w, const T* __restrict__ x, T* __restrict__ y) {
  for (I i = static_cast<I>(global_index()); i < n; i += static_cast<I>(global_stride())) {
    const I c = i % channels;
    const T* row = x + (i - c);
    y[i] = from_float<T>(to_float(x[i]) * powf(lrn_scale(row, c, channels, w), -w.beta));
  }
}

// Caffe's backward: dx_c = dy_c scale_c^-beta - 2 alpha beta / size * x_c * sum over the c' whose
// window holds c (c' in [c - (size - pre_pad - 1), c + pre_pad]) of dy_c' y_c' / scale_c'.
template <typename T, typename I>
__global__ void lrn_rows_backward_kernel(I n, I channels, LrnWindow w, const T* __restrict__ x,
                                         const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx) {
  const float ratio_coeff = 2.0f * w.alpha_over_size * w.beta;
  const I post = static_cast<I>(w.size - w.pre_pad - 1);
  for (I i = static_cast<I>(global_index()); i < n; i += static_cast<I>(global_stride())) {
    const I c = i % channels, base = i - c;
    const T* xrow = x + base;
    const I lo = c >= post ? c - post : I{0};
    I hi = c + static_cast<I>(w.pre_pad);
    if (hi > channels - 1) hi = channels - 1;
    float accum = 0.0f;
    for (I j = lo; j <= hi; ++j)
      accum += to_float(dy[base + j]) * to_float(y[base + j]) / lrn_scale(xrow, j, channels, w);
    const float direct = to_float(dy[i]) * powf(lrn_scale(xrow, c, channels, w), -w.beta);
    dx[i] = from_float<T>(direct - ratio_coeff * to_float(x[i]) * accum);
  }
}

LrnWindow window(int size, float alpha, float beta, float k) {
  return {size, (size - 1) / 2, alpha / static_cast<float>(size), beta, k};
}

}  // namespace

void launch_lrn_rows_forward(DType t, int64_t rows, int64_t channels, int size, float alpha, float beta, float k,
                             const void* x, void* y, cudaStream_t stream) {
  const int64_t n = rows * channels;
  if (n <= 0) return;
  dispatch_float(t, "lrn_forward", [&](auto e) {
    using T = decltype(e);
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      lrn_rows_forward_kernel<T, I><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<I>(n), static_cast<I>(channels), window(size, alpha, beta, k), static_cast<const T*>(x),
          static_cast<T*>(y));
    });
  });
  CUDA_CHECK_LAUNCH("lrn_rows_forward_kernel");
}

void launch_lrn_rows_backward(DType t, int64_t rows, int64_t channels, int size, float alpha, float beta, float k,
                              const void* x, const void* y, const void* dy, void* dx, cudaStream_t stream) {
  const int64_t n = rows * channels;
  if (n <= 0) return;
  dispatch_float(t, "lrn_backward", [&](auto e) {
    using T = decltype(e);
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      lrn_rows_backward_kernel<T, I><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<I>(n), static_cast<I>(channels), window(size, alpha, beta, k), static_cast<const T*>(x),
          static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx));
    });
  });
  CUDA_CHECK_LAUNCH("lrn_rows_backward_kernel");
}

}  // namespace cnnscale::cuda
