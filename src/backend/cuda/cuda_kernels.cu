// cnnscale's own element-wise and reduction kernels: the ops cuDNN/cuBLAS have no call for.
// Element-wise formulas use explicitly rounded intrinsics (__fmul_rn, __fadd_rn) so nvcc does not
// contract them into FMAs: each element then rounds exactly as the CPU reference's expression does.
// The element-wise kernels are templated on the storage (f32, bf16, f16) and compute in float, so
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

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, T value) {
  for (int64_t i = global_index(); i < n; i += global_stride()) p[i] = value;
}

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

// One thread per destination element: consecutive threads write consecutive elements, and read
// consecutive source elements except where a row ends, so both sides stay coalesced.
template <typename T>
__global__ void copy_rows_kernel(int64_t rows, const T* src, int64_t src_cols, T* dst, int64_t dst_cols) {
  const int64_t n = rows * dst_cols;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t r = i / dst_cols, c = i % dst_cols;
    dst[i] = c < src_cols ? src[r * src_cols + c] : T{};
  }
}

// A block per lowered row (grid-stride over rows), its threads along the row: writes are
// coalesced, and reads walk the (s, c) runs of the field, which are contiguous in NHWC. Where in
// the field each column reads from is computed once per block into shared memory (dy, dx and the
// element offset from the field's corner), so the per-element work is a lookup, a bounds test and
// a copy; only the row's (sample, y, x) takes divisions. I is int32 where every index fits.
template <typename T, typename I>
__global__ void im2col_nhwc_kernel(Im2colShape g, const T* x, T* col) {
  extern __shared__ int table[];  // [3][cols]: dy, dx, offset of each column (-1: padding column)
  int* t_dy = table;
  int* t_dx = table + g.cols;
  int* t_off = table + 2 * g.cols;
  const int cols = static_cast<int>(g.cols), c_n = static_cast<int>(g.c), field = g.r * g.s * c_n;
  const I h = static_cast<I>(g.h), w = static_cast<I>(g.w), oh = static_cast<I>(g.oh), ow = static_cast<I>(g.ow);
  for (int k = threadIdx.x; k < cols; k += blockDim.x) {
    if (k >= field) {
      t_off[k] = -1;
      continue;
    }
    const int c = k % c_n, rs = k / c_n, kx = rs % g.s, ky = rs / g.s;
    t_dy[k] = ky * g.dilation_h;
    t_dx[k] = kx * g.dilation_w;
    t_off[k] = (t_dy[k] * static_cast<int>(g.w) + t_dx[k]) * c_n + c;
  }
  __syncthreads();
  const I rows = static_cast<I>(g.n) * oh * ow;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const I ox = row % ow, rest = row / ow, oy = rest % oh, b = rest / oh;
    const I iy0 = oy * g.stride_h - g.pad_h, ix0 = ox * g.stride_w - g.pad_w;
    const I corner = ((b * h + iy0) * w + ix0) * c_n;  // may lie outside x; only valid reads use it
    T* out = col + row * static_cast<I>(cols);
    for (int k = threadIdx.x; k < cols; k += blockDim.x) {
      T v{};
      const int off = t_off[k];
      if (off >= 0) {
        const I iy = iy0 + t_dy[k], ix = ix0 + t_dx[k];
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = x[corner + off];
      }
      out[k] = v;
    }
  }
}

// The tiled lowering: a block lowers a run of up to `tile` output pixels of one output row (b, oy),
// whose lowered rows are one contiguous stretch of col. It first copies the part of x that run
// reads (r image rows, `span` pixels each, zeros where they fall in the padding) into shared
// memory with coalesced reads, then writes the stretch as 16-byte words, each thread assembling a
// word from the staged pixels through a per-column table. The per-row kernel above writes words of
// the pixel's width, which for a 3-channel 16-bit image (a network's stem) is 2 bytes: a fraction
// of the memory bandwidth that a lowering, bound by its writes, could have.
constexpr int kTiledThreads = 256;
constexpr size_t kTiledSharedBytes = 40 * 1024;  // under the 48 KiB a block gets without opting in

__host__ __device__ constexpr size_t im2col_table_bytes(int64_t cols) {
  return (static_cast<size_t>(cols) * sizeof(int) + 15) / 16 * 16;
}

