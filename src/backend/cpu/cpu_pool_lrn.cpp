// CpuBackend pooling and cross-channel LRN, following Caffe's pooling_layer.cpp and lrn_layer.cpp
// line by line (window clipping, average divisor, first-maximum tie rule, LRN backward), since the
// reference semantics of the study's networks are Caffe's.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_checks.hpp"

namespace cnnscale {

using cpu::check_f32;
using cpu::check_same_numel;

namespace {

// One pooling window along one axis: [start, end) clipped to the image, and the unclipped extent
// used as Caffe's average-pooling divisor (the window clipped to the padded input only).
struct Window {
  int64_t start, end, padded_extent;
};

Window pool_window(int64_t out_index, int kernel, int stride, int pad, int64_t in) {
  int64_t start = out_index * stride - pad;
  int64_t end = std::min<int64_t>(start + kernel, in + pad);
  int64_t padded_extent = end - start;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(end, in), padded_extent};
}

void check_pool_shapes(const char* op, const PoolParams& p, const Shape& x, const Shape& y) {
  CNNSCALE_CHECK(x.rank() == 4 && y.rank() == 4 && x[0] == y[0] && x[1] == y[1] &&
                     y[2] == pool_output_dim(x[2], p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode) &&
                     y[3] == pool_output_dim(x[3], p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode),
                 "cpu {}: output {} does not match input {} for kernel {}x{} stride {}x{} pad {}x{}", op, y.to_string(),
                 x.to_string(), p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w);
}

// Index (within one (H, W) plane) of the window's maximum; the first maximum in row-major order wins.
int64_t window_argmax(const float* plane, int64_t width, const Window& wh, const Window& ww) {
  int64_t best = wh.start * width + ww.start;
  float best_value = -FLT_MAX;
  for (int64_t h = wh.start; h < wh.end; ++h)
    for (int64_t w = ww.start; w < ww.end; ++w)
      if (plane[h * width + w] > best_value) {
        best_value = plane[h * width + w];
        best = h * width + w;
      }
  return best;
}

}  // namespace

void CpuBackend::pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& /*saved*/) {
  check_f32("pool_forward", x, "x");
  check_f32("pool_forward", y, "y");
  check_pool_shapes("pool_forward", p, x.shape(), y.shape());
  const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t P = y.shape()[2], Q = y.shape()[3];
  for (int64_t plane = 0; plane < planes; ++plane) {
    const float* in = x.f32() + plane * H * W;
    float* out = y.f32() + plane * P * Q;
    for (int64_t ph = 0; ph < P; ++ph) {
      Window wh = pool_window(ph, p.kernel_h, p.stride_h, p.pad_h, H);
      for (int64_t pw = 0; pw < Q; ++pw) {
        Window ww = pool_window(pw, p.kernel_w, p.stride_w, p.pad_w, W);
        if (p.mode == PoolMode::Max) {
          out[ph * Q + pw] = in[window_argmax(in, W, wh, ww)];
          continue;
        }
        double sum = 0.0;
        for (int64_t h = wh.start; h < wh.end; ++h)
          for (int64_t w = ww.start; w < ww.end; ++w) sum += in[h * W + w];
        out[ph * Q + pw] = static_cast<float>(sum / static_cast<double>(wh.padded_extent * ww.padded_extent));
      }
    }
  }
}

void CpuBackend::pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                               const Tensor& dx, const Tensor& /*saved*/) {
  check_f32("pool_backward", x, "x");
  check_f32("pool_backward", dy, "dy");
  check_f32("pool_backward", dx, "dx");
  check_pool_shapes("pool_backward", p, x.shape(), dy.shape());
  check_same_numel("pool_backward", x, dx);
  (void)y;  // the maximum's position is recomputed from x with the forward tie rule
  const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t P = dy.shape()[2], Q = dy.shape()[3];
  std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
  for (int64_t plane = 0; plane < planes; ++plane) {
    const float* in = x.f32() + plane * H * W;
    const float* grad_out = dy.f32() + plane * P * Q;
    float* grad_in = dx.f32() + plane * H * W;
    for (int64_t ph = 0; ph < P; ++ph) {
      Window wh = pool_window(ph, p.kernel_h, p.stride_h, p.pad_h, H);
      for (int64_t pw = 0; pw < Q; ++pw) {
        Window ww = pool_window(pw, p.kernel_w, p.stride_w, p.pad_w, W);
        float g = grad_out[ph * Q + pw];
        if (p.mode == PoolMode::Max) {
          grad_in[window_argmax(in, W, wh, ww)] += g;
          continue;
        }
        float share = g / static_cast<float>(wh.padded_extent * ww.padded_extent);
        for (int64_t h = wh.start; h < wh.end; ++h)
          for (int64_t w = ww.start; w < ww.end; ++w) grad_in[h * W + w] += share;
      }
    }
  }
}

