// Host bf16/fp16 conversions (core/half.hpp) against the formats' definitions: every 16-bit value
// survives a round trip, ties round to even, overflow goes to infinity, subnormals and signs hold.
// The CUDA conversions are checked against these, bit for bit, in tests/gpu.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/backend.hpp"
#include "core/half.hpp"

namespace cnnscale {
namespace {

TEST(Half, EveryBf16AndF16ValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float fb = bf16_to_float(b), fh = f16_to_float(b);
    if (std::isnan(fb)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(fb)))) << std::hex << h;
    } else {
      EXPECT_EQ(float_to_bf16(fb), b) << std::hex << h;
    }
    if (std::isnan(fh)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(fh)))) << std::hex << h;
    } else {
      EXPECT_EQ(float_to_f16(fh), b) << std::hex << h;
    }
  }
}

TEST(Half, DecodesKnownValues) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);              // largest finite fp16
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00)));
}

TEST(Half, RoundsToNearestEven) {
  // bf16 keeps 8 significant bits: between 1 and 2 its spacing is 2^-7.
  const float ulp = std::ldexp(1.0f, -7);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + ulp / 2)), 1.0f);            // tie, 1.0 is even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.5f * ulp)), 1.0f + 2 * ulp);  // tie, rounds up to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + ulp / 2 + ulp / 64)), 1.0f + ulp);
  // fp16 keeps 11: spacing 2^-10 between 1 and 2.
  const float hu = std::ldexp(1.0f, -10);
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + hu / 2)), 1.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 1.5f * hu)), 1.0f + 2 * hu);
  // Subnormal ties: 2.5 and 3.5 units of 2^-24 go to 2 and 4.
  EXPECT_EQ(float_to_f16(2.5f * std::ldexp(1.0f, -24)), 0x0002);
  EXPECT_EQ(float_to_f16(3.5f * std::ldexp(1.0f, -24)), 0x0004);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // below half the smallest subnormal
  EXPECT_EQ(float_to_f16(-std::ldexp(1.0f, -26)), 0x8000);  // keeps its sign
}

TEST(Half, OverflowGoesToInfinity) {
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the midpoint: ties to even, which is infinity
  EXPECT_EQ(float_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past bf16's largest
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(Half, CpuBackendConvertsAndScales) {
  auto cpu = make_backend("cpu");
  Tensor a = cpu->alloc(Shape{4}), h = cpu->alloc(Shape{4}, DType::BF16), b = cpu->alloc(Shape{4});
  float* av = a.f32();
  av[0] = 1.0f;
  av[1] = -3.0f;
  av[2] = 1.0f + std::ldexp(1.0f, -8);  // a tie in bf16: rounds to 1
  av[3] = 1e-3f;
  cpu->convert(a, h, 2.0f);
  cpu->convert(h, b);
  EXPECT_EQ(b.f32()[0], 2.0f);
  EXPECT_EQ(b.f32()[1], -6.0f);
  EXPECT_EQ(b.f32()[2], 2.0f);
  EXPECT_EQ(b.f32()[3], round_to(DType::BF16, 2e-3f));
  // The CPU reference stores 16-bit tensors but does not compute on them.
  EXPECT_THROW(cpu->relu_forward(h, h), Error);
  EXPECT_THROW(make_backend("cpu", 0, Precision::BF16), ConfigError);
}

// convert_segments rounds the elements of its ranges and no other: the gaps between them keep what
// the destination held (in the exchange, the mirrored gradients backward wrote there). The expected
// values are convert()'s own, element by element, so the test holds on any x86-64.
TEST(Half, ConvertSegmentsRoundsTheRangesOnly) {
  auto cpu = make_backend("cpu");
  const int64_t n = 20;
  Tensor src = cpu->alloc(Shape{n}), dst = cpu->alloc(Shape{n}, DType::BF16), one = cpu->alloc(Shape{1}, DType::BF16);
  for (int64_t i = 0; i < n; ++i) src.f32()[i] = 1.0f + static_cast<float>(i) * std::ldexp(1.0f, -9);  // ties too
  Tensor sentinel = cpu->alloc(Shape{n});
  cpu->fill(sentinel, -7.0f);
  cpu->convert(sentinel, dst);  // what the gaps must still hold afterwards
  const uint16_t kept = float_to_bf16(-7.0f);
  const std::vector<int32_t> bounds = {0, 2, 5, 9, 12, 12, 19, 20};  // an empty range among them
  Tensor ranges = cpu->alloc(Shape{static_cast<int64_t>(bounds.size())}, DType::I32);
  cpu->upload(bounds.data(), ranges);
  cpu->convert_segments(src, dst, ranges);
  const auto* got = static_cast<const uint16_t*>(dst.raw());
  for (int64_t i = 0; i < n; ++i) {
    const bool inside = i < 2 || (i >= 5 && i < 9) || i >= 19;
    cpu->convert(src.view(i, Shape{1}), one);
    const uint16_t want = inside ? *static_cast<const uint16_t*>(one.raw()) : kept;
    EXPECT_EQ(got[i], want) << "element " << i << (inside ? " (in a range)" : " (between ranges)");
  }
  // Ranges out of order or past the end are refused, naming the range.
  const std::vector<int32_t> bad = {4, 8, 2, 3};
  Tensor unordered = cpu->alloc(Shape{4}, DType::I32);
  cpu->upload(bad.data(), unordered);
  EXPECT_THROW(cpu->convert_segments(src, dst, unordered), Error);
  const std::vector<int32_t> past = {18, 21};
  Tensor beyond = cpu->alloc(Shape{2}, DType::I32);
  cpu->upload(past.data(), beyond);
  EXPECT_THROW(cpu->convert_segments(src, dst, beyond), Error);
}

}  // namespace
}  // namespace cnnscale