// The pixels of an image row that a run of `run` output pixels reads, and the tiled kernel's shared
// memory for that run: the column table and the staged patch of g.r such rows.
int im2col_span(const Im2colShape& g, int run) { return (run - 1) * g.stride_w + (g.s - 1) * g.dilation_w + 1; }
size_t im2col_tiled_shared_bytes(const Im2colShape& g, int run, int64_t pixel_bytes) {
  return im2col_table_bytes(g.cols) + static_cast<size_t>(g.r) * static_cast<size_t>(im2col_span(g, run)) *
                                          static_cast<size_t>(pixel_bytes);
}

template <typename U>
__global__ void __launch_bounds__(kTiledThreads) im2col_nhwc_tiled_kernel(Im2colShape g, int tile, int span, const U* x,
                                                                         U* col) {
  extern __shared__ __align__(16) unsigned char shared[];
  int* t_off = reinterpret_cast<int*>(shared);  // per column: offset in the staged patch, -1 for padding
  U* patch = reinterpret_cast<U*>(shared + im2col_table_bytes(g.cols));  // [r][span][c]
  constexpr int kUnits = static_cast<int>(16 / sizeof(U));  // units per 16-byte word
  const int cols = static_cast<int>(g.cols), c_n = static_cast<int>(g.c), field = g.r * g.s * c_n;
  for (int k = threadIdx.x; k < cols; k += blockDim.x) {
    const int c = k % c_n, rs = k / c_n, kx = rs % g.s, ky = rs / g.s;
    t_off[k] = k < field ? (ky * span + kx * g.dilation_w) * c_n + c : -1;
  }
  const int oh = static_cast<int>(g.oh), ow = static_cast<int>(g.ow), h = static_cast<int>(g.h),
            w = static_cast<int>(g.w);
  const int tiles = (ow + tile - 1) / tile, patch_n = g.r * span * c_n, step = g.stride_w * c_n;
  const int64_t tasks = g.n * oh * tiles;
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int tx = static_cast<int>(task % tiles);
    const int64_t image_row = task / tiles;  // b * oh + oy
    const int oy = static_cast<int>(image_row % oh);
    const int64_t b = image_row / oh;
    const int ox0 = tx * tile, count = min(tile, ow - ox0);
    const int iy0 = oy * g.stride_h - g.pad_h, ix0 = ox0 * g.stride_w - g.pad_w;
    __syncthreads();  // the table is written, and the previous run's words are all assembled
    for (int i = threadIdx.x; i < patch_n; i += blockDim.x) {
      const int c = i % c_n, rest = i / c_n, j = rest % span, ky = rest / span;
      const int iy = iy0 + ky * g.dilation_h, ix = ix0 + j;
      U v{};
      if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = x[((b * h + iy) * w + ix) * c_n + c];
      patch[i] = v;
    }
    __syncthreads();
    uint4* out = reinterpret_cast<uint4*>(col + (image_row * ow + ox0) * cols);
    const int words = count * cols / kUnits;  // whole: a row's bytes are a multiple of 16
    for (int word = threadIdx.x; word < words; word += blockDim.x) {
      const int e = word * kUnits;
      int row = e / cols, k = e - row * cols;
      union {
        uint4 v;
        U u[kUnits];
      } pack;
#pragma unroll
      for (int u = 0; u < kUnits; ++u) {
        const int off = t_off[k];
        pack.u[u] = off >= 0 ? patch[off + row * step] : U{};
        if (++k == cols) {
          k = 0;
          ++row;
        }
      }
      out[word] = pack.v;
    }
  }
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

