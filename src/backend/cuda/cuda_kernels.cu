// cnnscale's own kernels that move data: fill, row copies, the channels-last im2col (plain and
// tiled), dtype conversion (whole, by segment, and permuting layouts) and the decode of byte samples.
// Their arithmetic kernels are in cuda_elementwise_kernels.cu (element-wise and bias ops) and
// cuda_step_kernels.cu (update, loss scaling, loss and accuracy).
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

// Byte samples (n, c, h, w) to f32 NCHW input, moved and mirrored by each sample's draw (null: none);
// one thread an output element. I: the index type (with_index_type). The value is drawn_input's
// (core/byte_input.hpp), the rule the host's augmentation and the CPU decode follow. `negates`:
// affine has a third block of c values, non-zero for each channel a mirror negates (x-flow).
template <typename I>
__global__ void decode_bytes_kernel(I total, I c, I h, I w, const uint8_t* in, const int32_t* draws,
                                    const float* affine, bool negates, float* out) {
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const I x = i % w, y = (i / w) % h, ch = (i / (w * h)) % c, n = i / (w * h * c);
    const int32_t* d = draws ? draws + static_cast<int64_t>(n) * kDrawInts : nullptr;
    const bool negate = negates && affine[2 * c + ch] != 0.0f;
    out[i] = drawn_input(in + (i - y * w - x), y, x, h, w, d ? d[0] : 0, d ? d[1] : 0, d && d[2] != 0, negate,
                         affine[ch], affine[c + ch]);
  }
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

void launch_decode_bytes(int64_t n, int64_t c, int64_t h, int64_t w, const uint8_t* bytes, const int32_t* draws,
                         const float* affine, bool negates, float* out, cudaStream_t stream) {
  const int64_t total = n * c * h * w;
  if (total <= 0) return;
  with_index_type(total, [&](auto index) {
    using I = decltype(index);
    decode_bytes_kernel<I><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<I>(total), static_cast<I>(c),
                                                                       static_cast<I>(h), static_cast<I>(w), bytes,
                                                                       draws, affine, negates, out);
  });
  CUDA_CHECK_LAUNCH("decode_bytes_kernel");
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

}  // namespace cnnscale::cuda
