// The CPU convolution: im2col/col2im per sample and per group, then one cblas_sgemm each (Caffe's
// approach). The column buffer is reused across calls; 1x1/stride-1/unpadded convolutions skip
// im2col because the input already is the column matrix.
#include "backend/cpu/cpu_conv.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_checks.hpp"

namespace cnnscale::cpu {

namespace {

// Extents of one convolution, validated against the tensors' shapes.
struct ConvGeometry {
  int64_t batch, channels, height, width;  // x (N, C, H, W)
  int64_t filters, out_h, out_w;           // y (N, K, P, Q)
  int64_t group_channels, group_filters;   // C / groups, K / groups
};

ConvGeometry conv_geometry(const char* op, const ConvParams& p, const Shape& x, const Shape& w, const Shape& y) {
  CNNSCALE_CHECK(x.rank() == 4 && w.rank() == 4 && y.rank() == 4, "cpu {}: x {}, w {}, y {} must be 4-d", op,
                 x.to_string(), w.to_string(), y.to_string());
  CNNSCALE_CHECK(p.groups >= 1 && x[1] % p.groups == 0 && w[0] % p.groups == 0, "cpu {}: groups {} for x {}, w {}", op,
                 p.groups, x.to_string(), w.to_string());
  ConvGeometry g{x[0], x[1], x[2], x[3], w[0], y[2], y[3], x[1] / p.groups, w[0] / p.groups};
  CNNSCALE_CHECK(w[1] == g.group_channels && w[2] == p.kernel_h && w[3] == p.kernel_w,
                 "cpu {}: weight {} does not match C/groups={} and kernel {}x{}", op, w.to_string(), g.group_channels,
                 p.kernel_h, p.kernel_w);
  CNNSCALE_CHECK(
      y[0] == x[0] && y[1] == w[0] && y[2] == conv_output_dim(x[2], p.kernel_h, p.stride_h, p.pad_h, p.dilation_h) &&
          y[3] == conv_output_dim(x[3], p.kernel_w, p.stride_w, p.pad_w, p.dilation_w),
      "cpu {}: output {} does not match input {} and weight {}", op, y.to_string(), x.to_string(), w.to_string());
  return g;
}

bool is_pointwise(const ConvParams& p) {
  return p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
}

// x (C, H, W) -> col (C * R * S, P * Q); padding reads as zero.
void im2col(const float* x, int64_t channels, int64_t height, int64_t width, const ConvParams& p, int64_t out_h,
            int64_t out_w, float* col) {
  for (int64_t c = 0; c < channels; ++c)
    for (int r = 0; r < p.kernel_h; ++r)
      for (int s = 0; s < p.kernel_w; ++s) {
        float* row = col + ((c * p.kernel_h + r) * p.kernel_w + s) * out_h * out_w;
        for (int64_t oh = 0; oh < out_h; ++oh) {
          int64_t ih = oh * p.stride_h - p.pad_h + static_cast<int64_t>(r) * p.dilation_h;
          float* out = row + oh * out_w;
          if (ih < 0 || ih >= height) {
            std::fill(out, out + out_w, 0.0f);
            continue;
          }
          const float* in = x + (c * height + ih) * width;
          for (int64_t ow = 0; ow < out_w; ++ow) {
            int64_t iw = ow * p.stride_w - p.pad_w + static_cast<int64_t>(s) * p.dilation_w;
            out[ow] = (iw >= 0 && iw < width) ? in[iw] : 0.0f;
          }
        }
      }
}

// The adjoint of im2col: accumulates col (C * R * S, P * Q) into x (C, H, W), which must be zeroed first.
void col2im(const float* col, int64_t channels, int64_t height, int64_t width, const ConvParams& p, int64_t out_h,
            int64_t out_w, float* x) {
  for (int64_t c = 0; c < channels; ++c)
    for (int r = 0; r < p.kernel_h; ++r)
      for (int s = 0; s < p.kernel_w; ++s) {
        const float* row = col + ((c * p.kernel_h + r) * p.kernel_w + s) * out_h * out_w;
        for (int64_t oh = 0; oh < out_h; ++oh) {
          int64_t ih = oh * p.stride_h - p.pad_h + static_cast<int64_t>(r) * p.dilation_h;
          if (ih < 0 || ih >= height) continue;
          float* out = x + (c * height + ih) * width;
          const float* in = row + oh * out_w;
          for (int64_t ow = 0; ow < out_w; ++ow) {
            int64_t iw = ow * p.stride_w - p.pad_w + static_cast<int64_t>(s) * p.dilation_w;
            if (iw >= 0 && iw < width) out[iw] += in[ow];
          }
        }
      }
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
           float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C scaled by beta when k == 0; do it by hand (some builds reject k == 0).
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(trans_a ? m : k), b, static_cast<blasint>(trans_b ? k : n), beta, c,
              static_cast<blasint>(n));
}

void Im2colConvolution::forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) {
  check_f32("conv_forward", x, "x");
  check_f32("conv_forward", w, "w");
  check_f32("conv_forward", y, "y");
  ConvGeometry g = conv_geometry("conv_forward", p, x.shape(), w.shape(), y.shape());
  const int64_t spatial = g.out_h * g.out_w;                            // P * Q
  const int64_t col_rows = g.group_channels * p.kernel_h * p.kernel_w;  // C/groups * R * S
  const bool pointwise = is_pointwise(p);
  if (!pointwise) col_.resize(static_cast<size_t>(col_rows * spatial));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const float* xg = x.f32() + (n * g.channels + grp * g.group_channels) * g.height * g.width;
      const float* col = xg;
      if (!pointwise) {
        im2col(xg, g.group_channels, g.height, g.width, p, g.out_h, g.out_w, col_.data());
        col = col_.data();
      }
      const float* wg = w.f32() + grp * g.group_filters * col_rows;             // (K/groups, col_rows)
      float* yg = y.f32() + (n * g.filters + grp * g.group_filters) * spatial;  // (K/groups, P*Q)
      sgemm(false, false, g.group_filters, spatial, col_rows, 1.0f, wg, col, 0.0f, yg);
    }
}

