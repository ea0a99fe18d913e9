// cnnscale's element-wise kernels (axpby, ReLU, dropout) and the bias ops (add, and the
// gradient's reduction over rows). Formulas use explicitly rounded intrinsics (__fmul_rn, __fadd_rn)
// so nvcc does not contract them into FMAs: each element then rounds exactly as the CPU reference's
// expression does. They are templated on the storage (f32, bf16, f16) and compute in float, so
// their f32 instances are the exact ones and the 16-bit ones add only the final store's rounding.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/loss_scale_rule.hpp"
#include "core/byte_input.hpp"
#include "core/rng.hpp"

namespace cnnscale::cuda {
namespace {

// A packed element-wise op has a pack kernel and a scalar kernel sharing one per-element formula
// (so results are bit-identical either way): run_packed launches the pack kernel over the whole
// 16-byte packs and the scalar one over the tail, and everything scalar when a pointer is not
// 16-byte aligned (a view into the middle of a flat buffer).
template <typename T, typename PackLaunch, typename ScalarLaunch>
void run_packed(int64_t n, bool aligned, PackLaunch&& packs, ScalarLaunch&& scalar) {
  const int64_t whole = aligned ? n / Pack<T>::kCount : 0;
  if (whole > 0) packs(whole);
  const int64_t done = whole * Pack<T>::kCount;
  if (done < n) scalar(done, n - done);
}

template <typename T>
__device__ __forceinline__ T axpby_one(float alpha, T x, float beta, T y) {
  const float ax = __fmul_rn(alpha, to_float(x));
  return from_float<T>(beta == 0.0f ? ax : __fadd_rn(ax, __fmul_rn(beta, to_float(y))));
}

template <typename T>
__global__ void axpby_kernel(int64_t n, float alpha, const T* x, float beta, T* y) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    y[i] = axpby_one(alpha, x[i], beta, beta == 0.0f ? T{} : y[i]);
}

template <typename T>
__global__ void axpby_pack_kernel(int64_t packs, float alpha, const Pack<T>* x, float beta, Pack<T>* y) {
  for (int64_t i = global_index(); i < packs; i += global_stride()) {
    const Pack<T> a = x[i];
    Pack<T> b{};
    if (beta != 0.0f) b = y[i];  // beta == 0: y's old contents are never read (BLAS convention)
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < Pack<T>::kCount; ++k) out.v[k] = axpby_one(alpha, a.v[k], beta, b.v[k]);
    y[i] = out;
  }
}

// ReLU as the CPU reference computes it: y = x > 0 ? x : 0, and dx = y > 0 ? dy : 0 (the gradient
// at exactly 0 is 0, as Caffe and cuDNN take it).
template <typename T>
__device__ __forceinline__ T relu_one(T x) {
  return to_float(x) > 0.0f ? x : from_float<T>(0.0f);
}
template <typename T>
__device__ __forceinline__ T relu_grad_one(T y, T dy) {
  return to_float(y) > 0.0f ? dy : from_float<T>(0.0f);
}

template <typename T>
__global__ void relu_forward_kernel(int64_t n, const T* x, T* y) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = relu_one(x[i]);
}

template <typename T>
__global__ void relu_forward_pack_kernel(int64_t packs, const Pack<T>* x, Pack<T>* y) {
  for (int64_t i = global_index(); i < packs; i += global_stride()) {
    Pack<T> v = x[i];
#pragma unroll
    for (int k = 0; k < Pack<T>::kCount; ++k) v.v[k] = relu_one(v.v[k]);
    y[i] = v;
  }
}

template <typename T>
__global__ void relu_backward_kernel(int64_t n, const T* y, const T* dy, T* dx) {
  for (int64_t i = global_index(); i < n; i += global_stride()) dx[i] = relu_grad_one(y[i], dy[i]);
}

template <typename T>
__global__ void relu_backward_pack_kernel(int64_t packs, const Pack<T>* y, const Pack<T>* dy, Pack<T>* dx) {
  for (int64_t i = global_index(); i < packs; i += global_stride()) {
    const Pack<T> a = y[i];
    Pack<T> g = dy[i];
#pragma unroll
    for (int k = 0; k < Pack<T>::kCount; ++k) g.v[k] = relu_grad_one(a.v[k], g.v[k]);
    dx[i] = g;
  }
}

// iteration != null: the stream is dropout_stream(*iteration, layer), read when the kernel runs.
template <typename T>
__global__ void dropout_kernel(int64_t n, float ratio, float scale, uint64_t seed, uint64_t rng_stream,
                               const int32_t* iteration, uint64_t layer, const T* in, T* out) {
  if (iteration) rng_stream = dropout_stream(static_cast<uint64_t>(static_cast<uint32_t>(*iteration)), layer);
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    bool keep = counter_uniform(seed, rng_stream, static_cast<uint64_t>(i)) >= ratio;
    out[i] = from_float<T>(keep ? __fmul_rn(to_float(in[i]), scale) : 0.0f);
  }
}

