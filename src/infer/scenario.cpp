// The inference scenarios: option checks, the three MLPerf-style loops over the clock, the Poisson
// schedule and the bisection over offered rates.
#include "infer/scenario.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <utility>

#include "core/error.hpp"

namespace cnnscale::infer {
namespace {

// Far beyond an MLPerf-length run of a fast GPU (30k queries/s for 600 s is 1.8e7), yet a typo in
// --rate or --seconds is refused at once instead of failing an allocation of gigabytes.
constexpr double kMaxScheduledQueries = 1e8;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Written as !(x > 0) and the like so that NaN fails them too.
void check_positive(const char* option, double value, const char* unit) {
  if (!(value > 0) || !std::isfinite(value)) throw_config("{} must be > 0{}, got {}", option, unit, value);
}

void check_min_seconds(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) throw_config("--min-seconds must be >= 0, got {}", seconds);
}

void check_server_batching(int64_t max_batch, double latency_bound) {
  if (max_batch < 1) throw_config("--max-batch must be >= 1, got {}", max_batch);
  check_positive("--latency-bound", latency_bound, " seconds");
}

// `rate_option` names where the rate came from: --rate, or --rate-hi in a search.
void check_schedule_size(const char* rate_option, double rate, double seconds) {
  if (rate * seconds > kMaxScheduledQueries)
    throw_config("{} {} over --seconds {} schedules about {:.3g} queries; at most {:.0e} are allowed", rate_option,
                 rate, seconds, rate * seconds, kMaxScheduledQueries);
}

void check_server_schedule(double rate, double seconds) {
  check_positive("--rate", rate, " queries per second");
  check_positive("--seconds", seconds, "");
  check_schedule_size("--rate", rate, seconds);
}

void check_server_options(const ServerOptions& o) {
  check_server_schedule(o.rate, o.seconds);
  check_server_batching(o.max_batch, o.latency_bound);
}

void check_arrivals(const std::vector<double>& arrivals) {
  if (arrivals.empty()) throw_config("server arrivals: the schedule has no queries");
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (!(arrivals[i] >= 0) || !std::isfinite(arrivals[i]))
      throw_config("server arrivals: arrival {} is at {} s; times must be finite and >= 0", i, arrivals[i]);
    if (i > 0 && arrivals[i] < arrivals[i - 1])
      throw_config("server arrivals: arrival {} ({} s) comes before arrival {} ({} s); the schedule must be ascending",
                   i, arrivals[i], i - 1, arrivals[i - 1]);
  }
}

void check_rate_bracket(double lo, double hi, int steps) {
  check_positive("--rate-lo", lo, " queries per second");
  if (!(hi > lo) || !std::isfinite(hi)) throw_config("--rate-hi must be above --rate-lo ({}), got {}", lo, hi);
  if (steps < 1) throw_config("--rate-steps must be >= 1, got {}", steps);
}

}  // namespace

void validate(const ServerOptions& options) { check_server_options(options); }

SteadyClock::SteadyClock() : origin_ns_(steady_ns()) {}

double SteadyClock::now() {
  return static_cast<double>(steady_ns() - origin_ns_) * 1e-9;
}

