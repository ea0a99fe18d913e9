// CPU backend ops against independent references: direct convolution loops (forward and both
// backward passes) vs the im2col/GEMM path, GEMM transposes, bias ops, pooling sizes and values
// (Caffe's ceil rounding and average divisor), and LRN against its formula.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "common/layer_harness.hpp"

namespace cnnscale::testing {
namespace {

// Inputs are U(-1, 1) and sums run over at most ~150 products, so float32 results differ from a
// double reference by well under 1e-5; 1e-4 leaves margin without hiding an indexing error (O(0.1)).
constexpr double kTol = 1e-4;

struct ConvCase {
  int64_t n, c, h, w, k;
  ConvParams p;
};

// Readable test names in failures: "x(2,3,7,7) k4 3x3 s1x1 p0x0 d1x1 g1".
void PrintTo(const ConvCase& t, std::ostream* os) {
  const ConvParams& p = t.p;
  *os << "x(" << t.n << "," << t.c << "," << t.h << "," << t.w << ") k" << t.k << " " << p.kernel_h << "x" << p.kernel_w
      << " s" << p.stride_h << "x" << p.stride_w << " p" << p.pad_h << "x" << p.pad_w << " d" << p.dilation_h << "x"
      << p.dilation_w << " g" << p.groups;
}

class ConvVsDirect : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvVsDirect, ForwardAndBackwardMatchDirectLoops) {
  const ConvCase& t = GetParam();
  const ConvParams& p = t.p;
  CpuBackend cpu;
  const int64_t P = conv_output_dim(t.h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h);
  const int64_t Q = conv_output_dim(t.w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w);
  const int64_t cg = t.c / p.groups, kg = t.k / p.groups;
  Tensor x = cpu.alloc({t.n, t.c, t.h, t.w}), w = cpu.alloc({t.k, cg, p.kernel_h, p.kernel_w});
  Tensor y = cpu.alloc({t.n, t.k, P, Q}), dy = cpu.alloc({t.n, t.k, P, Q});
  Tensor dx = cpu.alloc(x.shape()), dw = cpu.alloc(w.shape());
  fill_uniform(cpu, x, 1, -1, 1);
  fill_uniform(cpu, w, 2, -1, 1);
  fill_uniform(cpu, dy, 3, -1, 1);
  fill_uniform(cpu, dx, 4, -9, 9);  // stale values must be overwritten
  fill_uniform(cpu, dw, 5, -9, 9);
  cpu.conv_forward(p, x, w, y);
  cpu.conv_backward_data(p, w, dy, dx);
  cpu.conv_backward_filter(p, x, dy, dw);

  std::vector<double> ref_y(static_cast<size_t>(y.numel()), 0.0), ref_dx(static_cast<size_t>(x.numel()), 0.0),
      ref_dw(static_cast<size_t>(w.numel()), 0.0);
  auto xi = [&](int64_t n, int64_t c, int64_t h, int64_t ww) { return ((n * t.c + c) * t.h + h) * t.w + ww; };
  auto wi = [&](int64_t k, int64_t c, int64_t r, int64_t s) {
    return ((k * cg + c) * p.kernel_h + r) * p.kernel_w + s;
  };
  auto yi = [&](int64_t n, int64_t k, int64_t a, int64_t b) { return ((n * t.k + k) * P + a) * Q + b; };
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t k = 0; k < t.k; ++k)
      for (int64_t a = 0; a < P; ++a)
        for (int64_t b = 0; b < Q; ++b)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < p.kernel_h; ++r)
              for (int64_t s = 0; s < p.kernel_w; ++s) {
                int64_t ih = a * p.stride_h - p.pad_h + r * p.dilation_h;
                int64_t iw = b * p.stride_w - p.pad_w + s * p.dilation_w;
                if (ih < 0 || ih >= t.h || iw < 0 || iw >= t.w) continue;
                int64_t ch = k / kg * cg + c;  // input channel of this filter's group
                auto xe = static_cast<size_t>(xi(n, ch, ih, iw)), we = static_cast<size_t>(wi(k, c, r, s));
                auto ye = static_cast<size_t>(yi(n, k, a, b));
                ref_y[ye] += double(x.f32()[xe]) * w.f32()[we];
                ref_dx[xe] += double(dy.f32()[ye]) * w.f32()[we];
                ref_dw[we] += double(dy.f32()[ye]) * x.f32()[xe];
              }
  for (size_t i = 0; i < ref_y.size(); ++i) ASSERT_NEAR(y.f32()[i], ref_y[i], kTol) << "y[" << i << "]";
  for (size_t i = 0; i < ref_dx.size(); ++i) ASSERT_NEAR(dx.f32()[i], ref_dx[i], kTol) << "dx[" << i << "]";
  for (size_t i = 0; i < ref_dw.size(); ++i) ASSERT_NEAR(dw.f32()[i], ref_dw[i], kTol) << "dw[" << i << "]";

  // Adding the data gradient to what dx holds (a blob's later consumer in backward): in place, and
  // through Backend's default (a scratch, then axpby). The held values are U(-9, 9): their fp32
  // rounding adds at most 9 * 2^-24 to the error, far inside kTol.
  Tensor held = cpu.alloc(x.shape()), added = cpu.alloc(x.shape()), scratch = cpu.alloc(x.shape());
  fill_uniform(cpu, held, 6, -9, 9);
  for (int way = 0; way < 2; ++way) {
    cpu.copy(held, added);
    if (way == 0)
      cpu.conv_backward_data_add(p, w, dy, added, Tensor());
    else
      cpu.Backend::conv_backward_data_add(p, w, dy, added, scratch);
    for (size_t i = 0; i < ref_dx.size(); ++i)
      ASSERT_NEAR(added.f32()[i], held.f32()[i] + ref_dx[i], kTol)
          << (way == 0 ? "in place" : "scratch") << " dx[" << i << "]";
  }
}

