// Caffe's max/average pooling (BVLC caffe/src/caffe/layers/pooling_layer.cu) for the shapes cuDNN
// cannot express: Caffe's ceil-mode output can have one more row/column than cuDNN's floor rule,
// and that last window hangs over the bottom/right edge, i.e. asymmetric padding.
// Max backward recomputes each window's argmax from x (no stored mask), with Caffe's rule that
// the first maximum in row-major order wins, and gathers per input element (deterministic).
// Templated on the storage (f32, bf16, f16); sums and divisions are done in float.
#include <cfloat>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"

namespace cnnscale::cuda {
namespace {

// Index (h * W + w) of the first maximum of window (ph, pw) of `plane`, as Caffe's forward picks it.
template <typename T>
__device__ int window_argmax(const PoolGeometry& g, const T* plane, int ph, int pw) {
  int hstart = ph * g.stride_h - g.pad_h, wstart = pw * g.stride_w - g.pad_w;
  int hend = min(hstart + g.kernel_h, g.height), wend = min(wstart + g.kernel_w, g.width);
  hstart = max(hstart, 0);
  wstart = max(wstart, 0);
  float maxval = -FLT_MAX;
  int maxidx = -1;
  for (int h = hstart; h < hend; ++h)
    for (int w = wstart; w < wend; ++w)
      if (to_float(plane[h * g.width + w]) > maxval) {
        maxidx = h * g.width + w;
        maxval = to_float(plane[maxidx]);
      }
  return maxidx;
}

template <typename T>
__global__ void max_pool_forward_kernel(PoolGeometry g, const T* x, T* y) {
  const int64_t total = g.planes * g.pooled_height * g.pooled_width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    int pw = static_cast<int>(i % g.pooled_width);
    int ph = static_cast<int>((i / g.pooled_width) % g.pooled_height);
    int64_t plane = i / (static_cast<int64_t>(g.pooled_width) * g.pooled_height);
    const T* xp = x + plane * g.height * g.width;
    int idx = window_argmax(g, xp, ph, pw);
    y[i] = idx >= 0 ? xp[idx] : from_float<T>(-FLT_MAX);
  }
}

template <typename T>
__global__ void avg_pool_forward_kernel(PoolGeometry g, const T* x, T* y) {
  const int64_t total = g.planes * g.pooled_height * g.pooled_width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    int pw = static_cast<int>(i % g.pooled_width);
    int ph = static_cast<int>((i / g.pooled_width) % g.pooled_height);
    int64_t plane = i / (static_cast<int64_t>(g.pooled_width) * g.pooled_height);
    int hstart = ph * g.stride_h - g.pad_h, wstart = pw * g.stride_w - g.pad_w;
    // Caffe divides by the window clipped to the padded extent (padding counts, overhang does not).
    int hend = min(hstart + g.kernel_h, g.height + g.pad_h), wend = min(wstart + g.kernel_w, g.width + g.pad_w);
    int pool_size = (hend - hstart) * (wend - wstart);
    hstart = max(hstart, 0);
    wstart = max(wstart, 0);
    hend = min(hend, g.height);
    wend = min(wend, g.width);
    const T* xp = x + plane * g.height * g.width;
    float sum = 0.0f;
    for (int h = hstart; h < hend; ++h)
      for (int w = wstart; w < wend; ++w) sum += to_float(xp[h * g.width + w]);
    y[i] = from_float<T>(sum / pool_size);
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(PoolGeometry g, const T* x, const T* y, const T* dy, T* dx) {
  const int64_t total = g.planes * g.height * g.width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    int w = static_cast<int>(i % g.width);
    int h = static_cast<int>((i / g.width) % g.height);
    int64_t plane = i / (static_cast<int64_t>(g.width) * g.height);
    // Pooled outputs whose window covers (h, w), as in Caffe's MaxPoolBackward.
    int phstart = (h + g.pad_h < g.kernel_h) ? 0 : (h + g.pad_h - g.kernel_h) / g.stride_h + 1;
    int phend = min((h + g.pad_h) / g.stride_h + 1, g.pooled_height);
    int pwstart = (w + g.pad_w < g.kernel_w) ? 0 : (w + g.pad_w - g.kernel_w) / g.stride_w + 1;
    int pwend = min((w + g.pad_w) / g.stride_w + 1, g.pooled_width);
    const T* xp = x + plane * g.height * g.width;
    const int64_t pooled_offset = plane * g.pooled_height * g.pooled_width;
    const float xv = to_float(xp[h * g.width + w]);
    float grad = 0.0f;
    for (int ph = phstart; ph < phend; ++ph)
      for (int pw = pwstart; pw < pwend; ++pw) {
        int64_t o = pooled_offset + ph * g.pooled_width + pw;
        // Cheap reject first; only an element equal to the window's max can be its argmax.
        if (to_float(y[o]) == xv && window_argmax(g, xp, ph, pw) == h * g.width + w) grad += to_float(dy[o]);
      }
    dx[i] = from_float<T>(grad);
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(PoolGeometry g, const T* dy, T* dx) {
  const int64_t total = g.planes * g.height * g.width;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    int w = static_cast<int>(i % g.width) + g.pad_w;
    int h = static_cast<int>((i / g.width) % g.height) + g.pad_h;
    int64_t plane = i / (static_cast<int64_t>(g.width) * g.height);
    int phstart = (h < g.kernel_h) ? 0 : (h - g.kernel_h) / g.stride_h + 1;
    int phend = min(h / g.stride_h + 1, g.pooled_height);
    int pwstart = (w < g.kernel_w) ? 0 : (w - g.kernel_w) / g.stride_w + 1;
    int pwend = min(w / g.stride_w + 1, g.pooled_width);
    const T* dyp = dy + plane * g.pooled_height * g.pooled_width;
    float grad = 0.0f;
    for (int ph = phstart; ph < phend; ++ph)
      for (int pw = pwstart; pw < pwend; ++pw) {
        int hstart = ph * g.stride_h - g.pad_h, wstart = pw * g.stride_w - g.pad_w;
        int hend = min(hstart + g.kernel_h, g.height + g.pad_h), wend = min(wstart + g.kernel_w, g.width + g.pad_w);
        int pool_size = (hend - hstart) * (wend - wstart);
        grad += to_float(dyp[ph * g.pooled_width + pw]) / pool_size;
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
                                    void* dx, cudaStream_t stream) {
  int64_t n = g.planes * g.height * g.width;
  if (n <= 0) return;
  dispatch_float(t, "pool_backward", [&](auto e) {
    using T = decltype(e);
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