// Byte samples (n, c, h, w) to f32 NCHW input, moved and mirrored by each sample's draw (null: none);
// one thread an output element. I: the index type (with_index_type). The source pixel is
// drawn_source's (core/byte_input.hpp), the rule the host's augmentation and the CPU decode follow.
template <typename I>
__global__ void decode_bytes_kernel(I total, I c, I h, I w, const uint8_t* in, const int32_t* draws,
                                    const float* affine, float* out) {
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const I x = i % w, y = (i / w) % h, ch = (i / (w * h)) % c, n = i / (w * h * c);
    const int32_t* d = draws ? draws + static_cast<int64_t>(n) * kDrawInts : nullptr;
    int64_t sy = 0, sx = 0;
    const bool inside = drawn_source(y, x, h, w, d ? d[0] : 0, d ? d[1] : 0, d && d[2] != 0, sy, sx);
    out[i] = inside ? byte_to_input(in[i - y * w - x + static_cast<I>(sy) * w + static_cast<I>(sx)], affine[ch],
                                    affine[c + ch])
                    : 0.0f;
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
// the one-block-per-channel kernel below reads them c elements apart and took most of a
// millisecond on the gait 2D-CNN's conv1 at batch 256). Pass 2 adds each channel's G partials in
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
// depend on scheduling. On CaffeNet's conv1 (96 channels, 774,400 rows at batch 256 in bf16) the
// channel-per-thread kernel above kept a few hundred kilobytes in flight and moved ~0.3 TB/s.
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

template <typename S, typename D>
__global__ void convert_kernel(int64_t n, const S* src, D* dst, float scale, const float* scale_at) {
  if (scale_at) scale = *scale_at;
  for (int64_t i = global_index(); i < n; i += global_stride())
    dst[i] = from_float<D>(scale == 1.0f ? to_float(src[i]) : __fmul_rn(scale, to_float(src[i])));
}

// convert_kernel over the segments of a table only: a block per segment (grid-striding over the
// segments where there are more than blocks), its threads across the segment. The segments this
// serves are small (a batch norm's scale and shift), so the one launch costs no more than the
// smallest of the launches it replaces.
template <typename S, typename D>
__global__ void convert_segments_kernel(const S* src, D* dst, const int32_t* ranges, int segments) {
  for (int k = blockIdx.x; k < segments; k += gridDim.x)
    for (int64_t i = ranges[2 * k] + threadIdx.x; i < ranges[2 * k + 1]; i += blockDim.x)
      dst[i] = from_float<D>(to_float(src[i]));
}

// The same, reordering between NCHW and NHWC: per sample, a transpose of a (rows, cols) matrix into
// (cols, rows), rows = C and cols = H*W towards NHWC, the reverse towards NCHW. A block moves a tile
// of tile_rows x tile_cols through shared memory, reading along src rows and writing along dst
// rows, both coalesced. tile_rows = min(rows, 32) and tile_cols = kPermuteTile / tile_rows: with
// RGB's 3 channels a tile is 3 whole rows of 341 pixels, and its dst region (341 pixels x 3
// channels) one contiguous run. One thread per element with the other side strided, as before,
// took 64-bit divisions per element and was compute-bound.
constexpr int kPermuteTile = 1024;

struct PermuteTiles {
  int64_t batch, rows, cols;  // per sample: src (rows, cols) -> dst (cols, rows)
  int tile_rows, tile_cols;
  int64_t row_tiles, col_tiles;
};

template <typename S, typename D>
__global__ void convert_permute_kernel(PermuteTiles t, const S* src, D* dst, float scale, const float* scale_at) {
  __shared__ float tile[kPermuteTile + 32];  // tile_rows x (tile_cols + 1): the pad spreads banks
  if (scale_at) scale = *scale_at;
  const int pitch = t.tile_cols + 1;
  const int64_t tiles = t.batch * t.row_tiles * t.col_tiles;
  for (int64_t k = blockIdx.x; k < tiles; k += gridDim.x) {
    const int64_t b = k / (t.row_tiles * t.col_tiles), rest = k % (t.row_tiles * t.col_tiles);
    const int64_t r0 = rest / t.col_tiles * t.tile_rows, c0 = rest % t.col_tiles * t.tile_cols;
    const int nr = static_cast<int>(t.rows - r0 < t.tile_rows ? t.rows - r0 : t.tile_rows);
    const int nc = static_cast<int>(t.cols - c0 < t.tile_cols ? t.cols - c0 : t.tile_cols);
    const S* s = src + b * t.rows * t.cols;
    for (int e = threadIdx.x; e < nr * nc; e += blockDim.x) {
      const int r = e / nc, c = e % nc;
      const float v = to_float(s[(r0 + r) * t.cols + c0 + c]);
      tile[r * pitch + c] = scale == 1.0f ? v : __fmul_rn(scale, v);
    }
    __syncthreads();
    D* d = dst + b * t.rows * t.cols;
    for (int e = threadIdx.x; e < nr * nc; e += blockDim.x) {
      const int c = e / nr, r = e % nr;
      d[(c0 + c) * t.rows + r0 + r] = from_float<D>(tile[r * pitch + c]);
    }
    __syncthreads();  // before the next tile overwrites this one
  }
}

PermuteTiles permute_tiles(int64_t n, const Permute& p) {
  PermuteTiles t;
  t.rows = p.to_nhwc ? p.c : p.hw;
  t.cols = p.to_nhwc ? p.hw : p.c;
  t.batch = n / (p.c * p.hw);
  t.tile_rows = static_cast<int>(t.rows < 32 ? t.rows : 32);
  t.tile_cols = kPermuteTile / t.tile_rows;
  t.row_tiles = (t.rows + t.tile_rows - 1) / t.tile_rows;
  t.col_tiles = (t.cols + t.tile_cols - 1) / t.tile_cols;
  return t;
}

__global__ void sgd_update_kernel(int64_t n, float* w, const float* dw, float* history, float lr, float momentum,
                                  float weight_decay) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    float g = __fadd_rn(dw[i], __fmul_rn(weight_decay, w[i]));
    float h = __fadd_rn(__fmul_rn(momentum, history[i]), __fmul_rn(lr, g));
    history[i] = h;
    w[i] = __fsub_rn(w[i], h);
  }
}

