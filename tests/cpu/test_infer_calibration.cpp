// int8 calibration's numbers (infer/calibration.hpp): the |v| histogram keeps every count as its
// range grows (exact zeros apart); each method's threshold on distributions whose answer is known from their shape; per
// channel weight scales; and symmetric quantisation's rounding and clamping.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "infer/calibration.hpp"

namespace cnnscale::infer {
namespace {

double total(const AbsHistogram& h) {
  double t = 0;
  for (double b : h.bins()) t += b;
  return t;
}

// Uniform values in [lo, hi) from a fixed seed: mt19937_64 is specified bit for bit by the standard,
// and the mapping to [0, 1) here is ours, so every machine draws the same values.
std::vector<float> uniform(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1.0p-53));
  return v;
}

TEST(AbsHistogram, GrowingTheRangeKeepsEveryCountAndBinsEachValueOnce) {
  AbsHistogram h;
  const std::vector<float> zeros(10, 0.0f);
  h.add(zeros.data(), 10);  // exact zeros are counted apart, and set no range
  EXPECT_EQ(h.range(), 0);
  EXPECT_EQ(h.zeros(), 10);
  const std::vector<float> a = uniform(1000, -1, 1, 1);
  h.add(a.data(), 1000);
  const double first_range = h.range();
  EXPECT_GT(first_range, 0.99);
  EXPECT_LT(first_range, 1.0 + 1e-5);
  EXPECT_DOUBLE_EQ(total(h), 1000);
  // A batch reaching 3.5 doubles the range twice; the earlier 1000 counts merge into the low bins.
  const std::vector<float> b = {3.5f, -2.0f, NAN, INFINITY};
  h.add(b.data(), 4);
  EXPECT_DOUBLE_EQ(h.range(), 4 * first_range);
  EXPECT_DOUBLE_EQ(h.max_abs(), 3.5);
  EXPECT_DOUBLE_EQ(total(h), 1002);
  EXPECT_EQ(h.count(), 1002);
  EXPECT_EQ(h.zeros(), 10);
  EXPECT_EQ(h.non_finite(), 2);
  double low = 0;  // everything of the first two batches lies below the old range, a quarter now
  for (int k = 0; k < AbsHistogram::kBins / 4; ++k) low += h.bins()[static_cast<size_t>(k)];
  EXPECT_DOUBLE_EQ(low, 1000);
}

TEST(Calibration, MaxIsTheLargestMagnitudeAndPercentileItsQuantile) {
  AbsHistogram h;
  const std::vector<float> v = uniform(200000, -1, 1, 2);
  h.add(v.data(), static_cast<int64_t>(v.size()));
  EXPECT_DOUBLE_EQ(max_threshold(h), h.max_abs());
  // |U(-1, 1)| is U(0, 1): its p-th percentile is p / 100, known to within a bin (1/2048) plus the
  // sampling error of a quantile of 2e5 draws (standard deviation sqrt(p (1 - p) / n) < 1.2e-3).
  for (double p : {50.0, 90.0, 99.0}) {
    SCOPED_TRACE(p);
    EXPECT_NEAR(percentile_threshold(h, p), p / 100, h.bin_width() + 6e-3);
  }
  EXPECT_DOUBLE_EQ(percentile_threshold(h, 100), h.max_abs());
  EXPECT_THROW(percentile_threshold(h, 0), ConfigError);
}

TEST(Calibration, EntropyKeepsTheRangeOfAUniformDistribution) {
  // Uniform |v|: quantising to 128 levels loses nothing of its (flat) shape at any range, while
  // clipping piles the tail onto one bin, so the least divergence keeps (nearly) the whole range.
  AbsHistogram h;
  const std::vector<float> v = uniform(200000, 0, 1, 3);
  h.add(v.data(), static_cast<int64_t>(v.size()));
  EXPECT_GT(entropy_threshold(h), 0.95 * h.max_abs());
}

