// Caffe's max/average pooling (BVLC caffe/src/caffe/layers/pooling_layer.cu) for the shapes cuDNN
// cannot express: Caffe's ceil-mode output can have one more row/column than cuDNN's floor rule,
// and that last window hangs over the bottom/right edge, i.e. asymmetric padding.
// Max backward finds each window's argmax from x, or reads the bytes the channels-last forward
// saved (launch_max_pool_forward_nhwc), with Caffe's rule that the first maximum in row-major order
// wins, and gathers per input element (deterministic).
// Templated on the storage (f32, bf16, f16); sums and divisions are done in float. Either memory
// order (NCHW or NHWC), so channels-last 16-bit activations need no reordered copies.
#include <cfloat>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_pool_window.cuh"

namespace cnnscale::cuda {
namespace {

template <typename T>
__global__ void max_pool_forward_kernel(PoolGeometry g, const T* x, T* y) {
  const int64_t total = g.planes * g.pooled_height * g.pooled_width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const Site s = site(g, i, g.pooled_height, g.pooled_width);
    const T* xp = x + s.x_plane;
    int idx = window_argmax(g, xp, s.step, s.r, s.col);
    y[i] = idx >= 0 ? xp[static_cast<int64_t>(idx) * s.step] : from_float<T>(-FLT_MAX);
  }
}

template <typename T>
__global__ void avg_pool_forward_kernel(PoolGeometry g, const T* x, T* y) {
  const int64_t total = g.planes * g.pooled_height * g.pooled_width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const Site s = site(g, i, g.pooled_height, g.pooled_width);
    int hstart = s.r * g.stride_h - g.pad_h, wstart = s.col * g.stride_w - g.pad_w;
    // Caffe divides by the window clipped to the padded extent (padding counts, overhang does not).
    int hend = min(hstart + g.kernel_h, g.height + g.pad_h), wend = min(wstart + g.kernel_w, g.width + g.pad_w);
    int pool_size = (hend - hstart) * (wend - wstart);
    hstart = max(hstart, 0);
    wstart = max(wstart, 0);
    hend = min(hend, g.height);
    wend = min(wend, g.width);
    const T* xp = x + s.x_plane;
    float sum = 0.0f;
    for (int h = hstart; h < hend; ++h)
      for (int w = wstart; w < wend; ++w) sum += to_float(xp[static_cast<int64_t>(h * g.width + w) * s.step]);
    y[i] = from_float<T>(sum / pool_size);
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(PoolGeometry g, const T* x, const T* y, const T* dy, T* dx) {
  const int64_t total = g.planes * g.height * g.width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const Site s = site(g, i, g.height, g.width);
    const int h = s.r, w = s.col;
    const Covering cov = covering(g, h, w);
    const T* xp = x + s.x_plane;
    const float xv = to_float(x[i]);
    float grad = 0.0f;
    for (int ph = cov.ph0; ph < cov.ph1; ++ph)
      for (int pw = cov.pw0; pw < cov.pw1; ++pw) {
        const int64_t o = s.y_plane + static_cast<int64_t>(ph * g.pooled_width + pw) * s.step;
        // Cheap reject first; only an element equal to the window's max can be its argmax.
        if (to_float(y[o]) == xv && window_argmax(g, xp, s.step, ph, pw) == h * g.width + w) grad += to_float(dy[o]);
      }
    dx[i] = from_float<T>(grad);
  }
}

// Channels-last max backward, one thread per pixel and 16 bytes of its channels (8 bf16/f16 or 4
// f32 lanes): the same gather and first-maximum rule as max_pool_backward_kernel, lane by lane,
// with one index decomposition per pack and 16-byte loads. Per element, that kernel's 64-bit
// index arithmetic made it compute-bound, some twenty times its traffic's time on ResNet-34's
// pool1 backward (docs/measurements/2026-11-25-cuda-kernel-choices.md). I is the index type:
// 32-bit when the pack count allows (integer division is much cheaper in 32 bits).
template <typename T, typename I>
__global__ void max_pool_backward_nhwc_kernel(PoolGeometry g, I packs_per_pixel, I total, const Pack<T>* x,
                                              const Pack<T>* y, const Pack<T>* dy, Pack<T>* dx) {
  constexpr int kLanes = Pack<T>::kCount;
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const PackSite<I> s = pack_site(i, packs_per_pixel, g.height, g.width);
    const I n = s.n, q = s.q;
    const int h = s.r, w = s.col;
    const Pack<T>* xp = x + n * static_cast<I>(g.height * g.width) * packs_per_pixel + q;
    const Pack<T>* yp = y + n * static_cast<I>(g.pooled_height * g.pooled_width) * packs_per_pixel + q;
    const Pack<T>* dyp = dy + (yp - y);
    const Pack<T> xv = x[i];
    float grad[kLanes] = {};
    const Covering cov = covering(g, h, w);
    for (int ph = cov.ph0; ph < cov.ph1; ++ph)
      for (int pw = cov.pw0; pw < cov.pw1; ++pw) {
        const I o = static_cast<I>(ph * g.pooled_width + pw) * packs_per_pixel;
        const Pack<T> yv = yp[o];
        bool any = false;
        for (int l = 0; l < kLanes; ++l) any |= to_float(yv.v[l]) == to_float(xv.v[l]);
        if (!any) continue;  // (h, w) is no lane's maximum in this window
        uint8_t at[kLanes];
        lane_argmax(g, xp, packs_per_pixel, ph, pw, at);
        const uint8_t mine = static_cast<uint8_t>(window_offset(g, h, w, ph, pw));
        const Pack<T> d = dyp[o];
        for (int l = 0; l < kLanes; ++l)
          if (at[l] == mine) grad[l] += to_float(d.v[l]);
      }
    Pack<T> out;
    for (int l = 0; l < kLanes; ++l) out.v[l] = from_float<T>(grad[l]);
    dx[i] = out;
  }
}