// Every parameter in one launch. Each element finds its segment by binary search over the segment
// starts (a few hundred at most, cached), then applies exactly sgd_update_kernel's arithmetic.
// lr_at != null: the learning rate is read from there when the kernel runs. mirror != null: the
// updated value is also written, rounded once to D, to its place in the segment's compute copy
// (SgdMirrors' map: offset, channels, pixels, reordered) -- the conversion the next forward would
// otherwise make, without reading the master a second time. mirror_grads != null: a mirrored
// element's gradient is read at that same place of the copies' gradients and widened (exactly: the
// pass it replaces multiplied the widened value by 1). flag != null: *tag_at goes to *flag (if 0)
// when a gradient read here is NaN or +-inf, one compare-and-swap per thread that saw one.
template <typename D>
__global__ void sgd_segments_kernel(int64_t n, float* w, const float* dw, float* history, const int32_t* ranges,
                                    const float* mults, int segments, float lr, const float* lr_at, float momentum,
                                    float weight_decay, const int32_t* skip_at, D* mirror, const int32_t* map,
                                    const D* mirror_grads, int32_t* flag, const int32_t* tag_at) {
  if (skip_at && *skip_at != 0) return;
  if (lr_at) lr = *lr_at;
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int lo = 0, hi = segments - 1;
    while (lo < hi) {  // the last segment whose start is <= i
      const int mid = (lo + hi + 1) / 2;
      if (ranges[2 * mid] <= i) lo = mid; else hi = mid - 1;
    }
    if (i < ranges[2 * lo] || i >= ranges[2 * lo + 1]) continue;
    // The element's place in its compute copy, or -1. Within a segment (< 2^31 elements: the flat
    // buffer is indexed by i32 ranges) 32-bit arithmetic.
    int copy = -1;
    if (mirror) {
      const int32_t* m = map + 4 * lo;
      if (m[0] >= 0) {
        int j = static_cast<int>(i - ranges[2 * lo]);
        if (m[3] != 0) {  // (K, C, P) -> (K, P, C)
          const int channels = m[1], pixels = m[2], per_filter = channels * pixels;
          const int k = j / per_filter, rest = j - k * per_filter, c = rest / pixels, p = rest - c * pixels;
          j = k * per_filter + p * channels + c;
        }
        copy = m[0] + j;
      }
    }
    const float grad = mirror_grads && copy >= 0 ? to_float(mirror_grads[copy]) : dw[i];
    bad |= !isfinite(grad);
    const float seg_lr = lr * mults[2 * lo], seg_decay = weight_decay * mults[2 * lo + 1];
    float g = __fadd_rn(grad, __fmul_rn(seg_decay, w[i]));
    float h = __fadd_rn(__fmul_rn(momentum, history[i]), __fmul_rn(seg_lr, g));
    history[i] = h;
    const float updated = __fsub_rn(w[i], h);
    w[i] = updated;
    if (copy >= 0) mirror[copy] = from_float<D>(updated);
  }
  if (flag && bad) atomicCAS(flag, 0, *tag_at);
}