// y (N, C, inner) += bias[c]; channels_last: y is (N, inner, C) in memory.
// I: the index type (with_index_type).
template <typename T, typename I>
__global__ void bias_add_kernel(I n, I c, I inner, bool channels_last, const T* bias, T* y) {
  for (I i = static_cast<I>(global_index()); i < n; i += static_cast<I>(global_stride()))
    y[i] = from_float<T>(__fadd_rn(to_float(y[i]), to_float(bias[channels_last ? i % c : (i / inner) % c])));
}

// Channels-last dbias: rows of c channels. Pass 1: block b sums rows b, b + G, b + 2G, ... of
// every channel into partial[b * c + ch] (a warp reads consecutive channels of one row: coalesced;
// the one-block-per-channel kernel below reads them c elements apart and was slow:
// docs/measurements/2026-11-25-cuda-kernel-choices.md). Pass 2 adds each channel's G partials in
// block order, so the result does not depend on scheduling.
constexpr int64_t kBiasRowBlocks = 264;

template <typename T>
__global__ void bias_rows_partial_kernel(int64_t rows, int c, const T* dy, float* partial) {
  for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four rows in flight per thread
    int64_t r = blockIdx.x;
    const int64_t step = gridDim.x;
    for (; r + 3 * step < rows; r += 4 * step)
      for (int u = 0; u < 4; ++u) acc[u] += to_float(dy[(r + u * step) * c + ch]);
    for (; r < rows; r += step) acc[0] += to_float(dy[r * c + ch]);
    partial[static_cast<int64_t>(blockIdx.x) * c + ch] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
}

// The same pass 1 over 16-byte packs, for c a whole number of packs (at most kThreads of them): a
// row's packs go to consecutive threads, so a warp reads 512 contiguous bytes, and a block covers
// rows_per_pass = kThreads / packs rows at a time. Each thread sums its pack's channels over the
// rows it visits (its block's rows b*R + j, then every gridDim.x * R rows after), four rows in
// flight; the block then adds its R row-sums per channel in row order, so the result does not
// depend on scheduling. The channel-per-thread kernel above kept only a few hundred kilobytes in
// flight, far below the memory bandwidth (docs/measurements/2026-11-25-cuda-kernel-choices.md).
template <typename T>
__global__ void bias_rows_packed_kernel(int64_t rows, int packs, const Pack<T>* dy, float* partial) {
  constexpr int kCount = Pack<T>::kCount;
  __shared__ float sums[kThreads * kCount];  // (row within the pass, channel)
  const int per_pass = kThreads / packs, j = threadIdx.x / packs, q = threadIdx.x % packs;
  float acc[kCount] = {};
  if (j < per_pass) {
    const int64_t step = static_cast<int64_t>(gridDim.x) * per_pass;
    int64_t r = static_cast<int64_t>(blockIdx.x) * per_pass + j;
    for (; r + 3 * step < rows; r += 4 * step) {
      Pack<T> v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = dy[(r + u * step) * packs + q];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int k = 0; k < kCount; ++k) acc[k] += to_float(v[u].v[k]);
    }
    for (; r < rows; r += step) {
      const Pack<T> v = dy[r * packs + q];
#pragma unroll
      for (int k = 0; k < kCount; ++k) acc[k] += to_float(v.v[k]);
    }
#pragma unroll
    for (int k = 0; k < kCount; ++k) sums[j * packs * kCount + q * kCount + k] = acc[k];
  }
  __syncthreads();
  const int c = packs * kCount;
  for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
    float total = 0.0f;
    for (int row = 0; row < per_pass; ++row) total += sums[row * c + ch];
    partial[static_cast<int64_t>(blockIdx.x) * c + ch] = total;
  }
}

template <typename T>
__global__ void bias_rows_final_kernel(int blocks, int c, const float* partial, T* dbias) {
  for (int ch = blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < blocks; ++b) acc += partial[static_cast<int64_t>(b) * c + ch];
    dbias[ch] = from_float<T>(acc);
  }
}

// One block per channel: dbias[c] = sum over n and inner of dy, accumulated in float.
constexpr int kBiasThreads = 256;
template <typename T>
__global__ void bias_backward_kernel(int64_t batch, int64_t c, int64_t inner, bool channels_last, const T* dy,
                                     T* dbias) {
  __shared__ float partial[kBiasThreads];
  const int64_t ch = blockIdx.x, per_channel = batch * inner;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const int64_t b = j / inner, k = j - b * inner;
    acc += to_float(dy[channels_last ? (b * inner + k) * c + ch : (b * c + ch) * inner + k]);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[ch] = from_float<T>(partial[0]);
}


// One thread: axpby_kernel's element unless the step is skipped.
__global__ void axpby_unless_kernel(float alpha, const float* x, float beta, float* y, const int32_t* skip) {
  if (skip && *skip != 0) return;
  *y = axpby_one(alpha, *x, beta, *y);  // beta 0 does not use y
}

}  // namespace

