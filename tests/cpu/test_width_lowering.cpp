// Width lowering (backend/width_lowering.hpp) checked on the CPU reference: an (R x S) convolution
// and the (R x 1) convolution of its lowered input and filter give the same output and, mapped
// back, the same filter gradient; the lowered filter's channels-last bytes are the filter's
// channels-last rows, zero-padded (what the CUDA backend's copy relies on).
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/width_lowering.hpp"
#include "common/layer_harness.hpp"

namespace cnnscale::testing {
namespace {

struct LoweringCase {
  std::string name;
  int64_t n, c, h, w, k;
  ConvParams p;
  int64_t quantum;  // channels of a 16-byte pixel: 8 in 16 bits, 4 in f32
};

void PrintTo(const LoweringCase& t, std::ostream* os) {
  *os << t.name;
}

ConvParams conv(int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
  return ConvParams{kh, kw, sh, sw, ph, pw, dh, dw, 1};
}

// Element (a, b, c, d) of a 4-d f32 tensor in NCHW order.
float& at(const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  const Shape& s = t.shape();
  return t.f32()[static_cast<size_t>(((a * s[1] + b) * s[2] + c) * s[3] + d)];
}

// |t| element by element: convolutions of absolute values give each output's sum of |products|.
Tensor absolute(CpuBackend& cpu, const Tensor& t) {
  Tensor a = cpu.alloc(t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) a.f32()[static_cast<size_t>(i)] = std::fabs(t.f32()[static_cast<size_t>(i)]);
  return a;
}

// Each fp32 evaluation of a dot product of n terms, in any order (blocked, with or without FMA),
// lies within gamma_n * S of the exact value, where S = sum|products| and gamma_n = n u / (1 - n u),
// u = 2^-24 (the standard bound). Two evaluations in different orders therefore differ by at most
// 2 gamma_n S. `abs_sum` holds S per element, itself evaluated in fp32: its terms are non-negative,
// so it is at least (1 - gamma_n) S, and 2 gamma_n abs_sum / (1 - gamma_n) bounds the difference.
void expect_within_summation_bound(const Tensor& got, const Tensor& want, const Tensor& abs_sum, int64_t n,
                                   const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double nu = static_cast<double>(n) * std::ldexp(1.0, -24), gamma = nu / (1.0 - nu);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const auto e = static_cast<size_t>(i);
    const double bound = 2.0 * gamma / (1.0 - gamma) * abs_sum.f32()[e];
    ASSERT_LE(std::fabs(double(got.f32()[e]) - double(want.f32()[e])), bound) << what << "[" << i << "]";
  }
}

class WidthLoweringCpu : public ::testing::TestWithParam<LoweringCase> {};

TEST_P(WidthLoweringCpu, LoweredConvolutionGivesTheSameOutputAndFilterGradient) {
  const LoweringCase& t = GetParam();
  const ConvParams& p = t.p;
  CpuBackend cpu;
  const Shape xs{t.n, t.c, t.h, t.w}, ws{t.k, t.c, p.kernel_h, p.kernel_w};
  const auto lowering = width_lowering(p, xs, ws, t.quantum);
  ASSERT_TRUE(lowering.has_value());
  const WidthLowering& l = *lowering;
  const int64_t P = conv_output_dim(t.h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h);
  const int64_t Q = conv_output_dim(t.w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w);
  const int64_t S = p.kernel_w, C = t.c, cl = l.x.c();
  EXPECT_EQ(l.field, S * C);
  EXPECT_EQ(cl % t.quantum, 0);
  EXPECT_GE(cl, l.field);
  EXPECT_LT(cl - l.field, t.quantum);
  EXPECT_EQ(l.x, (Shape{t.n, cl, t.h, Q}));
  EXPECT_EQ(l.w, (Shape{t.k, cl, p.kernel_h, 1}));
  // The lowered convolution's output is the original's, shape for shape.
  EXPECT_EQ(conv_output_dim(l.x.h(), l.params.kernel_h, l.params.stride_h, l.params.pad_h, l.params.dilation_h), P);
  EXPECT_EQ(conv_output_dim(l.x.w(), l.params.kernel_w, l.params.stride_w, l.params.pad_w, l.params.dilation_w), Q);

  Tensor x = cpu.alloc(xs), w = cpu.alloc(ws), dy = cpu.alloc({t.n, t.k, P, Q});
  fill_uniform(cpu, x, 11, -1, 1);
  fill_uniform(cpu, w, 12, -1, 1);
  fill_uniform(cpu, dy, 13, -1, 1);
  // The lowering, written from its definition (NCHW here; the CPU computes in NCHW).
  Tensor xl = cpu.alloc(l.x), wl = cpu.alloc(l.w);
  fill_uniform(cpu, xl, 14, -9, 9);  // every element must be written, padding channels included
  fill_uniform(cpu, wl, 15, -9, 9);
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t ch = 0; ch < cl; ++ch)
      for (int64_t h = 0; h < t.h; ++h)
        for (int64_t q = 0; q < Q; ++q) {
          float v = 0.0f;
          if (ch < l.field) {
            const int64_t s = ch / C, c = ch % C, col = q * p.stride_w + s * p.dilation_w - p.pad_w;
            if (col >= 0 && col < t.w) v = at(x, n, c, h, col);
          }
          at(xl, n, ch, h, q) = v;
        }
  for (int64_t k = 0; k < t.k; ++k)
    for (int64_t ch = 0; ch < cl; ++ch)
      for (int64_t r = 0; r < p.kernel_h; ++r) at(wl, k, ch, r, 0) = ch < l.field ? at(w, k, ch % C, r, ch / C) : 0.0f;