// One thread: axpby_kernel's element unless the step is skipped.
__global__ void axpby_unless_kernel(float alpha, const float* x, float beta, float* y, const int32_t* skip) {
  if (skip && *skip != 0) return;
  *y = axpby_one(alpha, *x, beta, *y);  // beta 0 does not use y
}

// One thread: a handful of scalars, the rule of loss_scale_rule.hpp.
__global__ void update_loss_scale_kernel(const int32_t* found_inf, float* scale, int32_t* state, const int32_t* tag,
                                         int32_t* nonfinite, int64_t growth_interval, float max_scale) {
  LossScaleState s{scale[0], scale[1], state[0], state[1], state[2], *nonfinite};
  loss_scale_step(s, *found_inf != 0, *tag, growth_interval, max_scale);
  scale[0] = s.scale;
  scale[1] = s.inverse;
  state[0] = s.clean;
  state[1] = s.skipped;
  state[2] = s.skip;
  *nonfinite = s.nonfinite;
}

// A read of every element (bandwidth-bound, ~30 us for ResNet-34's 22 M gradients on an H100);
// one compare-and-swap per thread that saw a non-finite value, and none at all in a healthy step.
__global__ void flag_nonfinite_kernel(int64_t n, const float* x, int32_t tag, const int32_t* tag_at, int32_t* flag) {
  if (*flag != 0) return;  // already flagged: the first tag stays
  if (tag_at) tag = *tag_at;
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += global_stride()) bad |= !isfinite(x[i]);
  if (bad) atomicCAS(flag, 0, tag);
}

// One block: the loss is a device scalar, so the step needs no host round trip. Partial sums in
// double keep the result independent of the thread count to well below fp32 resolution.
constexpr int kLossThreads = 512;
__global__ void cross_entropy_kernel(const float* prob, const int32_t* labels, int64_t n, int64_t c, float* loss) {
  __shared__ double partial[kLossThreads];
  double acc = 0.0;
  int bad = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int32_t label = labels[i];
    if (label < 0 || label >= c) {
      bad = 1;
    } else {
      acc += static_cast<double>(logf(fmaxf(prob[i * c + label], FLT_MIN)));
    }
  }
  partial[threadIdx.x] = acc;
  bad = __syncthreads_or(bad);
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = bad ? NAN : static_cast<float>(-partial[0] / static_cast<double>(n));
}

__global__ void softmax_ce_backward_kernel(const float* prob, const int32_t* labels, int64_t n, int64_t c,
                                           float scale, float* dx) {
  for (int64_t i = global_index(); i < n * c; i += global_stride()) {
    int64_t row = i / c;
    int32_t label = labels[row];
    if (label < 0 || label >= c) {
      dx[i] = NAN;
    } else {
      float onehot = (i - row * c == label) ? 1.0f : 0.0f;
      dx[i] = __fmul_rn(scale, __fsub_rn(prob[i], onehot));
    }
  }
}

struct TopKList {
  int k[kMaxTopK];
  int count;
};

// One block of warps; a warp ranks one sample at a time (lanes stride over its row, so reads are
// coalesced), lane 0 keeps hit counts, and the block reduces them into `out`.
constexpr int kAccuracyThreads = 1024;
template <typename T>
__global__ void accuracy_kernel(const T* scores, const int32_t* labels, int64_t n, int64_t c, TopKList ks,
                                float* out) {
  constexpr int kWarps = kAccuracyThreads / 32;
  __shared__ long long warp_hits[kMaxTopK][kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long hits[kMaxTopK] = {0};
  int bad = 0;
  for (int64_t s = warp; s < n; s += kWarps) {
    int32_t label = labels[s];  // same for the whole warp: the branch below is warp-uniform
    if (label < 0 || label >= c) {
      bad = 1;
      continue;
    }
    const T* row = scores + s * c;
    const float label_score = to_float(row[label]);
    int above = 0;  // other classes scoring >= the label: ties count against the label
    for (int64_t j = lane; j < c; j += 32) above += (j != label && to_float(row[j]) >= label_score) ? 1 : 0;
    for (int off = 16; off > 0; off >>= 1) above += __shfl_down_sync(0xffffffffu, above, off);
    if (lane == 0)
      for (int t = 0; t < ks.count; ++t) hits[t] += above < ks.k[t] ? 1 : 0;
  }
  if (lane == 0)
    for (int t = 0; t < kMaxTopK; ++t) warp_hits[t][warp] = hits[t];
  bad = __syncthreads_or(bad);
  if (threadIdx.x < ks.count) {
    long long total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_hits[threadIdx.x][w];
    out[threadIdx.x] = bad ? NAN : static_cast<float>(static_cast<double>(total) / static_cast<double>(n));
  }
}

}  // namespace