void SteadyClock::sleep_until(double t) {
  // The double's conversion to the clock's ticks may round the sleep short: sleep again for the rest.
  for (double left = t - now(); left > 0; left = t - now())
    std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

OfflineResult run_offline(ScenarioClock& clock, const RunBatch& run_batch, const OfflineOptions& options) {
  if (options.batch < 1) throw_config("--batch must be >= 1, got {}", options.batch);
  check_min_seconds(options.min_seconds);
  if (options.min_batches < 1) throw_config("--min-batches must be >= 1, got {}", options.min_batches);

  OfflineResult r;
  std::vector<double> durations;
  const double start = clock.now();
  // One reading between two batches ends the one and starts the next: the batch times add up to the
  // whole run, with nothing lost between them.
  double t = start;
  while (r.batches < options.min_batches || t - start < options.min_seconds) {
    run_batch(options.batch);
    const double done = clock.now();
    durations.push_back(done - t);
    t = done;
    ++r.batches;
  }
  r.samples = r.batches * options.batch;
  r.seconds = t - start;
  r.samples_per_s = static_cast<double>(r.samples) / r.seconds;
  r.batch_latency = latency_stats(std::move(durations));
  return r;
}

SingleStreamResult run_single_stream(ScenarioClock& clock, const RunBatch& run_batch,
                                     const SingleStreamOptions& options) {
  check_min_seconds(options.min_seconds);
  if (options.min_queries < 1) throw_config("--min-queries must be >= 1, got {}", options.min_queries);

  SingleStreamResult r;
  std::vector<double> latencies;
  const double start = clock.now();
  double t = start;  // as in run_offline: the next query is issued at the previous one's completion
  while (r.queries < options.min_queries || t - start < options.min_seconds) {
    run_batch(1);
    const double done = clock.now();
    latencies.push_back(done - t);
    t = done;
    ++r.queries;
  }
  r.seconds = t - start;
  r.latency = latency_stats(std::move(latencies));
  return r;
}

ServerResult run_server_arrivals(ScenarioClock& clock, const RunBatch& run_batch, const std::vector<double>& arrivals,
                                 int64_t max_batch, double latency_bound) {
  check_server_batching(max_batch, latency_bound);
  check_arrivals(arrivals);

  ServerResult r;
  r.queries = static_cast<int64_t>(arrivals.size());
  r.latency_bound = latency_bound;
  r.latencies.resize(arrivals.size());
  const double start = clock.now();
  // Both the wait and the batch's membership test ask this, in the same floating-point form: a query
  // is either waited for or taken, never neither.
  const auto not_yet_arrived = [start](double t, double arrival) { return t < start + arrival; };
  double last_done = start;
  size_t next = 0;  // the oldest query not yet in a batch
  while (next < arrivals.size()) {
    const double t = clock.now();
    if (not_yet_arrived(t, arrivals[next])) {
      clock.sleep_until(start + arrivals[next]);
      continue;  // read the clock again rather than trust that the sleep ended exactly on time
    }
    const auto waiting_end =
        std::upper_bound(arrivals.begin() + static_cast<std::ptrdiff_t>(next), arrivals.end(), t, not_yet_arrived);
    const size_t n =
        std::min(static_cast<size_t>(waiting_end - arrivals.begin()) - next, static_cast<size_t>(max_batch));
    run_batch(static_cast<int64_t>(n));
    last_done = clock.now();
    for (size_t i = next; i < next + n; ++i) r.latencies[i] = last_done - (start + arrivals[i]);
    next += n;
    ++r.batches;
  }

  const double span = arrivals.back() - arrivals.front();
  r.offered_rate = span > 0 ? static_cast<double>(r.queries - 1) / span : std::numeric_limits<double>::quiet_NaN();
  r.achieved_rate = static_cast<double>(r.queries) / (last_done - (start + arrivals.front()));
  r.mean_batch = static_cast<double>(r.queries) / static_cast<double>(r.batches);
  r.within_bound = static_cast<double>(std::count_if(r.latencies.begin(), r.latencies.end(),
                                                     [&](double l) { return l <= latency_bound; })) /
                   static_cast<double>(r.queries);
  r.latency = latency_stats(r.latencies);
  r.meets_bound = r.latency.p99 <= latency_bound;
  return r;
}

std::vector<double> poisson_arrivals(double rate, double seconds, uint64_t seed) {
  check_server_schedule(rate, seconds);
  // std::mt19937_64's output sequence is fixed by the C++ standard, while the standard's distributions
  // (std::exponential_distribution included) are each library's own: so the generator is the standard
  // one, the same that seeds initialisation and shuffling, and the exponential is drawn here by
  // inversion. A seed then names the same schedule with any compiler and standard library.
  std::mt19937_64 gen(seed);
  std::vector<double> arrivals;
  arrivals.reserve(static_cast<size_t>(rate * seconds * 1.01 + 16));
  double unit_time = 0;  // the arrival time of a rate-1 process; divided by the rate below
  for (;;) {
    const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;  // uniform in [0, 1), 53 bits
    unit_time += -std::log1p(-u);                                   // exponential gap of mean 1
    const double t = unit_time / rate;
    if (t >= seconds) break;
    arrivals.push_back(t);
  }
  return arrivals;
}

ServerResult run_server(ScenarioClock& clock, const RunBatch& run_batch, const ServerOptions& options) {
  check_server_options(options);
  const std::vector<double> arrivals = poisson_arrivals(options.rate, options.seconds, options.seed);
  if (arrivals.empty())
    throw_config("--rate {} over --seconds {} drew no queries (about {:.3g} expected): raise either", options.rate,
                 options.seconds, options.rate * options.seconds);
  ServerResult r = run_server_arrivals(clock, run_batch, arrivals, options.max_batch, options.latency_bound);
  r.offered_rate = options.rate;
  return r;
}

RateSearchResult find_max_rate(const RateTrial& trial, double lo, double hi, int steps) {
  check_rate_bracket(lo, hi, steps);
  RateSearchResult search;
  // Keeps a trial's summary; its per-query latencies stay with the run that may become `best`.
  const auto record = [&search](ServerResult& run) {
    std::vector<double> latencies = std::move(run.latencies);
    run.latencies.clear();
    search.trials.push_back(run);
    run.latencies = std::move(latencies);
  };

  ServerResult at_lo = trial(lo);
  record(at_lo);
  if (!at_lo.meets_bound)
    throw_config("--rate-lo {} queries/s does not meet the latency bound (p99 {} s > {} s): lower it", lo,
                 at_lo.latency.p99, at_lo.latency_bound);
  search.best = std::move(at_lo);
  // Invariant: lo met the bound; hi failed it or was never tried.
  for (int i = 0; i < steps; ++i) {
    const double mid = lo + (hi - lo) / 2;
    ServerResult run = trial(mid);
    record(run);
    if (run.meets_bound) {
      lo = mid;
      search.best = std::move(run);
    } else {
      hi = mid;
    }
  }
  search.best_rate = lo;
  search.resolution = hi - lo;
  return search;
}

RateSearchResult find_max_server_rate(ScenarioClock& clock, const RunBatch& run_batch, ServerOptions base, double lo,
                                      double hi, int steps) {
  // Every check before the first trial: the bracket, then the options at both of its ends.
  check_rate_bracket(lo, hi, steps);
  base.rate = lo;
  check_server_options(base);
  check_schedule_size("--rate-hi", hi, base.seconds);
  return find_max_rate(
      [&](double rate) {
        base.rate = rate;
        return run_server(clock, run_batch, base);
      },
      lo, hi, steps);
}

}  // namespace cnnscale::infer
