// The MLPerf-style inference scenarios (offline, single-stream, server) and the search for the highest
// server rate that meets a latency bound. Pure logic over a clock and a callback that runs one batch:
// no device, no network, so every scheduling decision can be checked against a fake clock.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "infer/latency.hpp"

namespace cnnscale::infer {

// The clock the scenarios run on, in seconds from an arbitrary origin: SteadyClock for measurements,
// a fake one in tests, where "running" a batch just advances the time by a service-time model.
class ScenarioClock {
 public:
  virtual ~ScenarioClock() = default;
  virtual double now() = 0;
  // Returns at or after time t (at once when t has passed); never early.
  virtual void sleep_until(double t) = 0;
};

// std::chrono::steady_clock, with its origin at construction so that a double keeps sub-nanosecond
// resolution over any run.
class SteadyClock final : public ScenarioClock {
 public:
  SteadyClock();
  double now() override;
  void sleep_until(double t) override;

 private:
  int64_t origin_ns_;
};

// Runs one batch of n samples to completion (forward pass and device synchronisation). The scenario
// reads the clock before and after, so whatever the callback does counts as the batch's time.
using RunBatch = std::function<void(int64_t n)>;

// Offline: throughput. Back-to-back batches of `batch` samples until both minimums are met.
struct OfflineOptions {
  int64_t batch = 1;        // --batch, >= 1
  double min_seconds = 0;   // --min-seconds, >= 0
  int64_t min_batches = 1;  // --min-batches, >= 1
};
struct OfflineResult {
  int64_t batches = 0, samples = 0;
  double seconds = 0;  // from the first batch's start to the last one's end
  double samples_per_s = 0;
  LatencyStats batch_latency;
};
OfflineResult run_offline(ScenarioClock& clock, const RunBatch& run_batch, const OfflineOptions& options);

// Single-stream: one sample at a time, each issued the moment the previous one completes, until both
// minimums are met. MLPerf's metric is the 90th percentile of the latency.
struct SingleStreamOptions {
  double min_seconds = 0;   // --min-seconds, >= 0
  int64_t min_queries = 1;  // --min-queries, >= 1
};
struct SingleStreamResult {
  int64_t queries = 0;
  double seconds = 0;
  LatencyStats latency;
};
SingleStreamResult run_single_stream(ScenarioClock& clock, const RunBatch& run_batch,
                                     const SingleStreamOptions& options);

// Server: queries arrive on their own schedule (Poisson) and are batched dynamically: whenever the
// device is idle, every query that has arrived and waits, oldest first and at most max_batch of them,
// goes in one batch; with none waiting the device sleeps until the next arrival. A query's latency runs
// from its arrival to its batch's completion, so time spent queueing behind a busy device counts.
struct ServerOptions {
  double rate = 0;           // --rate: offered queries per second, > 0
  int64_t max_batch = 1;     // --max-batch, >= 1
  double latency_bound = 0;  // --latency-bound: seconds, > 0; the bound is on the 99th percentile
  double seconds = 0;        // --seconds: length of the arrival schedule, > 0
  uint64_t seed = 0;         // --seed of the arrival schedule
};
struct ServerResult {
  // Offered: the nominal rate of a Poisson schedule; for an explicit one, (n - 1) / (last - first
  // arrival), NaN with fewer than two distinct arrival times.
  double offered_rate = 0;
  // Achieved: queries / (last completion - first arrival). Below the offered rate when the device
  // cannot keep up; then the backlog drains after the last arrival and stretches the span.
  double achieved_rate = 0;
  int64_t queries = 0, batches = 0;
  double mean_batch = 0;
  double latency_bound = 0;
  LatencyStats latency;
  double within_bound = 0;        // fraction of the queries with latency <= latency_bound
  bool meets_bound = false;       // latency.p99 <= latency_bound
  std::vector<double> latencies;  // each query's latency in seconds, in arrival order
};
ServerResult run_server(ScenarioClock& clock, const RunBatch& run_batch, const ServerOptions& options);
// The checks run_server makes first (ConfigError naming the flag), for callers that check their
// flags before loading anything.
void validate(const ServerOptions& options);

// The same over an explicit schedule: arrival times in seconds from the start, ascending (equal times
// are simultaneous arrivals). For tests and for replaying a recorded trace.
ServerResult run_server_arrivals(ScenarioClock& clock, const RunBatch& run_batch, const std::vector<double>& arrivals,
                                 int64_t max_batch, double latency_bound);

// Poisson arrivals of `rate` per second in [0, seconds), reproducible from `seed`. The schedule is
// one unit-rate sequence divided by the rate, so the same seed at twice the rate begins with the same
// queries at exactly half the times (and goes on with more): the trials of a rate search differ in
// their rate alone.
std::vector<double> poisson_arrivals(double rate, double seconds, uint64_t seed);

// The highest offered rate whose run meets the latency bound, by bisection: `lo` (--rate-lo) must meet
// it (it is run first, and a ConfigError says so when it does not), `hi` (--rate-hi) need not, and each
// of `steps` (--rate-steps, >= 1) trials halves the bracket. At the end best_rate met the bound and
// best_rate + resolution either failed it in a trial or is `hi`, never tried: where meeting the bound
// is monotone in the rate, the highest rate that meets it lies in [best_rate, best_rate + resolution).
struct RateSearchResult {
  double best_rate = 0;
  double resolution = 0;  // (hi - lo) / 2^steps
  ServerResult best;      // the run at best_rate, with its per-query latencies
  // Every run in order, lo first, without per-query latencies: a long search would otherwise hold
  // all of them.
  std::vector<ServerResult> trials;
};
// One trial: a server run at the given offered rate.
using RateTrial = std::function<ServerResult(double rate)>;
RateSearchResult find_max_rate(const RateTrial& trial, double lo, double hi, int steps);
// The search over run_server: `base` gives everything but the rate, and every trial uses its seed.
RateSearchResult find_max_server_rate(ScenarioClock& clock, const RunBatch& run_batch, ServerOptions base, double lo,
                                      double hi, int steps);

}  // namespace cnnscale::infer