// Overlapping channels-last windows (ResNet's 3x3 stride-2 pool) in two passes. Recomputing a
// window's argmax for every input it covers (max_pool_backward_nhwc_kernel) reads each x pack
// about twenty times (docs/measurements/2026-11-25-cuda-kernel-choices.md). Instead, one
// thread per y pack finds each lane's first maximum once and stores its offset in the unclipped
// window (h - hstart) * kernel_w + (w - wstart), a byte; the gather then compares bytes.
template <typename T, typename I>
__global__ void max_pool_argmax_nhwc_kernel(PoolGeometry g, I packs_per_pixel, I total, const Pack<T>* x,
                                            uint8_t* arg) {
  constexpr int kLanes = Pack<T>::kCount;
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const PackSite<I> s = pack_site(i, packs_per_pixel, g.pooled_height, g.pooled_width);
    const I n = s.n, q = s.q;
    const int ph = s.r, pw = s.col;
    const Pack<T>* xp = x + n * static_cast<I>(g.height * g.width) * packs_per_pixel + q;
    uint8_t at[kLanes];
    lane_argmax(g, xp, packs_per_pixel, ph, pw, at);
    store_lane_bytes<kLanes>(arg, i, at);
  }
}

// One thread per x pack sums the dy of the windows whose argmax byte names its pixel. kCover > 0:
// no pixel lies in more than kCover windows along either axis (ceil(kernel / stride), 2 for
// ResNet's 3x3 stride-2 pool), and the thread issues all its windows' loads before using any, so
// it waits for memory once instead of once per window: window by window, ResNet-34's pool1 gather
// took about three times its traffic's time (docs/measurements/2026-11-25-cuda-kernel-choices.md).
// kCover = 0 walks any number of windows.
template <typename T, typename I, int kCover>
__global__ void max_pool_gather_nhwc_kernel(PoolGeometry g, I packs_per_pixel, I total, const uint8_t* arg,
                                            const Pack<T>* dy, Pack<T>* dx) {
  constexpr int kLanes = Pack<T>::kCount;
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const PackSite<I> s = pack_site(i, packs_per_pixel, g.height, g.width);
    const I n = s.n, q = s.q;
    const int h = s.r, w = s.col;
    const I y_base = n * static_cast<I>(g.pooled_height * g.pooled_width) * packs_per_pixel + q;
    float grad[kLanes] = {};
    const Covering cov = covering(g, h, w);
    auto add = [&](const uint8_t (&a)[kLanes], uint8_t mine, const Pack<T>& d) {
      for (int l = 0; l < kLanes; ++l)
        if (a[l] == mine) grad[l] += to_float(d.v[l]);
    };
    if constexpr (kCover > 0) {
      uint8_t a[kCover][kCover][kLanes];
      Pack<T> d[kCover][kCover];
#pragma unroll
      for (int u = 0; u < kCover; ++u)
#pragma unroll
        for (int v = 0; v < kCover; ++v) {
          const int ph = cov.ph0 + u, pw = cov.pw0 + v;
          if (ph < cov.ph1 && pw < cov.pw1) {
            const I o = y_base + static_cast<I>(ph * g.pooled_width + pw) * packs_per_pixel;
            load_lane_bytes<kLanes>(arg, o, a[u][v]);
            d[u][v] = dy[o];
          }
        }
      // Windows in the same row-major order as the loop below, so each lane sums in the same order.
#pragma unroll
      for (int u = 0; u < kCover; ++u)
#pragma unroll
        for (int v = 0; v < kCover; ++v) {
          const int ph = cov.ph0 + u, pw = cov.pw0 + v;
          if (ph < cov.ph1 && pw < cov.pw1) add(a[u][v], static_cast<uint8_t>(window_offset(g, h, w, ph, pw)), d[u][v]);
        }
    } else {
      for (int ph = cov.ph0; ph < cov.ph1; ++ph)
        for (int pw = cov.pw0; pw < cov.pw1; ++pw) {
          const I o = y_base + static_cast<I>(ph * g.pooled_width + pw) * packs_per_pixel;
          uint8_t a[kLanes];
          load_lane_bytes<kLanes>(arg, o, a);
          const uint8_t mine = static_cast<uint8_t>(window_offset(g, h, w, ph, pw));
          bool any = false;
          for (int l = 0; l < kLanes; ++l) any |= a[l] == mine;
          if (!any) continue;
          add(a, mine, dy[o]);
        }
    }
    Pack<T> out;
    for (int l = 0; l < kLanes; ++l) out.v[l] = from_float<T>(grad[l]);
    dx[i] = out;
  }
}

