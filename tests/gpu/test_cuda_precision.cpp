// The CUDA backend's conversions between precisions against the host's (core/half.hpp), bit for
// bit: rounding (ties, subnormals, overflow), 16-bit fill and scaled conversion, and conversions
// that reorder the memory layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/half.hpp"
#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/device_context.hpp"
#endif

namespace cnnscale::testing {
namespace {

// The device's conversions round exactly as the host's (core/half.hpp), including ties, subnormals
// and overflow, and 16-bit fill and scaled conversion work.
TEST(CudaPrecision, ConversionsMatchTheHostBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  std::vector<float> v;
  for (int e = -30; e <= 17; ++e)
    for (float m : {1.0f, 1.0f + std::ldexp(1.0f, -8), 1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11),
                    1.3f, 1.99999f})
      for (float sign : {1.0f, -1.0f}) v.push_back(sign * std::ldexp(m, e));
  v.push_back(65519.0f);
  v.push_back(65520.0f);
  v.push_back(3e38f);
  Backend& g = gpu_backend();
  Tensor wide = g.alloc(Shape{static_cast<int64_t>(v.size())});
  from_host(g, wide, v);
  for (DType t : {DType::BF16, DType::F16}) {
    Tensor narrow = g.alloc(wide.shape(), t);
    g.convert(wide, narrow);
    std::vector<uint16_t> bits(v.size());
    g.download(narrow, bits.data());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t want = t == DType::BF16 ? float_to_bf16(v[i]) : float_to_f16(v[i]);
      EXPECT_EQ(bits[i], want) << dtype_name(t) << " of " << v[i];
    }
    g.fill(narrow, 2.5f);
    EXPECT_EQ(to_host(g, narrow), std::vector<float>(v.size(), 2.5f));
    g.convert(wide, narrow, 0.5f);
    const std::vector<float> halved = to_host(g, narrow);
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(halved[i], round_to(t, v[i] * 0.5f)) << v[i];
  }
}

// Reordering conversions (NCHW <-> NHWC, as the nets' inputs and channels-last filter copies take
// them) put every element where the host's index arithmetic says, converted and scaled exactly as
// the plain conversion: RGB's 3 channels (whole rows per tile), channel counts spanning several
// tiles with partial edge tiles, and one-pixel planes.
TEST(CudaPrecision, ReorderingConversionsMatchTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  for (const Shape& s : {Shape{2, 3, 17, 19}, Shape{3, 96, 5, 7}, Shape{2, 50, 6, 6}, Shape{1, 40, 33, 1},
                         Shape{2, 33, 1, 1}}) {
    SCOPED_TRACE(s.to_string());
    const int64_t n = s.n(), c = s.c(), hw = s.h() * s.w();
    Tensor nchw = g.alloc(s);
    fill_uniform(g, nchw, 17, -3.0f, 3.0f);
    const std::vector<float> src = to_host(g, nchw);
    std::vector<float> want(src.size());  // src reordered to NHWC on the host
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p)
          want[static_cast<size_t>((b * hw + p) * c + ch)] = src[static_cast<size_t>((b * c + ch) * hw + p)];
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(dtype_name(t));
      for (float scale : {1.0f, 0.5f}) {
        Tensor nhwc = g.alloc(s, t).as_layout(Layout::NHWC);
        g.convert(nchw, nhwc, scale);
        // The raw NHWC memory (to_host would reorder a channels-last tensor back through the kernel
        // under test): the same bytes tagged NCHW are only widened.
        const std::vector<float> got = to_host(g, nhwc.as_layout(Layout::NCHW));
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], round_to(t, scale == 1.0f ? want[i] : scale * want[i])) << "NHWC element " << i;
        // And back: NHWC -> NCHW in f32 returns the (rounded, scaled) values to their NCHW places.
        Tensor back = g.alloc(s);
        g.convert(nhwc, back);
        const std::vector<float> returned = to_host(g, back);
        for (size_t i = 0; i < returned.size(); ++i)
          ASSERT_EQ(returned[i], round_to(t, scale == 1.0f ? src[i] : scale * src[i])) << "NCHW element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace cnnscale::testing