void launch_bias_add(DType t, int64_t batch, int64_t c, int64_t inner, bool channels_last, const void* bias, void* y,
                     cudaStream_t stream) {
  const int64_t n = batch * c * inner;
  if (n <= 0) return;
  dispatch_float(t, "bias_add", [&](auto e) {
    using T = decltype(e);
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      bias_add_kernel<T, I><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<I>(n), static_cast<I>(c),
                                                                   static_cast<I>(inner), channels_last,
                                                                   static_cast<const T*>(bias), static_cast<T*>(y));
    });
  });
  CUDA_CHECK_LAUNCH("bias_add_kernel");
}

int64_t bias_backward_partials(int64_t rows) { return std::min(kBiasRowBlocks, std::max<int64_t>(rows, 1)); }

void launch_bias_backward(DType t, int64_t batch, int64_t c, int64_t inner, bool channels_last, const void* dy,
                          void* dbias, float* partial, cudaStream_t stream) {
  if (c <= 0) return;
  dispatch_float(t, "bias_backward", [&](auto e) {
    using T = decltype(e);
    if (channels_last && partial) {
      const int64_t rows = batch * inner, blocks = bias_backward_partials(rows);
      constexpr int kCount = Pack<T>::kCount;
      if (c % kCount == 0 && c / kCount <= kThreads && aligned16(dy)) {
        bias_rows_packed_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            rows, static_cast<int>(c / kCount), static_cast<const Pack<T>*>(dy), partial);
        CUDA_CHECK_LAUNCH("bias_rows_packed_kernel");
      } else {
        bias_rows_partial_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            rows, static_cast<int>(c), static_cast<const T*>(dy), partial);
        CUDA_CHECK_LAUNCH("bias_rows_partial_kernel");
      }
      bias_rows_final_kernel<T><<<blocks_for(c), kThreads, 0, stream>>>(static_cast<int>(blocks),
                                                                       static_cast<int>(c), partial,
                                                                       static_cast<T*>(dbias));
      return;
    }
    bias_backward_kernel<T><<<static_cast<unsigned>(c), kBiasThreads, 0, stream>>>(
        batch, c, inner, channels_last, static_cast<const T*>(dy), static_cast<T*>(dbias));
  });
  CUDA_CHECK_LAUNCH("bias_backward_kernel");
}

void launch_axpby(DType t, int64_t n, float alpha, const void* x, float beta, void* y, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float(t, "axpby", [&](auto e) {
    using T = decltype(e);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    run_packed<T>(
        n, aligned16(x) && aligned16(y),
        [&](int64_t packs) {
          axpby_pack_kernel<T><<<blocks_for(packs), kThreads, 0, stream>>>(
              packs, alpha, reinterpret_cast<const Pack<T>*>(px), beta, reinterpret_cast<Pack<T>*>(py));
        },
        [&](int64_t off, int64_t count) {
          axpby_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(count, alpha, px + off, beta, py + off);
        });
  });
  CUDA_CHECK_LAUNCH("axpby_kernel");
}

void launch_relu_forward(DType t, int64_t n, const void* x, void* y, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float(t, "relu_forward", [&](auto e) {
    using T = decltype(e);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    run_packed<T>(
        n, aligned16(x) && aligned16(y),
        [&](int64_t packs) {
          relu_forward_pack_kernel<T><<<blocks_for(packs), kThreads, 0, stream>>>(
              packs, reinterpret_cast<const Pack<T>*>(px), reinterpret_cast<Pack<T>*>(py));
        },
        [&](int64_t off, int64_t count) {
          relu_forward_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(count, px + off, py + off);
        });
  });
  CUDA_CHECK_LAUNCH("relu_forward_kernel");
}

void launch_relu_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float(t, "relu_backward", [&](auto e) {
    using T = decltype(e);
    const T* py = static_cast<const T*>(y);
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    run_packed<T>(
        n, aligned16(y) && aligned16(dy) && aligned16(dx),
        [&](int64_t packs) {
          relu_backward_pack_kernel<T><<<blocks_for(packs), kThreads, 0, stream>>>(
              packs, reinterpret_cast<const Pack<T>*>(py), reinterpret_cast<const Pack<T>*>(pdy),
              reinterpret_cast<Pack<T>*>(pdx));
        },
        [&](int64_t off, int64_t count) {
          relu_backward_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(count, py + off, pdy + off, pdx + off);
        });
  });
  CUDA_CHECK_LAUNCH("relu_backward_kernel");
}

void launch_dropout(DType t, int64_t n, float ratio, float scale, uint64_t seed, uint64_t rng_stream,
                    const int32_t* iteration, uint64_t layer, const void* in, void* out, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float(t, "dropout", [&](auto e) {
    using T = decltype(e);
    dropout_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, ratio, scale, seed, rng_stream, iteration, layer,
                                                             static_cast<const T*>(in), static_cast<T*>(out));
  });
  CUDA_CHECK_LAUNCH("dropout_kernel");
}

void launch_axpby_unless(float alpha, const float* x, float beta, float* y, const int32_t* skip, cudaStream_t stream) {
  axpby_unless_kernel<<<1, 1, 0, stream>>>(alpha, x, beta, y, skip);
  CUDA_CHECK_LAUNCH("axpby_unless_kernel");
}

}  // namespace cnnscale::cuda