ConvParams conv(int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int groups) {
  return ConvParams{kh, kw, sh, sw, ph, pw, dh, dw, groups};
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvVsDirect,
    ::testing::Values(ConvCase{2, 3, 7, 7, 4, conv(3, 3, 1, 1, 0, 0, 1, 1, 1)},     // plain
                      ConvCase{2, 3, 8, 7, 5, conv(3, 3, 2, 2, 1, 1, 1, 1, 1)},     // stride + pad
                      ConvCase{1, 4, 9, 9, 6, conv(5, 3, 2, 1, 2, 1, 1, 1, 2)},     // groups, rectangular
                      ConvCase{2, 2, 9, 8, 3, conv(3, 3, 1, 1, 2, 2, 2, 2, 1)},     // dilation
                      ConvCase{2, 6, 5, 5, 6, conv(3, 3, 1, 1, 1, 1, 1, 1, 6)},     // depthwise
                      ConvCase{3, 4, 4, 5, 2, conv(1, 1, 1, 1, 0, 0, 1, 1, 1)},     // pointwise fast path
                      ConvCase{1, 3, 23, 23, 4, conv(11, 11, 4, 4, 0, 0, 1, 1, 1)}  // CaffeNet conv1 shape
                      ));

TEST(CpuOps, GemmAllTransposes) {
  CpuBackend cpu;
  const int64_t m = 3, n = 4, k = 5;
  Tensor a = cpu.alloc({m, k}), at = cpu.alloc({k, m}), b = cpu.alloc({k, n}), bt = cpu.alloc({n, k});
  fill_uniform(cpu, a, 1, -1, 1);
  fill_uniform(cpu, b, 2, -1, 1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) at.f32()[j * m + i] = a.f32()[i * k + j];
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) bt.f32()[j * k + i] = b.f32()[i * n + j];
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::vector<float> c(m * n, 1.0f);
      cpu.gemm(ta, tb, m, n, k, 2.0f, (ta ? at : a).f32(), (tb ? bt : b).f32(), 0.5f, c.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0.5;
          for (int64_t l = 0; l < k; ++l) ref += 2.0 * a.f32()[i * k + l] * b.f32()[l * n + j];
          EXPECT_NEAR(c[static_cast<size_t>(i * n + j)], ref, kTol) << "trans " << ta << tb;
        }
    }
}

TEST(CpuOps, BiasAddAndBackward) {
  CpuBackend cpu;
  Tensor y = cpu.alloc({2, 3, 2, 1}), bias = cpu.alloc({3}), dbias = cpu.alloc({3});
  from_host(cpu, bias, {1, 2, 3});
  cpu.bias_add(bias, y);
  EXPECT_EQ(to_host(cpu, y), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  cpu.bias_backward(y, dbias);
  EXPECT_EQ(to_host(cpu, dbias), (std::vector<float>{4, 8, 12}));
}

TEST(CpuOps, FillAndCopyAcceptInt32) {
  CpuBackend cpu;
  Tensor a = cpu.alloc({4}, DType::I32), b = cpu.alloc({2, 2}, DType::I32);
  cpu.fill(a, 7.0f);
  cpu.copy(a, b);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.i32()[i], 7);
  EXPECT_THROW(cpu.copy(a, cpu.alloc({4})), Error);  // dtypes differ
}

// ---- pooling ------------------------------------------------------------------------------------