// Channels-last max forward, one thread per y pixel and 16 bytes of its channels: each lane keeps
// the first maximum of its window (ties keep the earlier value, which is the same value). cuDNN's
// channels-last max pooling read its input at about a third of the memory bandwidth
// (docs/measurements/2026-11-25-cuda-kernel-choices.md).
// With `arg`, each lane's first maximum is also stored as lane_argmax stores it (the same strict
// comparison in the same window order), so a gather over it routes dy exactly as after the
// argmax pass.
template <typename T, typename I>
__global__ void max_pool_forward_nhwc_kernel(PoolGeometry g, I packs_per_pixel, I total, const Pack<T>* x,
                                             Pack<T>* y, uint8_t* arg) {
  constexpr int kLanes = Pack<T>::kCount;
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const PackSite<I> s = pack_site(i, packs_per_pixel, g.pooled_height, g.pooled_width);
    const Pack<T>* xp = x + s.n * static_cast<I>(g.height * g.width) * packs_per_pixel + s.q;
    const int h0 = s.r * g.stride_h - g.pad_h, w0 = s.col * g.stride_w - g.pad_w;
    const int hend = min(h0 + g.kernel_h, g.height), wend = min(w0 + g.kernel_w, g.width);
    float best[kLanes];
    Pack<T> out;
    uint8_t at[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      best[l] = -FLT_MAX;
      out.v[l] = from_float<T>(-FLT_MAX);  // a window with nothing above -FLT_MAX, as the scalar kernel
      at[l] = 0xff;
    }
    for (int hh = max(h0, 0); hh < hend; ++hh)
      for (int ww = max(w0, 0); ww < wend; ++ww) {
        const Pack<T> v = xp[static_cast<I>(hh * g.width + ww) * packs_per_pixel];
        const uint8_t offset = static_cast<uint8_t>((hh - h0) * g.kernel_w + (ww - w0));  // window_offset
        for (int l = 0; l < kLanes; ++l)
          if (to_float(v.v[l]) > best[l]) {
            best[l] = to_float(v.v[l]);
            out.v[l] = v.v[l];
            at[l] = offset;
          }
      }
    y[i] = out;
    if (arg) store_lane_bytes<kLanes>(arg, i, at);
  }
}