TEST(Calibration, EntropyClipsARareOutlierThatMaxKeeps) {
  // 1e5 values in [0, 1) and one at 1000: max spends the 127 levels on [0, 1000], leaving the bulk
  // in the lowest level; entropy clips at the smallest candidate it has, 128 of 2048 bins, i.e. a
  // sixteenth of the range, since the outlier's mass (1e-5) costs less than the bulk's resolution.
  AbsHistogram h;
  std::vector<float> v = uniform(100000, 0, 1, 4);
  v.push_back(1000.0f);
  h.add(v.data(), static_cast<int64_t>(v.size()));
  EXPECT_DOUBLE_EQ(max_threshold(h), 1000.0);
  EXPECT_LE(entropy_threshold(h), h.range() / 16 + 1e-9);
  // The 99.99th percentile (about 0.9999) clips the outlier too, rounded up to its bin's upper edge.
  EXPECT_LE(percentile_threshold(h, 99.99), 1.0 + h.bin_width());
}

TEST(Calibration, EntropyClipsTheLongTailOfAGaussian) {
  // |N(0, 1)| from 2e5 draws reaches about 5.5: the levels are worth more in the bulk than on the
  // few values beyond 4 (6e-5 of the mass), so the threshold lies inside the range, yet above 2.6
  // (the 99th percentile), since clipping 1% of the mass onto one bin costs more than it saves.
  std::mt19937_64 rng(5);
  std::vector<float> v(200000);
  for (size_t i = 0; i < v.size(); i += 2) {  // Box-Muller on our own uniform draws
    const double u1 = (static_cast<double>(rng() >> 11) + 1) * 0x1.0p-53,
                 u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2 * std::log(u1));
    v[i] = static_cast<float>(r * std::cos(2 * std::numbers::pi * u2));
    v[i + 1] = static_cast<float>(r * std::sin(2 * std::numbers::pi * u2));
  }
  AbsHistogram h;
  h.add(v.data(), static_cast<int64_t>(v.size()));
  const double t = entropy_threshold(h);
  EXPECT_LT(t, h.max_abs());
  EXPECT_GT(t, 2.6);
}

TEST(Calibration, WeightScalesArePerOutputChannelMaxOver127) {
  const std::vector<float> w = {0.5f,  -1.27f, 0.1f,  // channel 0: max 1.27
                                0.0f,  0.0f,   0.0f,  // channel 1: all zero
                                2.54f, 1.0f,   -2.0f};
  const std::vector<float> s = weight_scales(w, 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_FLOAT_EQ(s[0], 1.27f / 127);
  EXPECT_FLOAT_EQ(s[1], 1.0f);
  EXPECT_FLOAT_EQ(s[2], 2.54f / 127);
  EXPECT_EQ(quantize(-1.27f, s[0]), -127);  // each channel's largest weight is a full-scale level
  EXPECT_EQ(quantize(2.54f, s[2]), 127);
  EXPECT_THROW(weight_scales(w, 2), ConfigError);
}

TEST(Calibration, QuantiseRoundsToNearestEvenAndClampsSymmetrically) {
  EXPECT_EQ(quantize(2.5f, 1.0f), 2);  // ties to even
  EXPECT_EQ(quantize(3.5f, 1.0f), 4);
  EXPECT_EQ(quantize(-2.5f, 1.0f), -2);
  EXPECT_EQ(quantize(0.26f, 0.5f), 1);
  EXPECT_EQ(quantize(1000.0f, 1.0f), 127);
  EXPECT_EQ(quantize(-1000.0f, 1.0f), -127);  // not -128: the range stays symmetric
  EXPECT_EQ(quantize(NAN, 1.0f), 0);
  EXPECT_EQ(calibration_method_from_name("entropy"), CalibrationMethod::Entropy);
  EXPECT_THROW(calibration_method_from_name("kl"), ConfigError);
}

}  // namespace
}  // namespace cnnscale::infer
