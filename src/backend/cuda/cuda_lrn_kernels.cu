// Cross-channel LRN over channels-last tensors: each pixel's channels are one contiguous row, so the
// window [c - pre_pad, c + size - pre_pad - 1] (Caffe's) lies in that row. cuDNN's LRN takes NCHW
// only (and no bf16); before these kernels a 16-bit channels-last LRN went through an f32 NCHW copy
// of each operand, four passes over memory around the op (a large share of CaffeNet's bf16 step:
// docs/measurements/2026-11-25-cuda-kernel-choices.md). fp32 math throughout.
// Rows of up to kTileElems channels run the tile kernels: a block stages whole consecutive rows (a
// contiguous span of memory) in shared memory as floats, so each element's window sum, scale and
// power are computed once. One thread per element reading its window from global memory instead
// (the row kernels, kept for wider rows) recomputes the backward's five neighbouring scales per
// element: compute-bound, some ten times its traffic's time on CaffeNet's norm1 backward. Both
// sum each window in the same order,
// so they give the same values.
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

constexpr int kTileElems = 2048;

// `rows` rows of `channels` elements in tiles of rows_per_tile whole rows (the most that fit in
// kTileElems); the last tile may hold fewer.
struct Tiling {
  int64_t rows, tiles;
  int channels, rows_per_tile;
};

Tiling tiling(int64_t rows, int64_t channels) {
  const int per_tile = static_cast<int>(kTileElems / channels);
  return {rows, (rows + per_tile - 1) / per_tile, static_cast<int>(channels), per_tile};
}

unsigned tile_blocks(const Tiling& g) {
  constexpr int64_t kMaxTileBlocks = int64_t{1} << 16;  // grid-stride beyond: ample for any GPU
  return static_cast<unsigned>(g.tiles < kMaxTileBlocks ? g.tiles : kMaxTileBlocks);
}

// Tile `t`: its first element and element count.
struct Tile {
  int64_t first;
  int count;
};

__device__ __forceinline__ Tile tile_at(const Tiling& g, int64_t t) {
  const int64_t row0 = t * g.rows_per_tile;
  const int64_t nrows = g.rows - row0 < g.rows_per_tile ? g.rows - row0 : g.rows_per_tile;
  return {row0 * g.channels, static_cast<int>(nrows) * g.channels};
}

// Tile loads and stores. Packed (the row length a multiple of a 16-byte pack's lanes, and every
// operand 16-byte aligned): a thread moves a pack per load and store, so a tile's loads are in
// flight together, one or two per thread; element by element they were issued one after another,
// eight per thread, at about five times the traffic's time on CaffeNet's norm1 (packing gained less
// than that promised: docs/measurements/2026-11-25-cuda-kernel-choices.md). Otherwise element by
// element. Either way the values go through shared memory as floats, so both give the same results.
template <typename T>
__device__ __forceinline__ void load_tile(const T* __restrict__ src, const Tile& tile, bool packed, float* to) {
  if (packed) {
    constexpr int kLanes = Pack<T>::kCount;
    const Pack<T>* p = reinterpret_cast<const Pack<T>*>(src + tile.first);
    for (int q = threadIdx.x; q < tile.count / kLanes; q += blockDim.x) {
      const Pack<T> v = p[q];
#pragma unroll
      for (int l = 0; l < kLanes; ++l) to[q * kLanes + l] = to_float(v.v[l]);
    }
  } else {
    for (int e = threadIdx.x; e < tile.count; e += blockDim.x) to[e] = to_float(src[tile.first + e]);
  }
}

template <typename T>
__device__ __forceinline__ void store_tile(const float* from, const Tile& tile, bool packed, T* __restrict__ dst) {
  if (packed) {
    constexpr int kLanes = Pack<T>::kCount;
    Pack<T>* p = reinterpret_cast<Pack<T>*>(dst + tile.first);
    for (int q = threadIdx.x; q < tile.count / kLanes; q += blockDim.x) {
      Pack<T> v;
#pragma unroll
      for (int l = 0; l < kLanes; ++l) v.v[l] = from_float<T>(from[q * kLanes + l]);
      p[q] = v;
    }
  } else {
    for (int e = threadIdx.x; e < tile.count; e += blockDim.x) dst[tile.first + e] = from_float<T>(from[e]);
  }
}

