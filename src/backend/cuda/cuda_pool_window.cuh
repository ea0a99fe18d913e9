// The device-side geometry of Caffe's pooling windows that cuda_pool_kernels.cu's kernels share:
// where an element lies in either memory order, a window's first maximum, the outputs whose windows
// cover a pixel and a pixel's offset in a window; for the channels-last packed kernels, a pack's
// place and the per-lane argmax bytes they save and read. Included by cuda_pool_kernels.cu only.
#pragma once

#include <cfloat>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"

namespace cnnscale::cuda {
namespace {

// Where element i of an (N, C, rows, cols) grid lies, in either memory order: the offsets of its
// (n, c) plane in x (H x W) and in y (PH x PW), the distance between neighbouring pixels of a plane
// (1 in NCHW, C in NHWC), and its pixel (r, col). The kernels run one thread per element in memory
// order, so neighbouring threads touch neighbouring addresses in both orders (channels in NHWC).
struct Site {
  int64_t x_plane, y_plane;
  int step;
  int r, col;
};

__device__ Site site(const PoolGeometry& g, int64_t i, int rows, int cols) {
  Site s;
  const int64_t hw = static_cast<int64_t>(g.height) * g.width, phw = static_cast<int64_t>(g.pooled_height) * g.pooled_width;
  if (g.channels_last) {
    const int64_t c = i % g.channels, pixel = i / g.channels;
    s.col = static_cast<int>(pixel % cols);
    s.r = static_cast<int>((pixel / cols) % rows);
    const int64_t n = pixel / (static_cast<int64_t>(cols) * rows);
    s.x_plane = n * hw * g.channels + c;
    s.y_plane = n * phw * g.channels + c;
    s.step = g.channels;
  } else {
    s.col = static_cast<int>(i % cols);
    s.r = static_cast<int>((i / cols) % rows);
    const int64_t plane = i / (static_cast<int64_t>(cols) * rows);
    s.x_plane = plane * hw;
    s.y_plane = plane * phw;
    s.step = 1;
  }
  return s;
}

// Pixel index (h * W + w) of the first maximum of window (ph, pw) of `plane` (pixels `step`
// elements apart), as Caffe's forward picks it.
template <typename T>
__device__ int window_argmax(const PoolGeometry& g, const T* plane, int step, int ph, int pw) {
  int hstart = ph * g.stride_h - g.pad_h, wstart = pw * g.stride_w - g.pad_w;
  int hend = min(hstart + g.kernel_h, g.height), wend = min(wstart + g.kernel_w, g.width);
  hstart = max(hstart, 0);
  wstart = max(wstart, 0);
  float maxval = -FLT_MAX;
  int maxidx = -1;
  for (int h = hstart; h < hend; ++h)
    for (int w = wstart; w < wend; ++w) {
      const float v = to_float(plane[static_cast<int64_t>(h * g.width + w) * step]);
      if (v > maxval) {
        maxidx = h * g.width + w;
        maxval = v;
      }
    }
  return maxidx;
}

// The pooled outputs whose windows cover input pixel (h, w): rows [ph0, ph1), columns [pw0, pw1)
// (Caffe's MaxPoolBackward bounds).
struct Covering {
  int ph0, ph1, pw0, pw1;
};

__device__ Covering covering(const PoolGeometry& g, int h, int w) {
  Covering c;
  c.ph0 = (h + g.pad_h < g.kernel_h) ? 0 : (h + g.pad_h - g.kernel_h) / g.stride_h + 1;
  c.ph1 = min((h + g.pad_h) / g.stride_h + 1, g.pooled_height);
  c.pw0 = (w + g.pad_w < g.kernel_w) ? 0 : (w + g.pad_w - g.kernel_w) / g.stride_w + 1;
  c.pw1 = min((w + g.pad_w) / g.stride_w + 1, g.pooled_width);
  return c;
}

// Offset of pixel (h, w) in the unclipped window of output (ph, pw): (h - hstart) * kernel_w +
// (w - wstart), below kernel_h * kernel_w.
__device__ int window_offset(const PoolGeometry& g, int h, int w, int ph, int pw) {
  return (h - (ph * g.stride_h - g.pad_h)) * g.kernel_w + (w - (pw * g.stride_w - g.pad_w));
}

// Pack i of a channels-last (N, rows, cols, packs_per_pixel) grid of 16-byte packs: its sample n,
// its pack q within the pixel, and the pixel (r, col). One decomposition per pack, in I arithmetic.
template <typename I>
struct PackSite {
  I n, q;
  int r, col;
};

template <typename I>
__device__ PackSite<I> pack_site(I i, I packs_per_pixel, int rows, int cols) {
  PackSite<I> s;
  s.q = i % packs_per_pixel;
  I pixel = i / packs_per_pixel;
  s.col = static_cast<int>(pixel % static_cast<I>(cols));
  pixel /= static_cast<I>(cols);
  s.r = static_cast<int>(pixel % static_cast<I>(rows));
  s.n = pixel / static_cast<I>(rows);
  return s;
}

// Each lane's first maximum in window (ph, pw) of the pack column `xp` (pixels packs_per_pixel
// packs apart), as its window_offset; 0xff for a lane whose window holds no value above -FLT_MAX.
template <typename T, typename I>
__device__ void lane_argmax(const PoolGeometry& g, const Pack<T>* xp, I packs_per_pixel, int ph, int pw,
                            uint8_t (&at)[Pack<T>::kCount]) {
  constexpr int kLanes = Pack<T>::kCount;
  const int h0 = ph * g.stride_h - g.pad_h, w0 = pw * g.stride_w - g.pad_w;
  const int hend = min(h0 + g.kernel_h, g.height), wend = min(w0 + g.kernel_w, g.width);
  float best[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    best[l] = -FLT_MAX;
    at[l] = 0xff;
  }
  for (int hh = max(h0, 0); hh < hend; ++hh)
    for (int ww = max(w0, 0); ww < wend; ++ww) {
      const Pack<T> v = xp[static_cast<I>(hh * g.width + ww) * packs_per_pixel];
      const uint8_t offset = static_cast<uint8_t>(window_offset(g, hh, ww, ph, pw));
      for (int l = 0; l < kLanes; ++l)
        if (to_float(v.v[l]) > best[l]) {
          best[l] = to_float(v.v[l]);
          at[l] = offset;
        }
    }
}

// A pack's lane bytes as one 8- or 4-byte store at pack i of `arg`.
template <int kLanes, typename I>
__device__ __forceinline__ void store_lane_bytes(uint8_t* arg, I i, const uint8_t (&at)[kLanes]) {
  static_assert(kLanes == 8 || kLanes == 4, "16-byte packs of 2- or 4-byte lanes");
  if constexpr (kLanes == 8) {
    uint2 word;
    memcpy(&word, at, sizeof word);
    reinterpret_cast<uint2*>(arg)[i] = word;
  } else {
    uint32_t word;
    memcpy(&word, at, sizeof word);
    reinterpret_cast<uint32_t*>(arg)[i] = word;
  }
}

// A pack's lane bytes, loaded as one 8- or 4-byte word from pack o of `arg`.
template <int kLanes, typename I>
__device__ __forceinline__ void load_lane_bytes(const uint8_t* arg, I o, uint8_t (&a)[kLanes]) {
  if constexpr (kLanes == 8) {
    const uint2 word = reinterpret_cast<const uint2*>(arg)[o];
    memcpy(a, &word, sizeof word);
  } else {
    const uint32_t word = reinterpret_cast<const uint32_t*>(arg)[o];
    memcpy(a, &word, sizeof word);
  }
}

}  // namespace
}  // namespace cnnscale::cuda