// Channels-last max backward where the windows tile x exactly (stride = kernel, no padding, every
// pixel in one window: the gait 2D-CNN's pools), one thread per y pixel and 16 bytes of channels:
// the window's first maxima are found once and its dx pixels written once, each lane dy at its
// argmax and 0 elsewhere. The per-input gather reads every window's x about five times over.
template <typename T, typename I>
__global__ void max_pool_tiled_backward_nhwc_kernel(PoolGeometry g, I packs_per_pixel, I total, const Pack<T>* x,
                                                    const Pack<T>* dy, Pack<T>* dx) {
  constexpr int kLanes = Pack<T>::kCount;
  for (I i = static_cast<I>(global_index()); i < total; i += static_cast<I>(global_stride())) {
    const PackSite<I> s = pack_site(i, packs_per_pixel, g.pooled_height, g.pooled_width);
    const I base = s.n * static_cast<I>(g.height * g.width) * packs_per_pixel + s.q;
    uint8_t at[kLanes];
    lane_argmax(g, x + base, packs_per_pixel, s.r, s.col, at);
    const Pack<T> d = dy[i];
    const int h0 = s.r * g.stride_h, w0 = s.col * g.stride_w;
    for (int hh = h0; hh < h0 + g.kernel_h; ++hh)
      for (int ww = w0; ww < w0 + g.kernel_w; ++ww) {
        const uint8_t mine = static_cast<uint8_t>(window_offset(g, hh, ww, s.r, s.col));
        Pack<T> out;
        // 0 + dy as the gather sums it: -0 becomes +0 there, and must here too.
        for (int l = 0; l < kLanes; ++l) out.v[l] = from_float<T>(at[l] == mine ? 0.0f + to_float(d.v[l]) : 0.0f);
        dx[base + static_cast<I>(hh * g.width + ww) * packs_per_pixel] = out;
      }
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(PoolGeometry g, const T* dy, T* dx) {
  const int64_t total = g.planes * g.height * g.width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const Site s = site(g, i, g.height, g.width);
    const int h = s.r + g.pad_h, w = s.col + g.pad_w;
    int phstart = (h < g.kernel_h) ? 0 : (h - g.kernel_h) / g.stride_h + 1;
    int phend = min(h / g.stride_h + 1, g.pooled_height);
    int pwstart = (w < g.kernel_w) ? 0 : (w - g.kernel_w) / g.stride_w + 1;
    int pwend = min(w / g.stride_w + 1, g.pooled_width);
    const T* dyp = dy + s.y_plane;
    float grad = 0.0f;
    for (int ph = phstart; ph < phend; ++ph)
      for (int pw = pwstart; pw < pwend; ++pw) {
        int hstart = ph * g.stride_h - g.pad_h, wstart = pw * g.stride_w - g.pad_w;
        int hend = min(hstart + g.kernel_h, g.height + g.pad_h), wend = min(wstart + g.kernel_w, g.width + g.pad_w);
        int pool_size = (hend - hstart) * (wend - wstart);
        grad += to_float(dyp[static_cast<int64_t>(ph * g.pooled_width + pw) * s.step]) / pool_size;
      }
    dx[i] = from_float<T>(grad);
  }
}

}  // namespace

