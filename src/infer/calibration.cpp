#include "infer/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/int8.hpp"

namespace cnnscale::infer {

AbsHistogram::AbsHistogram() : bins_(kBins, 0.0) {}

void AbsHistogram::add(const float* values, int64_t n) {
  double batch_max = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(values[i])) batch_max = std::max(batch_max, static_cast<double>(std::fabs(values[i])));
  max_abs_ = std::max(max_abs_, batch_max);
  if (range_ == 0 && batch_max > 0) {
    // The first non-zero batch sets the range, a hair above its largest |v| so that it falls in the
    // last bin rather than on the range's edge.
    range_ = batch_max * (1.0 + 1e-6);
  }
  while (range_ > 0 && batch_max >= range_) {  // double the range: bin k of the new is bins 2k, 2k + 1
    for (int k = 0; k < kBins / 2; ++k) bins_[k] = bins_[2 * k] + bins_[2 * k + 1];
    std::fill(bins_.begin() + kBins / 2, bins_.end(), 0.0);
    range_ *= 2;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = values[i];
    if (!std::isfinite(v)) {
      ++non_finite_;
      continue;
    }
    if (v == 0) {  // exact at any scale: says nothing about the threshold (half of every ReLU output)
      ++zeros_;
      continue;
    }
    ++count_;
    const double a = std::fabs(static_cast<double>(v));
    const int b = std::min(kBins - 1, static_cast<int>(a / range_ * kBins));
    bins_[static_cast<size_t>(b)] += 1.0;
  }
}

CalibrationMethod calibration_method_from_name(const std::string& name) {
  if (name == "max") return CalibrationMethod::Max;
  if (name == "percentile") return CalibrationMethod::Percentile;
  if (name == "entropy") return CalibrationMethod::Entropy;
  throw_config("calibration method '{}': expected max, percentile or entropy", name);
}

std::string calibration_method_name(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::Max:
      return "max";
    case CalibrationMethod::Percentile:
      return "percentile";
    case CalibrationMethod::Entropy:
      return "entropy";
  }
  return "?";
}

double max_threshold(const AbsHistogram& h) {
  return h.max_abs();
}

double percentile_threshold(const AbsHistogram& h, double percent) {
  if (!(percent > 0 && percent <= 100)) throw_config("percentile {}: expected 0 < p <= 100", percent);
  if (h.range() == 0) return 0;
  double total = 0;
  for (double b : h.bins()) total += b;
  const double want = total * percent / 100.0;
  double seen = 0;
  for (int i = 0; i < AbsHistogram::kBins; ++i) {
    seen += h.bins()[static_cast<size_t>(i)];
    if (seen >= want) return std::min(h.max_abs(), (i + 1) * h.bin_width());
  }
  return h.max_abs();
}

namespace {

// sum p log(p / q) over the bins where p > 0, for p and q of equal totals given unnormalised.
double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sp += p[i];
    sq += q[i];
  }
  // A bin Q leaves empty where P is not would make the divergence infinite: such bins get a small
  // probability, as TensorRT's and MXNet's smoothing does (Q is not renormalised for it: the few
  // such bins, each kEps / bins, move the divergence far less than the choice between thresholds).
  constexpr double kEps = 1e-4;
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    const double pi = p[i] / sp, qi = q[i] > 0 ? q[i] / sq : kEps / static_cast<double>(p.size());
    kl += pi * std::log(pi / qi);
  }
  return kl;
}

}  // namespace

double entropy_threshold(const AbsHistogram& h, int levels) {
  if (levels < 2 || levels > AbsHistogram::kBins) throw_config("entropy calibration: {} levels", levels);
  if (h.range() == 0) return 0;
  const std::vector<double>& bins = h.bins();
  int last = AbsHistogram::kBins;  // bins past the last non-empty one change nothing: stop there
  while (last > levels && bins[static_cast<size_t>(last - 1)] == 0) --last;
  double best_kl = INFINITY;
  int best_i = last;
  std::vector<double> p, q;
  for (int i = levels; i <= last; ++i) {
    p.assign(bins.begin(), bins.begin() + i);
    double tail = 0;
    for (int k = i; k < AbsHistogram::kBins; ++k) tail += bins[static_cast<size_t>(k)];
    p[static_cast<size_t>(i - 1)] += tail;
    // Q: the unclipped first i bins merged into `levels` groups (group j holds bins [j*i/levels,
    // (j+1)*i/levels)), each group's count spread evenly over the bins where P is non-empty.
    q.assign(static_cast<size_t>(i), 0.0);
    for (int j = 0; j < levels; ++j) {
      const int lo = static_cast<int>(int64_t{j} * i / levels), hi = static_cast<int>(int64_t{j + 1} * i / levels);
      double total = 0;
      int nonzero = 0;
      for (int k = lo; k < hi; ++k) {
        total += bins[static_cast<size_t>(k)];
        if (p[static_cast<size_t>(k)] > 0) ++nonzero;
      }
      if (nonzero == 0) continue;
      for (int k = lo; k < hi; ++k)
        if (p[static_cast<size_t>(k)] > 0) q[static_cast<size_t>(k)] = total / nonzero;
    }
    const double kl = kl_divergence(p, q);
    if (kl < best_kl) {
      best_kl = kl;
      best_i = i;
    }
  }
  return std::min(h.max_abs(), best_i * h.bin_width());
}

double threshold(const AbsHistogram& h, CalibrationMethod m, double percent) {
  switch (m) {
    case CalibrationMethod::Max:
      return max_threshold(h);
    case CalibrationMethod::Percentile:
      return percentile_threshold(h, percent);
    case CalibrationMethod::Entropy:
      return entropy_threshold(h);
  }
  return max_threshold(h);
}

std::vector<float> weight_scales(const std::vector<float>& w, int64_t channels) {
  if (channels < 1 || static_cast<int64_t>(w.size()) % channels != 0)
    throw_config("weight scales: {} weights are not {} equal channels", w.size(), channels);
  const size_t per = w.size() / static_cast<size_t>(channels);
  std::vector<float> scales(static_cast<size_t>(channels));
  for (size_t c = 0; c < scales.size(); ++c)
    scales[c] = int8_weight_scale(w.data() + c * per, static_cast<int64_t>(per));
  return scales;
}

int8_t quantize(float v, float scale) {
  return quantize_int8_value(v, scale);
}

}  // namespace cnnscale::infer