void Im2colConvolution::backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                                      bool add) {
  check_f32("conv_backward_data", w, "w");
  check_f32("conv_backward_data", dy, "dy");
  check_f32("conv_backward_data", dx, "dx");
  ConvGeometry g = conv_geometry("conv_backward_data", p, dx.shape(), w.shape(), dy.shape());
  const int64_t spatial = g.out_h * g.out_w;
  const int64_t col_rows = g.group_channels * p.kernel_h * p.kernel_w;
  const bool pointwise = is_pointwise(p);
  if (!pointwise) col_.resize(static_cast<size_t>(col_rows * spatial));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      float* dxg = dx.f32() + (n * g.channels + grp * g.group_channels) * g.height * g.width;
      const float* wg = w.f32() + grp * g.group_filters * col_rows;
      const float* dyg = dy.f32() + (n * g.filters + grp * g.group_filters) * spatial;
      // dcol (col_rows, P*Q) = W_g^T (col_rows, K/groups) * dy_g (K/groups, P*Q)
      if (pointwise) {
        sgemm(true, false, col_rows, spatial, g.group_filters, 1.0f, wg, dyg, add ? 1.0f : 0.0f, dxg);
        continue;
      }
      sgemm(true, false, col_rows, spatial, g.group_filters, 1.0f, wg, dyg, 0.0f, col_.data());
      if (!add) std::memset(dxg, 0, static_cast<size_t>(g.group_channels * g.height * g.width) * sizeof(float));
      col2im(col_.data(), g.group_channels, g.height, g.width, p, g.out_h, g.out_w, dxg);
    }
}

void Im2colConvolution::backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  check_f32("conv_backward_filter", x, "x");
  check_f32("conv_backward_filter", dy, "dy");
  check_f32("conv_backward_filter", dw, "dw");
  ConvGeometry g = conv_geometry("conv_backward_filter", p, x.shape(), dw.shape(), dy.shape());
  const int64_t spatial = g.out_h * g.out_w;
  const int64_t col_rows = g.group_channels * p.kernel_h * p.kernel_w;
  const bool pointwise = is_pointwise(p);
  if (!pointwise) col_.resize(static_cast<size_t>(col_rows * spatial));
  if (g.batch == 0) std::fill(dw.f32(), dw.f32() + dw.numel(), 0.0f);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const float* xg = x.f32() + (n * g.channels + grp * g.group_channels) * g.height * g.width;
      const float* col = xg;
      if (!pointwise) {
        im2col(xg, g.group_channels, g.height, g.width, p, g.out_h, g.out_w, col_.data());
        col = col_.data();
      }
      const float* dyg = dy.f32() + (n * g.filters + grp * g.group_filters) * spatial;
      float* dwg = dw.f32() + grp * g.group_filters * col_rows;
      // dW_g (K/groups, col_rows) (+)= dy_g (K/groups, P*Q) * col^T (P*Q, col_rows); the first
      // sample overwrites so the op needs no separate zeroing.
      sgemm(false, true, g.group_filters, col_rows, spatial, 1.0f, dyg, col, n == 0 ? 0.0f : 1.0f, dwg);
    }
}

std::string Im2colConvolution::implementation(const ConvSignature& call) {
  // Every direction takes the same path here: one GEMM per sample and group, with im2col (col2im
  // for the data gradient) unless the input already is the column matrix.
  const std::string how =
      is_pointwise(call.p) ? "sgemm per sample (1x1: x is the column matrix)" : "im2col + sgemm per sample";
  return call.adds ? how + "; dgrad adding to its input's gradient in place" : how;
}

}  // namespace cnnscale::cpu