void launch_fill_f32(float* p, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(p, n, value);
  CUDA_CHECK_LAUNCH("fill_kernel<float>");
}

void launch_fill_i32(int32_t* p, int64_t n, int32_t value, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<int32_t><<<blocks_for(n), kThreads, 0, stream>>>(p, n, value);
  CUDA_CHECK_LAUNCH("fill_kernel<int32_t>");
}

void launch_fill_float(DType t, void* p, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float(t, "fill", [&](auto e) {
    using T = decltype(e);
    fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(p), n, from_float<T>(value));
  });
  CUDA_CHECK_LAUNCH("fill_kernel");
}

void launch_convert(int64_t n, DType src_t, const void* src, DType dst_t, void* dst, float scale,
                    cudaStream_t stream, const Permute* permute, const float* scale_at) {
  if (n <= 0) return;
  dispatch_float(src_t, "convert", [&](auto s) {
    using S = decltype(s);
    dispatch_float(dst_t, "convert", [&](auto d) {
      using D = decltype(d);
      if (permute) {
        const PermuteTiles t = permute_tiles(n, *permute);
        const int64_t tiles = t.batch * t.row_tiles * t.col_tiles;
        constexpr int64_t kMaxTileBlocks = int64_t{1} << 16;  // grid-stride beyond
        convert_permute_kernel<S, D><<<static_cast<unsigned>(tiles < kMaxTileBlocks ? tiles : kMaxTileBlocks),
                                       kThreads, 0, stream>>>(t, static_cast<const S*>(src), static_cast<D*>(dst),
                                                              scale, scale_at);
      } else
        convert_kernel<S, D><<<blocks_for(n), kThreads, 0, stream>>>(n, static_cast<const S*>(src),
                                                                    static_cast<D*>(dst), scale, scale_at);
    });
  });
  CUDA_CHECK_LAUNCH("convert_kernel");
}

void launch_convert_segments(DType src_t, const void* src, DType dst_t, void* dst, const int32_t* ranges, int segments,
                             cudaStream_t stream) {
  if (segments <= 0) return;
  constexpr int kMaxBlocks = 1 << 16;
  const unsigned blocks = static_cast<unsigned>(segments < kMaxBlocks ? segments : kMaxBlocks);
  dispatch_float(src_t, "convert_segments", [&](auto s) {
    using S = decltype(s);
    dispatch_float(dst_t, "convert_segments", [&](auto d) {
      using D = decltype(d);
      convert_segments_kernel<S, D><<<blocks, kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst),
                                                                    ranges, segments);
    });
  });
  CUDA_CHECK_LAUNCH("convert_segments_kernel");
}

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

void launch_decode_bytes(int64_t n, int64_t c, int64_t h, int64_t w, const uint8_t* bytes, const int32_t* draws,
                         const float* affine, float* out, cudaStream_t stream) {
  const int64_t total = n * c * h * w;
  if (total <= 0) return;
  with_index_type(total, [&](auto index) {
    using I = decltype(index);
    decode_bytes_kernel<I><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<I>(total), static_cast<I>(c), static_cast<I>(h), static_cast<I>(w), bytes, draws, affine, out);
  });
  CUDA_CHECK_LAUNCH("decode_bytes_kernel");
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

namespace {
// f(W{}) with W the unsigned word of t's size, for kernels that move bits rather than values.
template <typename F>
void dispatch_word(DType t, const char* op, F&& f) {
  if (dtype_size(t) == 2)
    f(uint16_t{});
  else if (dtype_size(t) == 4)
    f(uint32_t{});
  else
    throw_no_kernel(op, t);
}
}  // namespace