template <typename T>
__global__ void lrn_tile_forward_kernel(Tiling g, LrnWindow w, bool packed, const T* __restrict__ x,
                                        T* __restrict__ y) {
  __shared__ float xs[kTileElems], ys[kTileElems];
  for (int64_t t = blockIdx.x; t < g.tiles; t += gridDim.x) {
    const Tile tile = tile_at(g, t);
    load_tile(x, tile, packed, xs);
    __syncthreads();
    for (int e = threadIdx.x; e < tile.count; e += blockDim.x) {
      const int c = e % g.channels;
      ys[e] = xs[e] * powf(lrn_scale(xs + (e - c), c, g.channels, w), -w.beta);
    }
    __syncthreads();
    store_tile(ys, tile, packed, y);
    __syncthreads();  // before the next tile overwrites xs and ys
  }
}

// The row kernel's backward with each scale and each dy y / scale computed once per element. dx
// goes to `scale` once its element's own scale is used: no other thread reads that entry.
template <typename T>
__global__ void lrn_tile_backward_kernel(Tiling g, LrnWindow w, bool packed, const T* __restrict__ x,
                                         const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx) {
  __shared__ float xs[kTileElems], dys[kTileElems], scale[kTileElems], ratio[kTileElems];
  const float ratio_coeff = 2.0f * w.alpha_over_size * w.beta;
  const int post = w.size - w.pre_pad - 1;
  for (int64_t t = blockIdx.x; t < g.tiles; t += gridDim.x) {
    const Tile tile = tile_at(g, t);
    load_tile(x, tile, packed, xs);
    load_tile(dy, tile, packed, dys);
    load_tile(y, tile, packed, ratio);  // y, until the ratio replaces it
    __syncthreads();
    for (int e = threadIdx.x; e < tile.count; e += blockDim.x) {
      const int c = e % g.channels;
      const float s = lrn_scale(xs + (e - c), c, g.channels, w);
      scale[e] = s;
      ratio[e] = dys[e] * ratio[e] / s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < tile.count; e += blockDim.x) {
      const int c = e % g.channels, base = e - c;
      const int lo = c >= post ? c - post : 0, hi = min(c + w.pre_pad, g.channels - 1);
      float accum = 0.0f;
      for (int j = lo; j <= hi; ++j) accum += ratio[base + j];
      const float direct = dys[e] * powf(scale[e], -w.beta);
      scale[e] = direct - ratio_coeff * xs[e] * accum;
    }
    __syncthreads();
    store_tile(scale, tile, packed, dx);
    __syncthreads();  // before the next tile overwrites the arrays
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
    if (channels <= kTileElems) {
      const Tiling g = tiling(rows, channels);
      const bool packed = channels % Pack<T>::kCount == 0 && aligned16(x) && aligned16(y);
      lrn_tile_forward_kernel<T><<<tile_blocks(g), kThreads, 0, stream>>>(
          g, window(size, alpha, beta, k), packed, static_cast<const T*>(x), static_cast<T*>(y));
      return;
    }
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      lrn_rows_forward_kernel<T, I><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<I>(n), static_cast<I>(channels), window(size, alpha, beta, k), static_cast<const T*>(x),
          static_cast<T*>(y));
    });
  });
  CUDA_CHECK_LAUNCH("lrn_forward");
}

void launch_lrn_rows_backward(DType t, int64_t rows, int64_t channels, int size, float alpha, float beta, float k,
                              const void* x, const void* y, const void* dy, void* dx, cudaStream_t stream) {
  const int64_t n = rows * channels;
  if (n <= 0) return;
  dispatch_float(t, "lrn_backward", [&](auto e) {
    using T = decltype(e);
    if (channels <= kTileElems) {
      const Tiling g = tiling(rows, channels);
      const bool packed =
          channels % Pack<T>::kCount == 0 && aligned16(x) && aligned16(y) && aligned16(dy) && aligned16(dx);
      lrn_tile_backward_kernel<T><<<tile_blocks(g), kThreads, 0, stream>>>(
          g, window(size, alpha, beta, k), packed, static_cast<const T*>(x), static_cast<const T*>(y),
          static_cast<const T*>(dy), static_cast<T*>(dx));
      return;
    }
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      lrn_rows_backward_kernel<T, I><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<I>(n), static_cast<I>(channels), window(size, alpha, beta, k), static_cast<const T*>(x),
          static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx));
    });
  });
  CUDA_CHECK_LAUNCH("lrn_backward");
}

}  // namespace cnnscale::cuda
