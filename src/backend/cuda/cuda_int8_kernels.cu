// int8 quantisation on the GPU (Backend::quantize_int8): one pass over x, one int8 per element, the
// rounding of core/int8.hpp (an IEEE division, round to nearest even, clamp to [-127, 127], NaN to
// 0), so that the device's values are the host reference's bit for bit. Extra channels of q (a
// channel-padded channels-last copy for cuDNN's int8 engines) are written as 0. An int8 fully
// connected layer's epilogue: its int32 sums (cuBLASLt) times the per-output scale, plus the bias,
// ReLU, stored in y's dtype.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace cnnscale::cuda {
namespace {

__device__ __forceinline__ int8_t quantize_one(float v, float scale) {
  if (isnan(v)) return 0;
  const float q = rintf(__fdiv_rn(v, scale));  // rintf: to nearest, ties to even
  return static_cast<int8_t>(fminf(fmaxf(q, -127.0f), 127.0f));
}

// q (rows, cq) from x (rows, c), cq >= c: rows are pixels of a channels-last tensor (or samples of an
// (N, C) one), and channels c .. cq - 1 of each row are 0.
template <typename T, typename I>
__global__ void quantize_rows_kernel(I rows, I c, I cq, const T* x, int8_t* q, float scale) {
  const I n = rows * cq;
  for (I i = static_cast<I>(global_index()); i < n; i += static_cast<I>(global_stride())) {
    const I row = i / cq, ch = i - row * cq;
    q[i] = ch < c ? quantize_one(to_float(x[row * c + ch]), scale) : int8_t{0};
  }
}

// y (n, k) = acc (n, kp) * scale (k) + bias (k) (ReLU), columns k .. kp - 1 of acc dropped.
template <typename T, typename I>
__global__ void int8_linear_epilogue_kernel(I n, I k, I kp, const int32_t* acc, const float* scale, const float* bias,
                                            bool relu, T* y) {
  const I total = n * k;
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const I row = i / k, col = i - row * k;
    float v = fmaf(static_cast<float>(acc[row * kp + col]), scale[col], bias[col]);
    if (relu) v = fmaxf(v, 0.0f);
    y[i] = from_float<T>(v);
  }
}

}  // namespace

void launch_int8_linear_epilogue(DType t, int64_t n, int64_t k, int64_t kp, const int32_t* acc, const float* scale,
                                 const float* bias, bool relu, void* y, cudaStream_t stream) {
  if (n <= 0 || k <= 0) return;
  dispatch_float(t, "int8 linear epilogue", [&](auto e) {
    using T = decltype(e);
    with_index_type(n * kp, [&](auto index) {
      using I = decltype(index);
      int8_linear_epilogue_kernel<T, I><<<blocks_for(n * k), kThreads, 0, stream>>>(
          static_cast<I>(n), static_cast<I>(k), static_cast<I>(kp), acc, scale, bias, relu, static_cast<T*>(y));
    });
  });
  CUDA_CHECK_LAUNCH("int8_linear_epilogue_kernel");
}

void launch_quantize_int8(DType t, int64_t rows, int64_t c, int64_t cq, const void* x, void* q, float scale,
                          cudaStream_t stream) {
  if (rows <= 0 || cq <= 0) return;
  dispatch_float(t, "quantize_int8", [&](auto e) {
    using T = decltype(e);
    with_index_type(rows * cq, [&](auto index) {
      using I = decltype(index);
      quantize_rows_kernel<T, I>
          <<<blocks_for(rows * cq), kThreads, 0, stream>>>(static_cast<I>(rows), static_cast<I>(c), static_cast<I>(cq),
                                                           static_cast<const T*>(x), static_cast<int8_t*>(q), scale);
    });
  });
  CUDA_CHECK_LAUNCH("quantize_rows_kernel");
}

}  // namespace cnnscale::cuda