void launch_copy_rows(DType t, int64_t rows, const void* src, int64_t src_cols, void* dst,
                      int64_t dst_cols, cudaStream_t stream) {
  const int64_t n = rows * dst_cols;
  if (n <= 0) return;
  // Bits are copied, not values: one kernel per element size.
  auto launch = [&](auto word) {
    using W = decltype(word);
    copy_rows_kernel<W><<<blocks_for(n), kThreads, 0, stream>>>(rows, static_cast<const W*>(src), src_cols,
                                                                static_cast<W*>(dst), dst_cols);
  };
  dispatch_word(t, "copy_rows", launch);
  CUDA_CHECK_LAUNCH("copy_rows_kernel");
}

void launch_im2col_nhwc(DType t, const Im2colShape& g, const void* x, void* col, cudaStream_t stream,
                        Im2colKernel kernel) {
  const int64_t n = g.n * g.oh * g.ow * g.cols;
  if (n <= 0) return;
  const int64_t size = static_cast<int64_t>(dtype_size(t));
  if (size != 2 && size != 4) throw_no_kernel("im2col_nhwc", t);
  // Bits are copied (zeros are all-zero bits in every float format), so a pixel's channels move as
  // the widest words that divide both its bytes and a lowered row's, and that both buffers are
  // aligned to: the kernel then sees "channels" of that word (50 bf16 channels are 25 words of 4
  // bytes), and each thread moves 4, 8 or 16 bytes instead of 2.
  const int64_t pixel_bytes = g.c * size, row_bytes = g.cols * size;
  const auto x_address = reinterpret_cast<uintptr_t>(x), col_address = reinterpret_cast<uintptr_t>(col);
  // The tiled kernel stores 16-byte words, so every lowered row must start 16-byte aligned, and
  // the staged patch of one output pixel (the narrowest run) must fit in shared memory.
  const bool tiles = row_bytes % 16 == 0 && col_address % 16 == 0 &&
                     im2col_tiled_shared_bytes(g, 1, pixel_bytes) <= kTiledSharedBytes;
  if (kernel == Im2colKernel::Tiled && !tiles)
    throw_kernel_unfit("im2col_nhwc",
                       "the tiled kernel needs 16-byte aligned rows and a receptive field that fits in shared memory");
  const bool tiled = kernel == Im2colKernel::Tiled || (kernel == Im2colKernel::Fastest && tiles);
  auto launch = [&](auto word) {
    using W = decltype(word);
    constexpr auto kWord = static_cast<int64_t>(sizeof(W));
    Im2colShape w = g;
    w.c = pixel_bytes / kWord;
    w.cols = row_bytes / kWord;
    const int64_t x_numel = w.n * w.h * w.w * w.c, rows = w.n * w.oh * w.ow;
    if (tiled) {
      // The widest run of output pixels whose patch fits: a whole output row where it can, so
      // each image row is staged once per output row that reads it.
      int tile = static_cast<int>(w.ow);
      while (tile > 1 && im2col_tiled_shared_bytes(w, tile, pixel_bytes) > kTiledSharedBytes) tile = (tile + 1) / 2;
      const int64_t tasks = w.n * w.oh * ((w.ow + tile - 1) / tile);
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(tasks, kMaxBlocks * 4));
      im2col_nhwc_tiled_kernel<W><<<blocks, kTiledThreads, im2col_tiled_shared_bytes(w, tile, pixel_bytes), stream>>>(
          w, tile, im2col_span(w, tile), static_cast<const W*>(x), static_cast<W*>(col));
      return;
    }
    // 128 threads cover a row of a few hundred columns in few passes; enough blocks to fill the GPU.
    constexpr int kRowThreads = 128;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, kMaxBlocks * 4));
    const size_t table = 3 * static_cast<size_t>(w.cols) * sizeof(int);
    if (std::max((rows + blocks) * w.cols, x_numel) < int64_t{1} << 31)  // signed 32 bits, a stride past the end too
      im2col_nhwc_kernel<W, int32_t>
          <<<blocks, kRowThreads, table, stream>>>(w, static_cast<const W*>(x), static_cast<W*>(col));
    else
      im2col_nhwc_kernel<W, int64_t>
          <<<blocks, kRowThreads, table, stream>>>(w, static_cast<const W*>(x), static_cast<W*>(col));
  };
  // The tiled kernel reads x in pixel-wide units and stages them; only x's alignment limits them.
  const auto address = tiled ? x_address : (x_address | col_address);
  auto fits = [&](int64_t word) {
    return pixel_bytes % word == 0 && (tiled || row_bytes % word == 0) && address % static_cast<uintptr_t>(word) == 0;
  };
  if (fits(16))
    launch(uint4{});
  else if (fits(8))
    launch(uint2{});
  else if (fits(4))
    launch(uint32_t{});
  else
    launch(uint16_t{});
  CUDA_CHECK_LAUNCH("im2col_nhwc_kernel");
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

