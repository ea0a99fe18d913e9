// The CPU backend's int8 ops, the reference of the GPU's: quantize_int8 rounds to nearest with ties
// to even and saturates at +-127 (NaN to 0), padding channels are 0; conv_forward_int8 is the
// integer convolution (checked against plain loops over int32 sums) with its fp32 epilogue.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "common/layer_harness.hpp"
#include "core/int8.hpp"

namespace cnnscale::testing {
namespace {

std::vector<int8_t> bytes_of(Backend& b, const Tensor& q) {
  std::vector<int8_t> out(static_cast<size_t>(q.numel()));
  b.download(q, out.data());
  return out;
}

TEST(Int8Ops, QuantizeRoundsTiesToEvenAndSaturates) {
  auto b = make_backend("cpu");
  // scale 0.25: v / scale is exact, so each case is the rounding rule alone.
  const std::vector<float> x{0.125f, 0.375f, 0.625f, -0.625f, 100.0f, -100.0f, std::numeric_limits<float>::quiet_NaN(),
                             31.75f};
  const std::vector<int8_t> want{0, 2, 2, -2, 127, -127, 0, 127};
  Tensor t = b->alloc(Shape{1, 8});
  from_host(*b, t, x);
  Tensor q = b->alloc(Shape{1, 8}, DType::I8);
  b->quantize_int8(t, 0.25f, q);
  EXPECT_EQ(bytes_of(*b, q), want);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(quantize_int8_value(x[i], 0.25f), want[i]) << i;
}

TEST(Int8Ops, QuantizePadsChannelsWithZeros) {
  auto b = make_backend("cpu");
  Tensor x = b->alloc(Shape{2, 3, 2, 2});
  std::vector<float> v(12 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 11.0f;
  from_host(*b, x, v);
  Tensor q = b->alloc(Shape{2, 4, 2, 2}, DType::I8);
  b->quantize_int8(x, 1.0f, q);
  const std::vector<int8_t> got = bytes_of(*b, q);
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 4; ++i) {
        const int8_t want = c < 3 ? static_cast<int8_t>(v[static_cast<size_t>((n * 3 + c) * 4 + i)]) : int8_t{0};
        EXPECT_EQ(got[static_cast<size_t>((n * 4 + c) * 4 + i)], want) << n << " " << c << " " << i;
      }
  EXPECT_THROW(b->quantize_int8(x, 0.0f, q), RuntimeError);
  EXPECT_THROW(b->quantize_int8(x, 1.0f, b->alloc(Shape{2, 2, 2, 2}, DType::I8)), RuntimeError);
}

// A 3x3 convolution with padding over random int8 operands: acc by int32 loops here, then
// acc * scale[k] + bias[k] + z, ReLU. The CPU's float sums are exact (fan-in 5 * 9 = 45 products of
// at most 127^2 each, far below 2^24), so only the epilogue's two fp32 roundings remain.
TEST(Int8Ops, ConvolutionIsTheIntegerSumThenTheEpilogue) {
  auto b = make_backend("cpu");
  const int64_t n = 2, c = 5, h = 6, w = 7, k = 4;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-127, 127);
  std::vector<int8_t> xs(static_cast<size_t>(n * c * h * w)), ws(static_cast<size_t>(k * c * 9));
  for (auto& v : xs) v = static_cast<int8_t>(u(rng));
  for (auto& v : ws) v = static_cast<int8_t>(u(rng));
  Tensor xq = b->alloc(Shape{n, c, h, w}, DType::I8), wq = b->alloc(Shape{k, c, 3, 3}, DType::I8);
  b->upload(xs.data(), xq);
  b->upload(ws.data(), wq);
  const std::vector<float> scale{1e-4f, 2e-4f, 3e-4f, 4e-4f}, bias{0.5f, -0.5f, 0.25f, 0.0f};
  Tensor ts = b->alloc(Shape{k}), tb = b->alloc(Shape{k}), z = b->alloc(Shape{n, k, h, w}),
         y = b->alloc(Shape{n, k, h, w});
  from_host(*b, ts, scale);
  from_host(*b, tb, bias);
  fill_uniform(*b, z, 5, -1.0f, 1.0f);
  const std::vector<float> zs = to_host(*b, z);
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  for (bool relu : {false, true}) {
    b->conv_forward_int8(p, xq, wq, ts, tb, z, relu, y);
    const std::vector<float> got = to_host(*b, y);
    int negative = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < k; ++o)
        for (int64_t r = 0; r < h; ++r)
          for (int64_t s = 0; s < w; ++s) {
            int32_t acc = 0;
            for (int64_t ci = 0; ci < c; ++ci)
              for (int64_t dr = 0; dr < 3; ++dr)
                for (int64_t ds = 0; ds < 3; ++ds) {
                  const int64_t ir = r + dr - 1, is = s + ds - 1;
                  if (ir < 0 || ir >= h || is < 0 || is >= w) continue;
                  acc += int32_t{xs[static_cast<size_t>(((i * c + ci) * h + ir) * w + is)]} *
                         int32_t{ws[static_cast<size_t>(((o * c + ci) * 3 + dr) * 3 + ds)]};
                }
            const size_t at = static_cast<size_t>(((i * k + o) * h + r) * w + s);
            double want =
                static_cast<double>(acc) * scale[static_cast<size_t>(o)] + bias[static_cast<size_t>(o)] + zs[at];
            negative += want < 0;
            if (relu) want = std::max(want, 0.0);
            EXPECT_NEAR(got[at], want, 1e-6 * (1.0 + std::fabs(want))) << i << " " << o << " " << r << " " << s;
          }
    EXPECT_GT(negative, 0);  // the ReLU has something to cut
  }
}

}  // namespace
}  // namespace cnnscale::testing