namespace {

// scale (C, HW) = k + alpha / size * sum over the channel window [c - pre_pad, c + size - pre_pad - 1]
// of x^2, for one sample; pre_pad = (size - 1) / 2 as in Caffe.
void lrn_scale(const LrnParams& p, const float* x, int64_t channels, int64_t spatial, std::vector<double>& scale) {
  const int pre_pad = (p.local_size - 1) / 2;
  const double alpha_over_size = static_cast<double>(p.alpha) / p.local_size;
  scale.assign(static_cast<size_t>(channels * spatial), 0.0);
  for (int64_t c = 0; c < channels; ++c) {
    int64_t lo = std::max<int64_t>(0, c - pre_pad),
            hi = std::min<int64_t>(channels - 1, c + p.local_size - pre_pad - 1);
    double* s = scale.data() + c * spatial;
    for (int64_t j = lo; j <= hi; ++j) {
      const float* xj = x + j * spatial;
      for (int64_t i = 0; i < spatial; ++i) s[i] += static_cast<double>(xj[i]) * xj[i];
    }
    for (int64_t i = 0; i < spatial; ++i) s[i] = p.k + alpha_over_size * s[i];
  }
}

}  // namespace

void CpuBackend::lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y) {
  check_f32("lrn_forward", x, "x");
  check_f32("lrn_forward", y, "y");
  CNNSCALE_CHECK(x.shape() == y.shape(), "cpu lrn_forward: x {} vs y {}", x.shape().to_string(), y.shape().to_string());
  const int64_t batch = x.shape().n(), channels = x.shape().c(), spatial = x.shape().h() * x.shape().w();
  std::vector<double> scale;
  for (int64_t n = 0; n < batch; ++n) {
    const float* xn = x.f32() + n * channels * spatial;
    float* yn = y.f32() + n * channels * spatial;
    lrn_scale(p, xn, channels, spatial, scale);
    for (int64_t i = 0; i < channels * spatial; ++i)
      yn[i] = static_cast<float>(xn[i] * std::pow(scale[static_cast<size_t>(i)], -static_cast<double>(p.beta)));
  }
}

// Caffe's CrossChannelBackward_cpu:
// dx_c = dy_c * scale_c^-beta - 2 alpha beta / size * x_c * sum_{c' : c in window(c')} dy_c' y_c' / scale_c'.
// A channel c lies in window(c') for c' in [c - (size - pre_pad - 1), c + pre_pad].
void CpuBackend::lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& dx) {
  check_f32("lrn_backward", x, "x");
  check_f32("lrn_backward", y, "y");
  check_f32("lrn_backward", dy, "dy");
  check_f32("lrn_backward", dx, "dx");
  CNNSCALE_CHECK(x.shape() == y.shape() && x.shape() == dy.shape() && x.shape() == dx.shape(),
                 "cpu lrn_backward: shapes differ: x {}, y {}, dy {}, dx {}", x.shape().to_string(),
                 y.shape().to_string(), dy.shape().to_string(), dx.shape().to_string());
  const int64_t batch = x.shape().n(), channels = x.shape().c(), spatial = x.shape().h() * x.shape().w();
  const int pre_pad = (p.local_size - 1) / 2;
  const int post = p.local_size - pre_pad - 1;
  const double ratio_coeff = 2.0 * p.alpha * p.beta / p.local_size;
  std::vector<double> scale, ratio(static_cast<size_t>(channels * spatial));
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t off = n * channels * spatial;
    const float *xn = x.f32() + off, *yn = y.f32() + off, *dyn = dy.f32() + off;
    float* dxn = dx.f32() + off;
    lrn_scale(p, xn, channels, spatial, scale);
    for (int64_t i = 0; i < channels * spatial; ++i) {
      auto s = static_cast<size_t>(i);
      ratio[s] = static_cast<double>(dyn[i]) * yn[i] / scale[s];
    }
    for (int64_t c = 0; c < channels; ++c) {
      int64_t lo = std::max<int64_t>(0, c - post), hi = std::min<int64_t>(channels - 1, c + pre_pad);
      for (int64_t i = 0; i < spatial; ++i) {
        double accum = 0.0;
        for (int64_t j = lo; j <= hi; ++j) accum += ratio[static_cast<size_t>(j * spatial + i)];
        const int64_t e = c * spatial + i;
        double direct = dyn[e] * std::pow(scale[static_cast<size_t>(e)], -static_cast<double>(p.beta));
        dxn[e] = static_cast<float>(direct - ratio_coeff * xn[e] * accum);
      }
    }
  }
}

}  // namespace cnnscale
