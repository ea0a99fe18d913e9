// Post-training int8 quantisation, the numbers of it: symmetric scales (a tensor's value v is stored
// as q = round(v / scale) clamped to [-127, 127], and stands for q * scale), per output channel for
// weights, per tensor for activations, whose clipping threshold T (scale = T / 127) comes from a
// histogram of |v| collected over calibration batches of real data.
//
// Which threshold: clipping at the largest |v| seen (max) spends the 127 levels on a range a few
// outliers set; a percentile clips a fixed share; entropy (the method TensorRT calibrates with)
// chooses the T whose 128-level quantisation loses the least information about the distribution
// of |v| (the smallest Kullback-Leibler divergence between the histogram clipped at T, its tail
// added to its last bin, and that histogram quantised to 128 levels). `cnnscale calibrate` defaults
// to the 99.99th percentile: on Fashion-MNIST's LeNet and small ResNet (briefly trained) it cost
// 0.0 and 0.2 points of top-1 where entropy cost 1.3 and 4.0 and max 0.0 and 0.6. In a residual
// network the tensor a block's first convolution reads is also its identity shortcut, whose tail
// carries signal that entropy (a criterion for one layer's input) clips; max spends the levels on
// the rarest values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cnnscale::infer {

// |v| of one tensor over calibration batches, in kBins equal bins over [0, range). The range is set
// by the first batch with a non-zero value (its largest |v|) and doubled, pairs of bins merged,
// whenever a later batch holds a larger |v|: every value lands in a bin and earlier counts stay.
// Exact zeros (half of every ReLU output) are counted apart, not binned: int8 stores them exactly
// at any scale, so they say nothing about the threshold, and as a spike in the first bin they would
// make every wide quantisation level look costly to the entropy criterion.
class AbsHistogram {
 public:
  static constexpr int kBins = 2048;
  AbsHistogram();
  void add(const float* values, int64_t n);  // NaN and infinities are counted apart, never binned
  double range() const { return range_; }
  double max_abs() const { return max_abs_; }
  double bin_width() const { return range_ / kBins; }
  int64_t count() const { return count_; }            // values binned (finite, non-zero)
  int64_t zeros() const { return zeros_; }            // exact zeros, counted apart
  int64_t non_finite() const { return non_finite_; }  // NaN or inf values seen
  const std::vector<double>& bins() const { return bins_; }

 private:
  std::vector<double> bins_;
  double range_ = 0, max_abs_ = 0;
  int64_t count_ = 0, zeros_ = 0, non_finite_ = 0;
};

enum class CalibrationMethod { Max, Percentile, Entropy };
CalibrationMethod calibration_method_from_name(const std::string& name);  // ConfigError unless max|percentile|entropy
std::string calibration_method_name(CalibrationMethod m);

// The clipping threshold T of each method (0 for a histogram of zeros only).
double max_threshold(const AbsHistogram& h);
// The upper edge of the bin holding the `percent`-th percentile of |v| (0 < percent <= 100).
double percentile_threshold(const AbsHistogram& h, double percent);
// TensorRT's entropy calibration: over every candidate T = i * bin width, i = levels .. kBins, the
// one minimising KL(P || Q), P the first i bins with the rest added to bin i - 1, Q the first i bins
// merged into `levels` groups, each group's count spread evenly over its non-empty bins (zeros of Q
// where P is not zero smoothed to a small probability).
double entropy_threshold(const AbsHistogram& h, int levels = 128);
double threshold(const AbsHistogram& h, CalibrationMethod m, double percent = 99.99);

// Per output channel scales of a weight tensor laid out as `channels` rows of equal length (KCRS
// filters, (out, in) fully connected weights): max |w| of the row / 127 (1 for an all-zero row, whose
// weights quantise to 0 under any scale).
std::vector<float> weight_scales(const std::vector<float>& w, int64_t channels);

// round(v / scale) to nearest, ties to even, clamped to [-127, 127] (symmetric: -128 unused, so
// that negation stays in range); NaN maps to 0: core/int8.hpp's rule, which the backends' int8
// kernels share.
int8_t quantize(float v, float scale);

}  // namespace cnnscale::infer