  Tensor y = cpu.alloc({t.n, t.k, P, Q}), yl = cpu.alloc({t.n, t.k, P, Q}), y_abs = cpu.alloc({t.n, t.k, P, Q});
  cpu.conv_forward(p, x, w, y);
  cpu.conv_forward(l.params, xl, wl, yl);
  cpu.conv_forward(p, absolute(cpu, x), absolute(cpu, w), y_abs);
  expect_within_summation_bound(yl, y, y_abs, cl * p.kernel_h, t.name + " y");

  // The filter gradient: the lowered one, its channel s*C + c mapped back to column s of channel c.
  Tensor dw = cpu.alloc(ws), dwl = cpu.alloc(l.w), dw_abs = cpu.alloc(ws), dw_back = cpu.alloc(ws);
  cpu.conv_backward_filter(p, x, dy, dw);
  cpu.conv_backward_filter(l.params, xl, dy, dwl);
  cpu.conv_backward_filter(p, absolute(cpu, x), absolute(cpu, dy), dw_abs);
  for (int64_t k = 0; k < t.k; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < p.kernel_h; ++r)
        for (int64_t s = 0; s < S; ++s) at(dw_back, k, c, r, s) = at(dwl, k, s * C + c, r, 0);
  expect_within_summation_bound(dw_back, dw, dw_abs, t.n * P * Q, t.name + " dw");
  // The zero input channels past the field get a zero gradient (nothing flows into the padding).
  for (int64_t k = 0; k < t.k; ++k)
    for (int64_t ch = l.field; ch < cl; ++ch)
      for (int64_t r = 0; r < p.kernel_h; ++r) EXPECT_EQ(at(dwl, k, ch, r, 0), 0.0f) << t.name << " dwl pad";

  // Channels-last (KRSC) bytes, as the GPU copies them: wl's KRSC row (k, r) is w's KRSC row (k, r),
  // S*C elements of w's KRSC buffer taken as they lie, then zeros up to Cl.
  std::vector<float> w_krsc(static_cast<size_t>(ws.numel()));
  for (int64_t k = 0; k < t.k; ++k)
    for (int64_t r = 0; r < p.kernel_h; ++r)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < C; ++c)
          w_krsc[static_cast<size_t>(((k * p.kernel_h + r) * S + s) * C + c)] = at(w, k, c, r, s);
  for (int64_t k = 0; k < t.k; ++k)
    for (int64_t r = 0; r < p.kernel_h; ++r)
      for (int64_t j = 0; j < cl; ++j) {
        const float copied = j < l.field ? w_krsc[static_cast<size_t>((k * p.kernel_h + r) * l.field + j)] : 0.0f;
        ASSERT_EQ(at(wl, k, j, r, 0), copied) << t.name << " KRSC row " << k << "," << r << " element " << j;
      }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WidthLoweringCpu,
    ::testing::Values(LoweringCase{"gait_conv1_c5", 2, 5, 12, 12, 4, conv(7, 7, 1, 1, 0, 0, 1, 1), 8},
                      LoweringCase{"rgb_stem_s2_p3", 2, 3, 16, 15, 4, conv(7, 7, 2, 2, 3, 3, 1, 1), 8},
                      LoweringCase{"caffenet_conv1_s4", 1, 3, 23, 23, 5, conv(11, 11, 4, 4, 0, 0, 1, 1), 8},
                      LoweringCase{"rect_dilated_padded", 2, 2, 9, 10, 3, conv(3, 5, 1, 2, 2, 1, 2, 2), 4},
                      LoweringCase{"field_whole_already", 2, 4, 6, 7, 3, conv(3, 3, 1, 1, 1, 1, 1, 1), 4}),
    [](const ::testing::TestParamInfo<LoweringCase>& info) { return info.param.name; });

TEST(WidthLowering, AppliesOnlyToUngroupedKernelsWiderThanOneColumn) {
  const Shape x{1, 4, 8, 8};
  EXPECT_FALSE(width_lowering(ConvParams{3, 1, 1, 1, 0, 0, 1, 1, 1}, x, Shape{2, 4, 3, 1}, 8).has_value());
  EXPECT_FALSE(width_lowering(ConvParams{3, 3, 1, 1, 0, 0, 1, 1, 2}, x, Shape{2, 2, 3, 3}, 8).has_value());
  EXPECT_FALSE(width_lowering(ConvParams{9, 9, 1, 1, 0, 0, 1, 1, 1}, x, Shape{2, 4, 9, 9}, 8).has_value());
  EXPECT_TRUE(width_lowering(ConvParams{1, 3, 1, 1, 0, 0, 1, 1, 1}, x, Shape{2, 4, 1, 3}, 8).has_value());
}

}  // namespace
}  // namespace cnnscale::testing
