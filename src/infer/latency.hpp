// Latency statistics of inference requests or batches: count, mean and the nearest-rank
// percentiles MLPerf's LoadGen reports (p50, p90, p99), in seconds.
#pragma once
#include <cstdint>
#include <vector>

namespace cnnscale::infer {

struct LatencyStats {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // seconds; all 0 when count is 0
};

// The nearest-rank percentile of `sorted` (ascending, non-empty): the smallest value with at least
// p percent of the values at or below it, element ceil(p / 100 * n) (1-based). No interpolation:
// every reported latency is one that a request really saw.
double nearest_rank_percentile(const std::vector<double>& sorted, double p);

LatencyStats latency_stats(std::vector<double> seconds);

}  // namespace cnnscale::infer
