// Nearest-rank percentiles and the other latency statistics.
#include "infer/latency.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"

namespace cnnscale::infer {

double nearest_rank_percentile(const std::vector<double>& sorted, double p) {
  CNNSCALE_CHECK(!sorted.empty(), "percentile of no values");
  CNNSCALE_CHECK(p > 0 && p <= 100, "percentile {} outside (0, 100]", p);
  const auto n = static_cast<double>(sorted.size());
  // The small relative slack keeps p / 100 * n from landing one rank high through rounding
  // (90 / 100 * 10 is 9.000000000000002 in binary floating point).
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * n * (1 - 1e-12)));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

LatencyStats latency_stats(std::vector<double> seconds) {
  LatencyStats s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  s.count = static_cast<int64_t>(seconds.size());
  s.mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  s.p50 = nearest_rank_percentile(seconds, 50);
  s.p90 = nearest_rank_percentile(seconds, 90);
  s.p99 = nearest_rank_percentile(seconds, 99);
  s.max = seconds.back();
  return s;
}

}  // namespace cnnscale::infer