void launch_caffe_max_pool_forward(const PoolGeometry& g, DType t, const void* x, void* y, cudaStream_t stream) {
  int64_t n = g.planes * g.pooled_height * g.pooled_width;
  if (n <= 0) return;
  dispatch_float(t, "pool_forward", [&](auto e) {
    using T = decltype(e);
    max_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(x), static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH("max_pool_forward_kernel");
}

bool max_pool_gathers_argmax(const PoolGeometry& g, DType t) {
  const int lanes = 16 / static_cast<int>(dtype_size(t));
  const bool overlapping = g.stride_h < g.kernel_h || g.stride_w < g.kernel_w;
  return g.channels_last && g.channels % lanes == 0 && g.kernel_h * g.kernel_w <= 255 && overlapping;
}

bool launch_max_pool_forward_nhwc(const PoolGeometry& g, DType t, const void* x, void* y, cudaStream_t stream,
                                  uint8_t* window_argmax) {
  const int64_t n = g.planes * g.pooled_height * g.pooled_width;
  bool launched = false;
  dispatch_float(t, "pool_forward", [&](auto e) {
    using T = decltype(e);
    constexpr int kLanes = Pack<T>::kCount;
    if (!g.channels_last || g.channels % kLanes != 0 || !aligned16(x) || !aligned16(y)) return;
    if (window_argmax && !max_pool_gathers_argmax(g, t))
      throw_kernel_unfit("pool_forward", "window argmax bytes asked for a pooling whose backward does not gather");
    launched = true;
    if (n <= 0) return;
    // The kernel forms x offsets: x's pack count bounds the index type (it can exceed y's many times).
    const int64_t x_packs = g.planes * g.height * g.width / kLanes;
    with_index_type(x_packs > n / kLanes ? x_packs : n / kLanes, [&](auto index) {
      using I = decltype(index);
      max_pool_forward_nhwc_kernel<T, I><<<blocks_for(n / kLanes), kThreads, 0, stream>>>(
          g, static_cast<I>(g.channels / kLanes), static_cast<I>(n / kLanes), static_cast<const Pack<T>*>(x),
          static_cast<Pack<T>*>(y), window_argmax);
    });
  });
  if (launched) CUDA_CHECK_LAUNCH("max_pool_forward_nhwc_kernel");
  return launched;
}

void launch_caffe_avg_pool_forward(const PoolGeometry& g, DType t, const void* x, void* y, cudaStream_t stream) {
  int64_t n = g.planes * g.pooled_height * g.pooled_width;
  if (n <= 0) return;
  dispatch_float(t, "pool_forward", [&](auto e) {
    using T = decltype(e);
    avg_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(x), static_cast<T*>(y));
  });
  CUDA_CHECK_LAUNCH("avg_pool_forward_kernel");
}

void launch_caffe_max_pool_backward(const PoolGeometry& g, DType t, const void* x, const void* y, const void* dy,
                                    void* dx, cudaStream_t stream, uint8_t* window_argmax, bool argmax_saved) {
  int64_t n = g.planes * g.height * g.width;
  if (n <= 0) return;
  dispatch_float(t, "pool_backward", [&](auto e) {
    using T = decltype(e);
    constexpr int kLanes = Pack<T>::kCount;
    // The packed kernels keep window offsets in a byte (lane_argmax): windows of at most 255 pixels.
    if (g.channels_last && g.channels % kLanes == 0 && g.kernel_h * g.kernel_w <= 255 && aligned16(x) &&
        aligned16(y) && aligned16(dy) && aligned16(dx)) {
      const int64_t packs = n / kLanes, per_pixel = g.channels / kLanes;
      const int64_t y_packs = g.planes * g.pooled_height * g.pooled_width / kLanes;
      const bool tiling = g.stride_h == g.kernel_h && g.stride_w == g.kernel_w && g.pad_h == 0 && g.pad_w == 0 &&
                          g.height == g.pooled_height * g.kernel_h && g.width == g.pooled_width * g.kernel_w;
      auto launch = [&](auto index) {
        using I = decltype(index);
        if (tiling) {
          max_pool_tiled_backward_nhwc_kernel<T, I><<<blocks_for(y_packs), kThreads, 0, stream>>>(
              g, static_cast<I>(per_pixel), static_cast<I>(y_packs), static_cast<const Pack<T>*>(x),
              static_cast<const Pack<T>*>(dy), static_cast<Pack<T>*>(dx));
          return;
        }
        if (window_argmax && max_pool_gathers_argmax(g, t)) {  // overlapping windows, given the packs
          if (!argmax_saved) {
            max_pool_argmax_nhwc_kernel<T, I><<<blocks_for(y_packs), kThreads, 0, stream>>>(
                g, static_cast<I>(per_pixel), static_cast<I>(y_packs), static_cast<const Pack<T>*>(x), window_argmax);
            CUDA_CHECK_LAUNCH("max_pool_argmax_nhwc_kernel");
          }
          // At most 2 windows per axis cover a pixel (ceil(kernel / stride) <= 2): the unrolled gather.
          const bool two = (g.kernel_h + g.stride_h - 1) / g.stride_h <= 2 &&
                           (g.kernel_w + g.stride_w - 1) / g.stride_w <= 2;
          if (two)
            max_pool_gather_nhwc_kernel<T, I, 2><<<blocks_for(packs), kThreads, 0, stream>>>(
                g, static_cast<I>(per_pixel), static_cast<I>(packs), window_argmax, static_cast<const Pack<T>*>(dy),
                static_cast<Pack<T>*>(dx));
          else
            max_pool_gather_nhwc_kernel<T, I, 0><<<blocks_for(packs), kThreads, 0, stream>>>(
                g, static_cast<I>(per_pixel), static_cast<I>(packs), window_argmax, static_cast<const Pack<T>*>(dy),
                static_cast<Pack<T>*>(dx));
          return;
        }
        max_pool_backward_nhwc_kernel<T, I><<<blocks_for(packs), kThreads, 0, stream>>>(
            g, static_cast<I>(per_pixel), static_cast<I>(packs), static_cast<const Pack<T>*>(x),
            static_cast<const Pack<T>*>(y), static_cast<const Pack<T>*>(dy), static_cast<Pack<T>*>(dx));
      };
      with_index_type(packs, launch);
      return;
    }
    max_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        g, static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  CUDA_CHECK_LAUNCH("max_pool_backward_kernel");
}

void launch_caffe_avg_pool_backward(const PoolGeometry& g, DType t, const void* dy, void* dx, cudaStream_t stream) {
  int64_t n = g.planes * g.height * g.width;
  if (n <= 0) return;
  dispatch_float(t, "pool_backward", [&](auto e) {
    using T = decltype(e);
    avg_pool_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  CUDA_CHECK_LAUNCH("avg_pool_backward_kernel");
}

}  // namespace cnnscale::cuda