TEST(CpuOps, CaffeNetOutputSizes) {
  EXPECT_EQ(conv_output_dim(227, 11, 4, 0, 1), 55);
  EXPECT_EQ(pool_output_dim(55, 3, 2, 0, true), 27);
  EXPECT_EQ(pool_output_dim(27, 3, 2, 0, true), 13);
  EXPECT_EQ(pool_output_dim(13, 3, 2, 0, true), 6);
  // GoogLeNet's 112 -> 56 with 3/2 pooling needs ceil; floor gives 55.
  EXPECT_EQ(pool_output_dim(112, 3, 2, 0, true), 56);
  EXPECT_EQ(pool_output_dim(112, 3, 2, 0, false), 55);
  EXPECT_EQ(pool_output_dim(6, 3, 2, 0, true), 3);
  EXPECT_EQ(pool_output_dim(6, 3, 2, 0, false), 2);
  // With padding, Caffe drops a last window that would start in the right padding: 5 -> 3, not 4.
  EXPECT_EQ(pool_output_dim(5, 2, 2, 1, true), 3);
  EXPECT_EQ(pool_output_dim(5, 2, 2, 1, false), 3);

  CpuBackend cpu;
  auto h = make_layer(cpu, "type: Pooling\npool: max\nkernel: 3\nstride: 2", {Shape{1, 96, 55, 55}});
  EXPECT_EQ(h.top_shapes[0], (Shape{1, 96, 27, 27}));
  auto f = make_layer(cpu, "type: Pooling\npool: max\nkernel: 3\nstride: 2\nround: floor", {Shape{1, 2, 6, 6}});
  EXPECT_EQ(f.top_shapes[0], (Shape{1, 2, 2, 2}));
}

std::vector<float> pool(CpuBackend& cpu, PoolMode mode, int64_t side, int kernel, int stride, int pad,
                        std::vector<float> input) {
  PoolParams p{mode, kernel, kernel, stride, stride, pad, pad, true};
  int64_t out = pool_output_dim(side, kernel, stride, pad, true);
  Tensor x = cpu.alloc({1, 1, side, side}), y = cpu.alloc({1, 1, out, out});
  from_host(cpu, x, input);
  cpu.pool_forward(p, x, y);
  return to_host(cpu, y);
}

TEST(CpuOps, PoolingValuesFollowCaffe) {
  CpuBackend cpu;
  std::vector<float> x3{1, 2, 3, 4, 5, 6, 7, 8, 9};  // 3x3
  // kernel 2, stride 2, pad 1: windows straddle the padding; the average divides by the window
  // clipped to the padded input (always 4 here), not by the number of real pixels.
  EXPECT_EQ(pool(cpu, PoolMode::Max, 3, 2, 2, 1, x3), (std::vector<float>{1, 3, 7, 9}));
  EXPECT_EQ(pool(cpu, PoolMode::Average, 3, 2, 2, 1, x3), (std::vector<float>{0.25f, 1.25f, 2.75f, 7.0f}));
  std::vector<float> x4(16);
  for (int i = 0; i < 16; ++i) x4[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  // 4x4, kernel 3, stride 2, ceil: the second window overhangs the image (no padding), so its
  // divisor is 2 (not 3) along that axis: (3+4+7+8+11+12) / 6 = 7.5, (11+12+15+16) / 4 = 13.5.
  EXPECT_EQ(pool(cpu, PoolMode::Average, 4, 3, 2, 0, x4), (std::vector<float>{6.0f, 7.5f, 12.0f, 13.5f}));
  EXPECT_EQ(pool(cpu, PoolMode::Max, 4, 3, 2, 0, x4), (std::vector<float>{11, 12, 15, 16}));
}

TEST(CpuOps, MaxPoolBackwardRoutesToFirstMaximum) {
  CpuBackend cpu;
  PoolParams p{PoolMode::Max, 2, 2, 2, 2, 0, 0, true};
  Tensor x = cpu.alloc({1, 1, 2, 2}), y = cpu.alloc({1, 1, 1, 1}), dy = cpu.alloc({1, 1, 1, 1}),
         dx = cpu.alloc(x.shape());
  from_host(cpu, x, {1, 5, 5, 2});  // a tie: the first maximum (row-major) takes the gradient
  from_host(cpu, dy, {3});
  cpu.pool_forward(p, x, y);
  cpu.pool_backward(p, x, y, dy, dx);
  EXPECT_EQ(to_host(cpu, dx), (std::vector<float>{0, 3, 0, 0}));
}

// ---- LRN ----------------------------------------------------------------------------------------

TEST(CpuOps, LrnMatchesFormula) {
  CpuBackend cpu;
  for (int size : {1, 3, 5}) {
    LrnParams p{size, 0.3f, 0.75f, 1.5f};
    const int64_t N = 2, C = 7, HW = 6;
    Tensor x = cpu.alloc({N, C, 2, 3}), y = cpu.alloc(x.shape());
    fill_uniform(cpu, x, 3, -2, 2);
    cpu.lrn_forward(p, x, y);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < HW; ++i) {
          double sum = 0.0;
          for (int64_t j = c - (size - 1) / 2; j <= c + size / 2; ++j)
            if (j >= 0 && j < C) sum += std::pow(double(x.f32()[(n * C + j) * HW + i]), 2);
          double ref = x.f32()[(n * C + c) * HW + i] / std::pow(1.5 + 0.3 / size * sum, 0.75);
          ASSERT_NEAR(y.f32()[(n * C + c) * HW + i], ref, 1e-6) << "size " << size;
        }
  }
}

}  // namespace
}  // namespace cnnscale::testing
