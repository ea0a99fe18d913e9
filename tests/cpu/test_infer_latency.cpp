// Latency percentiles against values worked out by hand with the nearest-rank rule.
#include <gtest/gtest.h>

#include "infer/latency.hpp"

namespace cnnscale::infer {
namespace {

TEST(InferLatency, NearestRankPercentilesOfKnownValues) {
  // 1..100 ms shuffled: p50 is the 50th value, p90 the 90th, p99 the 99th (no interpolation).
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i * 1e-3);
  const LatencyStats s = latency_stats(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.p50, 50e-3);
  EXPECT_DOUBLE_EQ(s.p90, 90e-3);
  EXPECT_DOUBLE_EQ(s.p99, 99e-3);
  EXPECT_DOUBLE_EQ(s.max, 100e-3);
  EXPECT_NEAR(s.mean, 50.5e-3, 1e-15);
  // Ten values: ceil(0.9 * 10) = 9th, ceil(0.99 * 10) = 10th, ceil(0.5 * 10) = 5th.
  const std::vector<double> ten = {7, 1, 9, 3, 5, 10, 2, 8, 4, 6};
  const LatencyStats t = latency_stats(ten);
  EXPECT_EQ(t.p50, 5);
  EXPECT_EQ(t.p90, 9);
  EXPECT_EQ(t.p99, 10);
  // One value is every percentile; none gives zeros.
  const LatencyStats one = latency_stats({0.25});
  EXPECT_EQ(one.p50, 0.25);
  EXPECT_EQ(one.p99, 0.25);
  EXPECT_EQ(latency_stats({}).count, 0);
}

}  // namespace
}  // namespace cnnscale::infer