void launch_sgd_update(int64_t n, float* w, const float* dw, float* history, float lr, float momentum,
                       float weight_decay, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_update_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, w, dw, history, lr, momentum, weight_decay);
  CUDA_CHECK_LAUNCH("sgd_update_kernel");
}

void launch_sgd_segments(int64_t n, float* w, const float* dw, float* history, const int32_t* ranges,
                         const float* mults, int segments, float lr, const float* lr_at, float momentum,
                         float weight_decay, cudaStream_t stream, const int32_t* skip_at, const SegmentMirror& mirror,
                         int32_t* flag, const int32_t* tag_at) {
  if (n <= 0 || segments <= 0) return;
  if (!mirror.data) {
    sgd_segments_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(n, w, dw, history, ranges, mults, segments,
                                                                       lr, lr_at, momentum, weight_decay, skip_at,
                                                                       nullptr, nullptr, nullptr, flag, tag_at);
  } else {
    dispatch_float(mirror.dtype, "sgd_update_segments mirror", [&](auto d) {
      using D = decltype(d);
      sgd_segments_kernel<D><<<blocks_for(n), kThreads, 0, stream>>>(
          n, w, dw, history, ranges, mults, segments, lr, lr_at, momentum, weight_decay, skip_at,
          static_cast<D*>(mirror.data), mirror.map, static_cast<const D*>(mirror.grads), flag, tag_at);
    });
  }
  CUDA_CHECK_LAUNCH("sgd_segments_kernel");
}

void launch_axpby_unless(float alpha, const float* x, float beta, float* y, const int32_t* skip, cudaStream_t stream) {
  axpby_unless_kernel<<<1, 1, 0, stream>>>(alpha, x, beta, y, skip);
  CUDA_CHECK_LAUNCH("axpby_unless_kernel");
}

void launch_update_loss_scale(const int32_t* found_inf, float* scale, int32_t* state, const int32_t* tag,
                              int32_t* nonfinite, int64_t growth_interval, float max_scale, cudaStream_t stream) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(found_inf, scale, state, tag, nonfinite, growth_interval, max_scale);
  CUDA_CHECK_LAUNCH("update_loss_scale_kernel");
}

void launch_flag_nonfinite(int64_t n, const float* x, int32_t tag, const int32_t* tag_at, int32_t* flag,
                           cudaStream_t stream) {
  if (n <= 0) return;
  flag_nonfinite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, x, tag, tag_at, flag);
  CUDA_CHECK_LAUNCH("flag_nonfinite_kernel");
}

void launch_cross_entropy_loss(const float* prob, const int32_t* labels, int64_t n, int64_t c, float* loss,
                               cudaStream_t stream) {
  cross_entropy_kernel<<<1, kLossThreads, 0, stream>>>(prob, labels, n, c, loss);
  CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

void launch_softmax_cross_entropy_backward(const float* prob, const int32_t* labels, int64_t n, int64_t c,
                                           float scale, float* dx, cudaStream_t stream) {
  if (n * c <= 0) return;
  softmax_ce_backward_kernel<<<blocks_for(n * c), kThreads, 0, stream>>>(prob, labels, n, c, scale, dx);
  CUDA_CHECK_LAUNCH("softmax_ce_backward_kernel");
}

void launch_accuracy_topk(DType t, const void* scores, const int32_t* labels, int64_t n, int64_t c, const int* ks,
                          int num_k, float* out, cudaStream_t stream) {
  TopKList list{};
  for (int i = 0; i < num_k && i < kMaxTopK; ++i) list.k[i] = ks[i];
  list.count = num_k < kMaxTopK ? num_k : kMaxTopK;
  dispatch_float(t, "accuracy_topk", [&](auto e) {
    using T = decltype(e);
    accuracy_kernel<T><<<1, kAccuracyThreads, 0, stream>>>(static_cast<const T*>(scores), labels, n, c, list, out);
  });
  CUDA_CHECK_LAUNCH("accuracy_kernel");
}

}  // namespace cnnscale::cuda
