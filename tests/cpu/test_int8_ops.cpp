// The CPU backend's int8 ops, the reference of the GPU's: quantize_int8 rounds to nearest with ties
// to even and saturates at +-127 (NaN to 0), padding channels are 0; conv_forward_int8 is the
// integer convolution (checked against plain loops over int32 sums) with its fp32 epilogue, to an
// f32 y or an int8 one (rounded, saturated at 127; an int8 addend scaled per channel);
// linear_forward_int8 is the integer matrix product with its epilogue.
#include <gtest/gtest.h>

#include <algorithm>
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
    b->conv_forward_int8(p, xq, wq, ts, tb, z, Tensor(), relu, y);
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

// The int8 output of an int8 convolution: round(acc * scale + bias + z_q * z_scale), after the ReLU,
// saturated at 127 -- the next layer's input, requantised in the epilogue. The same loops as above
// give acc; the expected value is formed in double and rounded with core/int8.hpp's rule (scale 1).
// The CPU forms it in fp32: four roundings (product, sum, addend product, sum) of terms below 2^10,
// each within half an ulp, 2^-15, so within 2^-13 of the double; its rounding can differ only for a
// value within that of a half-integer, which the check allows as one unit where it finds one.
TEST(Int8Ops, Int8OutputIsTheRoundedEpilogueWithAnInt8Addend) {
  auto b = make_backend("cpu");
  const int64_t n = 2, c = 16, h = 5, w = 5, k = 8;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> u(-127, 127), pos(0, 127);
  std::vector<int8_t> xs(static_cast<size_t>(n * c * h * w)), ws(static_cast<size_t>(k * c)),
      zq(static_cast<size_t>(n * k * h * w));
  for (auto& v : xs) v = static_cast<int8_t>(pos(rng));  // a ReLU's output, as int8 activations are
  for (auto& v : ws) v = static_cast<int8_t>(u(rng));
  for (auto& v : zq) v = static_cast<int8_t>(pos(rng));
  Tensor xq = b->alloc(Shape{n, c, h, w}, DType::I8), wq = b->alloc(Shape{k, c, 1, 1}, DType::I8),
         z = b->alloc(Shape{n, k, h, w}, DType::I8), y = b->alloc(Shape{n, k, h, w}, DType::I8);
  b->upload(xs.data(), xq);
  b->upload(ws.data(), wq);
  b->upload(zq.data(), z);
  // acc is up to 16 * 127^2 = 258,064 in size: scales of ~1e-3 put v in roughly [-250, 250], so
  // some outputs saturate and some are cut by the ReLU.
  const std::vector<float> scale{1e-3f, 2e-3f, 5e-4f, 1e-3f, 1.5e-3f, 1e-3f, 2e-4f, 1e-3f},
      bias{0.5f, -3.0f, 10.25f, 0.0f, -1.0f, 2.0f, 0.0f, 7.5f}, zscale{0.5f, 1.0f, 0.25f, 2.0f, 0.5f, 1.0f, 0.0f, 1.5f};
  Tensor ts = b->alloc(Shape{k}), tb = b->alloc(Shape{k}), tz = b->alloc(Shape{k});
  from_host(*b, ts, scale);
  from_host(*b, tb, bias);
  from_host(*b, tz, zscale);
  ConvParams p;
  p.kernel_h = p.kernel_w = 1;
  b->conv_forward_int8(p, xq, wq, ts, tb, z, tz, true, y);
  const std::vector<int8_t> got = bytes_of(*b, y);
  int saturated = 0, cut = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < k; ++o)
      for (int64_t px = 0; px < h * w; ++px) {
        int32_t acc = 0;
        for (int64_t ci = 0; ci < c; ++ci)
          acc += int32_t{xs[static_cast<size_t>((i * c + ci) * h * w + px)]} *
                 int32_t{ws[static_cast<size_t>(o * c + ci)]};
        const size_t at = static_cast<size_t>((i * k + o) * h * w + px);
        const size_t ch = static_cast<size_t>(o);
        const double v = std::max(0.0, static_cast<double>(acc) * scale[ch] + bias[ch] + zq[at] * double{zscale[ch]});
        const double want = std::min(127.0, std::nearbyint(v));
        saturated += v > 127.5;
        cut += v == 0.0;
        if (got[at] != static_cast<int8_t>(want)) {
          EXPECT_LT(std::fabs(v - std::floor(v) - 0.5), 1.0 / 8192)
              << "not a near-tie: " << v << " -> " << int{got[at]};
          EXPECT_EQ(std::abs(int{got[at]} - static_cast<int>(want)), 1) << v;
        }
      }
  EXPECT_GT(saturated, 0);
  EXPECT_GT(cut, 0);
  // An int8 y is a ReLU's; an int8 addend needs its scale, and a float one none.
  EXPECT_THROW(b->conv_forward_int8(p, xq, wq, ts, tb, z, tz, false, y), RuntimeError);
  EXPECT_THROW(b->conv_forward_int8(p, xq, wq, ts, tb, z, Tensor(), true, y), RuntimeError);
  EXPECT_THROW(b->conv_forward_int8(p, xq, wq, ts, tb, Tensor(), tz, true, y), RuntimeError);
}

// y (N, K) = (x_q w_q^T) * scale + bias (ReLU): the int32 product by loops here; the weights' rows past
// K (padding) are ignored. Both sides sum exactly, so only the epilogue's fp32 rounding remains.
TEST(Int8Ops, LinearIsTheIntegerProductThenTheEpilogue) {
  auto b = make_backend("cpu");
  const int64_t n = 3, c = 40, k = 5, kp = 8;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u(-127, 127);
  std::vector<int8_t> xs(static_cast<size_t>(n * c)), ws(static_cast<size_t>(kp * c));
  for (auto& v : xs) v = static_cast<int8_t>(u(rng));
  for (auto& v : ws) v = static_cast<int8_t>(u(rng));
  Tensor xq = b->alloc(Shape{n, c}, DType::I8), wq = b->alloc(Shape{kp, c}, DType::I8), y = b->alloc(Shape{n, k});
  b->upload(xs.data(), xq);
  b->upload(ws.data(), wq);
  const std::vector<float> scale{1e-4f, 2e-4f, 3e-4f, 4e-4f, 5e-4f}, bias{0.5f, -0.5f, 0.25f, 0.0f, -2.0f};
  Tensor ts = b->alloc(Shape{k}), tb = b->alloc(Shape{k});
  from_host(*b, ts, scale);
  from_host(*b, tb, bias);
  for (bool relu : {false, true}) {
    b->linear_forward_int8(xq, wq, ts, tb, relu, y);
    const std::vector<float> got = to_host(*b, y);
    int negative = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < k; ++o) {
        int32_t acc = 0;
        for (int64_t j = 0; j < c; ++j)
          acc += int32_t{xs[static_cast<size_t>(i * c + j)]} * int32_t{ws[static_cast<size_t>(o * c + j)]};
        double want = static_cast<double>(acc) * scale[static_cast<size_t>(o)] + bias[static_cast<size_t>(o)];
        negative += want < 0;
        if (relu) want = std::max(want, 0.0);
        EXPECT_NEAR(got[static_cast<size_t>(i * k + o)], want, 1e-6 * (1.0 + std::fabs(want))) << i << " " << o;
      }
    EXPECT_GT(negative, 0);
  }
  EXPECT_THROW(b->linear_forward_int8(xq, b->alloc(Shape{4, c}, DType::I8), ts, tb, false, y), RuntimeError);
}

}  // namespace
}  // namespace cnnscale::testing
