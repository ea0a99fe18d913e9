// The inference scenarios (infer/scenario.hpp) on a fake clock: a batch of n takes a fixed service time
// model, so every batch the scenarios form, every latency and every rate is worked out by hand and
// checked exactly. Poisson schedules are checked against the exponential's moments, the rate search
// against a threshold known in closed form, and bad options against their ConfigError.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "infer/scenario.hpp"

namespace cnnscale::infer {
namespace {

// Times are whole ticks of 2^-13 s (about 0.12 ms): every sum and difference of them is exact in
// binary floating point, so the tests compare with EXPECT_EQ, not a tolerance.
constexpr double kTick = 1.0 / 8192;
double ticks(double n) { return n * kTick; }

// The service-time model: 16 ticks (about 2 ms) per batch plus one tick (about 0.12 ms) per sample.
double service(int64_t n) { return ticks(16 + static_cast<double>(n)); }

// Time moves only when a batch runs or the scenario sleeps; the sleeps are recorded.
class FakeClock final : public ScenarioClock {
 public:
  explicit FakeClock(double start = 0) : now_(start) {}
  double now() override { return now_; }
  void sleep_until(double t) override {
    sleeps_.push_back(t);
    now_ = std::max(now_, t);
  }
  void advance(double seconds) { now_ += seconds; }
  const std::vector<double>& sleeps() const { return sleeps_; }

 private:
  double now_;
  std::vector<double> sleeps_;
};

// The device: a batch of n takes service(n) of the fake clock's time. Records each batch's size and
// start.
class FakeDevice {
 public:
  explicit FakeDevice(FakeClock& clock) : clock_(clock) {}
  RunBatch run() {
    return [this](int64_t n) {
      starts_.push_back(clock_.now());
      sizes_.push_back(n);
      clock_.advance(service(n));
    };
  }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<double>& starts() const { return starts_; }

 private:
  FakeClock& clock_;
  std::vector<int64_t> sizes_;
  std::vector<double> starts_;
};

std::vector<double> in_ticks(const std::vector<double>& t) {
  std::vector<double> seconds;
  for (double x : t) seconds.push_back(ticks(x));
  return seconds;
}

std::vector<double> shifted(std::vector<double> t, double by) {
  for (double& x : t) x += by;
  return t;
}

// `f` throws a ConfigError whose message contains `text` (the option's name).
void expect_config_error(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError; expected one mentioning " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(InferScenario, OfflineRunsBackToBackUntilBothMinimumsAreMet) {
  // Batch 32 takes 48 ticks. 0.1 s is 819.2 ticks: 17 batches (816 ticks) fall short, 18 (864) do not,
  // and 18 is above the 5 batches asked for.
  FakeClock clock(3.0);  // a non-zero origin: the scenario measures from its own start
  FakeDevice device(clock);
  const OfflineResult r = run_offline(clock, device.run(), {.batch = 32, .min_seconds = 0.1, .min_batches = 5});
  EXPECT_EQ(r.batches, 18);
  EXPECT_EQ(r.samples, 18 * 32);
  EXPECT_EQ(r.seconds, ticks(864));
  EXPECT_DOUBLE_EQ(r.samples_per_s, 576 / ticks(864));  // 5461.33 samples/s
  EXPECT_EQ(device.sizes(), std::vector<int64_t>(18, 32));
  EXPECT_EQ(r.batch_latency.count, 18);
  EXPECT_EQ(r.batch_latency.mean, ticks(48));
  EXPECT_EQ(r.batch_latency.p50, ticks(48));
  EXPECT_EQ(r.batch_latency.p99, ticks(48));
  EXPECT_EQ(r.batch_latency.max, ticks(48));
  EXPECT_TRUE(clock.sleeps().empty());  // nothing to wait for offline

  // Now the batch count is the longer minimum: 30 batches of 48 ticks, well past 0.1 s.
  FakeClock clock2;
  FakeDevice device2(clock2);
  const OfflineResult r2 = run_offline(clock2, device2.run(), {.batch = 32, .min_seconds = 0.1, .min_batches = 30});
  EXPECT_EQ(r2.batches, 30);
  EXPECT_EQ(r2.seconds, ticks(30 * 48));
  EXPECT_DOUBLE_EQ(r2.samples_per_s, 30 * 32 / ticks(30 * 48));

  // No time minimum: exactly the batches asked for.
  FakeClock clock3;
  FakeDevice device3(clock3);
  EXPECT_EQ(run_offline(clock3, device3.run(), {.batch = 1, .min_seconds = 0, .min_batches = 3}).batches, 3);
}

TEST(InferScenario, SingleStreamIssuesOneSampleAfterAnother) {
  // One sample takes 17 ticks; 1 s is 8192 ticks: 481 queries (8177 ticks) fall short, 482 (8194) do not.
  FakeClock clock(1.5);
  FakeDevice device(clock);
  const SingleStreamResult r = run_single_stream(clock, device.run(), {.min_seconds = 1.0, .min_queries = 100});
  EXPECT_EQ(r.queries, 482);
  EXPECT_EQ(r.seconds, ticks(482 * 17));
  EXPECT_EQ(device.sizes(), std::vector<int64_t>(482, 1));
  // Each query starts the moment the previous one ends.
  for (size_t i = 0; i < device.starts().size(); ++i) EXPECT_EQ(device.starts()[i], 1.5 + ticks(17.0 * i));
  EXPECT_EQ(r.latency.count, 482);
  EXPECT_EQ(r.latency.mean, service(1));
  EXPECT_EQ(r.latency.p90, service(1));
  EXPECT_EQ(r.latency.max, service(1));

  // The query count as the longer minimum: 0.01 s would be 5 queries.
  FakeClock clock2;
  FakeDevice device2(clock2);
  EXPECT_EQ(run_single_stream(clock2, device2.run(), {.min_seconds = 0.01, .min_queries = 100}).queries, 100);
}

TEST(InferScenario, SingleStreamPercentilesAreOfEachQuerysOwnTime) {
  // Every tenth query takes 170 ticks instead of 17: of 100, the 90 fast ones fill ranks 1..90, so p50
  // and p90 are 17 ticks, p99 (rank 99) and the max 170; the mean is (90 * 17 + 10 * 170) / 100 = 32.3.
  FakeClock clock;
  int64_t issued = 0;
  const RunBatch uneven = [&](int64_t n) {
    ASSERT_EQ(n, 1);
    clock.advance(ticks(++issued % 10 == 0 ? 170 : 17));
  };
  const SingleStreamResult r = run_single_stream(clock, uneven, {.min_seconds = 0, .min_queries = 100});
  EXPECT_EQ(r.queries, 100);
  EXPECT_EQ(r.seconds, ticks(90 * 17 + 10 * 170));
  EXPECT_EQ(r.latency.p50, ticks(17));
  EXPECT_EQ(r.latency.p90, ticks(17));
  EXPECT_EQ(r.latency.p99, ticks(170));
  EXPECT_EQ(r.latency.max, ticks(170));
  EXPECT_DOUBLE_EQ(r.latency.mean, ticks(32.3));
}

TEST(InferScenario, ServerBatchesWhatWaitsWhileTheDeviceIsBusy) {
  // A batch of n takes 16 + n ticks; at most 4 per batch. The schedule, in ticks, and what the batcher
  // does with it (t: when the device is free; "done": t + service):
  //   t=0    q0 (0) has arrived, q1 (5) not yet:             [q0]          done 17  latency 17
  //   t=17   q1 (5), q2 (10), q3 (15) piled up meanwhile:    [q1 q2 q3]    done 36  31 26 21
  //   t=36   q4..q8 (20 22 24 26 30) wait: max_batch takes 4 [q4 q5 q6 q7] done 56  36 34 32 30
  //   t=56   q8 (30) still waits, q9 (50) joins it:          [q8 q9]       done 74  44 24
  //   t=74   nothing waits: sleep until q10 (100):           [q10]         done 117 17
  //   t=117  q11 arrives at 117, exactly as the device frees: [q11]        done 134 17
  //   t=134  sleep until q12 and q13, simultaneous at 200:   [q12 q13]     done 218 18 18
  const std::vector<double> arrivals = in_ticks({0, 5, 10, 15, 20, 22, 24, 26, 30, 50, 100, 117, 200, 200});
  const std::vector<double> latencies = in_ticks({17, 31, 26, 21, 36, 34, 32, 30, 44, 24, 17, 17, 18, 18});
  const double start = 5.0;
  FakeClock clock(start);
  FakeDevice device(clock);
  const ServerResult r = run_server_arrivals(clock, device.run(), arrivals, 4, ticks(32));
  EXPECT_EQ(device.sizes(), (std::vector<int64_t>{1, 3, 4, 2, 1, 1, 2}));
  EXPECT_EQ(device.starts(), shifted(in_ticks({0, 17, 36, 56, 100, 117, 200}), start));
  EXPECT_EQ(clock.sleeps(), shifted(in_ticks({100, 200}), start));  // only while nothing waits
  EXPECT_EQ(r.latencies, latencies);
  EXPECT_EQ(r.queries, 14);
  EXPECT_EQ(r.batches, 7);
  EXPECT_EQ(r.mean_batch, 2.0);
  // Sorted: 17 17 17 18 18 21 24 26 30 31 32 34 36 44. Nearest rank of 14: p50 the 7th, p90 the 13th
  // (ceil 12.6), p99 the 14th (ceil 13.86).
  EXPECT_EQ(r.latency.count, 14);
  EXPECT_EQ(r.latency.p50, ticks(24));
  EXPECT_EQ(r.latency.p90, ticks(36));
  EXPECT_EQ(r.latency.p99, ticks(44));
  EXPECT_EQ(r.latency.max, ticks(44));
  EXPECT_DOUBLE_EQ(r.latency.mean, ticks(365.0 / 14));
  // 14 queries from the first arrival (0) to the last completion (218); 13 gaps over 200 ticks offered.
  EXPECT_DOUBLE_EQ(r.achieved_rate, 14 / ticks(218));
  EXPECT_DOUBLE_EQ(r.offered_rate, 13 / ticks(200));
  // Within 32 ticks: the eleven up to 32 in the sorted list; the p99 (44) is over the bound.
  EXPECT_EQ(r.latency_bound, ticks(32));
  EXPECT_DOUBLE_EQ(r.within_bound, 11.0 / 14);
  EXPECT_FALSE(r.meets_bound);

  // The bound is inclusive: at 44 ticks every query is within it; just under, all but q8.
  FakeClock clock2(start);
  FakeDevice device2(clock2);
  const ServerResult at_max = run_server_arrivals(clock2, device2.run(), arrivals, 4, ticks(44));
  EXPECT_EQ(at_max.latencies, latencies);
  EXPECT_EQ(at_max.within_bound, 1.0);
  EXPECT_TRUE(at_max.meets_bound);
  FakeClock clock3(start);
  FakeDevice device3(clock3);
  const ServerResult under = run_server_arrivals(clock3, device3.run(), arrivals, 4, ticks(43.5));
  EXPECT_DOUBLE_EQ(under.within_bound, 13.0 / 14);
  EXPECT_FALSE(under.meets_bound);
}

TEST(InferScenario, ServerWithBatchOneIsAQueue) {
  // Three simultaneous queries and max_batch 1: served one after another, each waiting for those
  // before it; then one that arrives after the queue has drained waits for nothing.
  FakeClock clock;
  FakeDevice device(clock);
  const ServerResult r = run_server_arrivals(clock, device.run(), in_ticks({0, 0, 0, 60}), 1, ticks(100));
  EXPECT_EQ(device.sizes(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(r.latencies, in_ticks({17, 34, 51, 17}));
  EXPECT_EQ(clock.sleeps(), in_ticks({60}));
  EXPECT_EQ(r.achieved_rate, 4 / ticks(77));
  // A schedule of one query has no rate of its own.
  FakeClock clock2;
  FakeDevice device2(clock2);
  const ServerResult one = run_server_arrivals(clock2, device2.run(), {0.5}, 8, 1.0);
  EXPECT_TRUE(std::isnan(one.offered_rate));
  EXPECT_EQ(one.latencies, std::vector<double>{service(1)});
  EXPECT_EQ(one.achieved_rate, 1 / service(1));
  EXPECT_EQ(clock2.sleeps(), std::vector<double>{0.5});
}

TEST(InferScenario, PoissonGapsHaveTheExponentialsMoments) {
  // 10^6 expected arrivals. Each moment is checked to 5 standard errors of its estimate: the count is
  // Poisson (sd = sqrt(mean) = 1000); a gap is exponential with mean and sd 1/rate, so the mean gap's
  // standard error is (1/rate) / sqrt(n); the sample variance of exponential gaps has variance
  // (mu4 - sigma^4) / n = (9 - 1) / n in units of 1/rate^4; the share of gaps above the mean is
  // binomial with p = e^-1.
  const double rate = 1000, seconds = 1000;
  const std::vector<double> a = poisson_arrivals(rate, seconds, 42);
  const auto n = static_cast<double>(a.size());
  EXPECT_NEAR(n, rate * seconds, 5 * std::sqrt(rate * seconds));
  ASSERT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), seconds);

  std::vector<double> gaps;
  double previous = 0;
  for (double t : a) {
    gaps.push_back(t - previous);
    previous = t;
  }
  double sum = 0, above_mean = 0;
  for (double g : gaps) {
    sum += g;
    above_mean += g > 1 / rate ? 1 : 0;
  }
  const double mean = sum / n;
  double squares = 0;
  for (double g : gaps) squares += (g - mean) * (g - mean);
  const double variance = squares / (n - 1);
  EXPECT_NEAR(mean * rate, 1.0, 5 / std::sqrt(n));
  EXPECT_NEAR(variance * rate * rate, 1.0, 5 * std::sqrt(8 / n));
  const double p = std::exp(-1.0);
  EXPECT_NEAR(above_mean / n, p, 5 * std::sqrt(p * (1 - p) / n));
}

TEST(InferScenario, PoissonScheduleIsNamedByItsSeed) {
  const std::vector<double> a = poisson_arrivals(200, 10, 7);
  EXPECT_EQ(poisson_arrivals(200, 10, 7), a);
  EXPECT_NE(poisson_arrivals(200, 10, 8), a);
  // Twice the rate: the same queries at exactly half the times, then more of them.
  const std::vector<double> twice = poisson_arrivals(400, 10, 7);
  ASSERT_GT(twice.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(twice[i], a[i] / 2) << i;
}

TEST(InferScenario, ServerAtALowRateServesEachQueryAlone) {
  // 0.05 queries/s for 2000 s: about 100 queries, seconds apart, each served alone on an idle device.
  const ServerOptions options{.rate = 0.05, .max_batch = 8, .latency_bound = 0.01, .seconds = 2000, .seed = 3};
  const std::vector<double> a = poisson_arrivals(options.rate, options.seconds, options.seed);
  // Precondition of this seed's schedule (a short gap is possible, just rare): no two queries within
  // one service time of each other.
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GT(a[i] - a[i - 1], service(8)) << i;
  FakeClock clock;
  FakeDevice device(clock);
  const ServerResult r = run_server(clock, device.run(), options);
  EXPECT_EQ(r.queries, static_cast<int64_t>(a.size()));
  EXPECT_EQ(r.batches, r.queries);
  EXPECT_EQ(device.sizes(), std::vector<int64_t>(a.size(), 1));
  EXPECT_EQ(clock.sleeps(), a);  // the device sleeps to every arrival
  // Each latency is one sample's service time, to the rounding of times near 2000 s (~2e-13 s).
  for (double l : r.latencies) EXPECT_NEAR(l, service(1), 1e-9);
  EXPECT_NEAR(r.latency.p99, service(1), 1e-9);
  EXPECT_EQ(r.offered_rate, 0.05);
  EXPECT_EQ(r.within_bound, 1.0);
  EXPECT_TRUE(r.meets_bound);
}

TEST(InferScenario, ServerOverloadedFailsTheBoundAtTheDevicesCapacity) {
  // Full batches of 8 take 24 ticks: the device serves at most 8 / 24 ticks = 2730.7 queries/s. Offered
  // 5000/s for 1 s, the queue grows from the start, batches fill, and the ~5000 queries finish about
  // 5000 / 2730.7 = 1.83 s after the first arrival: achieved is the capacity, latencies reach ~0.8 s.
  const double capacity = 8 / service(8);
  FakeClock clock;
  FakeDevice device(clock);
  const ServerResult r =
      run_server(clock, device.run(), {.rate = 5000, .max_batch = 8, .latency_bound = 0.01, .seconds = 1, .seed = 5});
  EXPECT_FALSE(r.meets_bound);
  EXPECT_GT(r.latency.p99, 0.5);
  EXPECT_LT(r.within_bound, 0.05);
  EXPECT_EQ(r.offered_rate, 5000);
  EXPECT_LE(r.achieved_rate, capacity);
  EXPECT_NEAR(r.achieved_rate, capacity, 0.01 * capacity);
  EXPECT_GT(r.mean_batch, 7.9);
  EXPECT_EQ(*std::max_element(device.sizes().begin(), device.sizes().end()), 8);
  int64_t served = 0;
  for (int64_t n : device.sizes()) served += n;
  EXPECT_EQ(served, r.queries);
}

TEST(InferScenario, RateSearchBisectsTheBracket) {
  // A trial that meets the bound up to 123.456 queries/s: 20 halvings of [10, 1000] must bracket it.
  int trials = 0;
  const RateTrial trial = [&](double rate) {
    ++trials;
    ServerResult r;
    r.offered_rate = rate;
    r.meets_bound = rate <= 123.456;
    r.latencies = {rate};  // to see which run `best` is, and that trials drop it
    return r;
  };
  const RateSearchResult s = find_max_rate(trial, 10, 1000, 20);
  EXPECT_EQ(trials, 21);
  ASSERT_EQ(s.trials.size(), 21u);
  EXPECT_EQ(s.trials.front().offered_rate, 10);
  EXPECT_EQ(s.trials[1].offered_rate, 505);
  EXPECT_NEAR(s.resolution, 990 / std::pow(2.0, 20), 1e-12);
  EXPECT_LE(s.best_rate, 123.456);
  EXPECT_GT(s.best_rate + s.resolution, 123.456);
  EXPECT_EQ(s.best.offered_rate, s.best_rate);
  EXPECT_EQ(s.best.latencies, std::vector<double>{s.best_rate});
  for (const ServerResult& t : s.trials) EXPECT_TRUE(t.latencies.empty());

  // A lo that fails is refused after its one trial.
  trials = 0;
  expect_config_error([&] { find_max_rate(trial, 200, 1000, 5); }, "--rate-lo 200");
  EXPECT_EQ(trials, 1);
}

TEST(InferScenario, RateSearchFindsTheThresholdOfAQueueInClosedForm) {
  // Periodic arrivals every g = 1 / rate, one query per batch, 200 queries, and a bound of one
  // service time s = service(1) (17 ticks) plus a relative 1e-9 for rounding. With g >= s every query
  // finds the device idle: latency s, the bound is met. With g < s the device never idles after the
  // first query; query i ends at (i + 1) s and waits s + i (s - g); the p99, rank ceil(0.99 * 200) =
  // 198 (i = 197), exceeds the bound unless s - g < 1e-9 s / 197. So the threshold is 1 / s =
  // 481.88 queries/s, to a relative 1e-11, far inside the search's resolution.
  const double s = service(1), threshold = 1 / s;
  FakeClock clock;
  FakeDevice device(clock);
  const RateTrial periodic = [&](double rate) {
    std::vector<double> arrivals;
    for (int i = 0; i < 200; ++i) arrivals.push_back(i / rate);
    return run_server_arrivals(clock, device.run(), arrivals, 1, s * (1 + 1e-9));
  };
  const RateSearchResult r = find_max_rate(periodic, 100, 1000, 30);
  EXPECT_NEAR(r.resolution, 900 / std::pow(2.0, 30), 1e-12);
  EXPECT_LE(r.best_rate, threshold * (1 + 1e-11));
  EXPECT_GT(r.best_rate + r.resolution, threshold);
  EXPECT_TRUE(r.best.meets_bound);
  EXPECT_NEAR(r.best.latency.max, s, 1e-11);
}

TEST(InferScenario, ServerRateSearchBracketsTheBoundOnPoissonArrivals) {
  // The server over Poisson arrivals with a 5 ms bound. No closed form here, so the bracket itself is
  // checked: the best rate met the bound, best + resolution is a trial that failed it (or the
  // overloaded hi), and the best lies below the device's capacity, 8 / service(8).
  const ServerOptions base{.rate = 0, .max_batch = 8, .latency_bound = 0.005, .seconds = 2, .seed = 11};
  FakeClock clock;
  FakeDevice device(clock);
  const RateSearchResult r = find_max_server_rate(clock, device.run(), base, 10, 5000, 12);
  ASSERT_EQ(r.trials.size(), 13u);
  EXPECT_EQ(r.trials.front().offered_rate, 10);
  EXPECT_TRUE(r.best.meets_bound);
  EXPECT_EQ(r.best.offered_rate, r.best_rate);
  EXPECT_EQ(r.best.queries, static_cast<int64_t>(r.best.latencies.size()));
  EXPECT_LT(r.best_rate, 8 / service(8));
  const double above = r.best_rate + r.resolution;
  const bool above_is_hi = std::abs(above - 5000) < 1e-9;
  bool above_failed = false;
  for (const ServerResult& t : r.trials) {
    EXPECT_TRUE(t.latencies.empty());
    if (std::abs(t.offered_rate - above) < 1e-9) above_failed = !t.meets_bound;
  }
  EXPECT_TRUE(above_failed || above_is_hi);
  // The trials are reproducible: the best rate again, on a fresh clock, gives the same run.
  FakeClock clock2(100);
  FakeDevice device2(clock2);
  ServerOptions again = base;
  again.rate = r.best_rate;
  const ServerResult rerun = run_server(clock2, device2.run(), again);
  EXPECT_EQ(rerun.queries, r.best.queries);
  EXPECT_EQ(rerun.batches, r.best.batches);
  EXPECT_NEAR(rerun.latency.p99, r.best.latency.p99, 1e-12);
}

TEST(InferScenario, BadOptionsAreRefusedBeforeAnyBatchRuns) {
  FakeClock clock;
  FakeDevice device(clock);
  const RunBatch run = device.run();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  expect_config_error([&] { run_offline(clock, run, {.batch = 0, .min_seconds = 1, .min_batches = 1}); },
                      "--batch must be >= 1, got 0");
  expect_config_error([&] { run_offline(clock, run, {.batch = 8, .min_seconds = -1, .min_batches = 1}); },
                      "--min-seconds must be >= 0, got -1");
  expect_config_error([&] { run_offline(clock, run, {.batch = 8, .min_seconds = nan, .min_batches = 1}); },
                      "--min-seconds");
  expect_config_error([&] { run_offline(clock, run, {.batch = 8, .min_seconds = 1, .min_batches = 0}); },
                      "--min-batches must be >= 1, got 0");
  expect_config_error([&] { run_single_stream(clock, run, {.min_seconds = -1, .min_queries = 1}); },
                      "--min-seconds must be >= 0, got -1");
  expect_config_error([&] { run_single_stream(clock, run, {.min_seconds = 1, .min_queries = 0}); },
                      "--min-queries must be >= 1, got 0");

  const ServerOptions good{.rate = 100, .max_batch = 8, .latency_bound = 0.01, .seconds = 1, .seed = 1};
  const auto server_with = [&](const std::function<void(ServerOptions&)>& change) {
    ServerOptions o = good;
    change(o);
    run_server(clock, run, o);
  };
  expect_config_error([&] { server_with([](ServerOptions& o) { o.rate = -1; }); },
                      "--rate must be > 0 queries per second, got -1");
  expect_config_error([&] { server_with([&](ServerOptions& o) { o.rate = nan; }); }, "--rate");
  expect_config_error([&] { server_with([](ServerOptions& o) { o.seconds = 0; }); }, "--seconds must be > 0, got 0");
  expect_config_error([&] { server_with([](ServerOptions& o) { o.max_batch = 0; }); },
                      "--max-batch must be >= 1, got 0");
  expect_config_error([&] { server_with([](ServerOptions& o) { o.latency_bound = 0; }); },
                      "--latency-bound must be > 0 seconds, got 0");
  expect_config_error([&] { server_with([](ServerOptions& o) { o.rate = 1e9; }); },
                      "--rate 1000000000 over --seconds 1");
  expect_config_error([&] { server_with([](ServerOptions& o) { o.rate = 1e-9; }); }, "drew no queries");
  expect_config_error([&] { poisson_arrivals(0, 1, 1); }, "--rate");

  expect_config_error([&] { run_server_arrivals(clock, run, {}, 8, 0.01); }, "no queries");
  expect_config_error([&] { run_server_arrivals(clock, run, {0, 0.2, 0.1}, 8, 0.01); },
                      "arrival 2 (0.1 s) comes before arrival 1 (0.2 s)");
  expect_config_error([&] { run_server_arrivals(clock, run, {-0.5, 0.1}, 8, 0.01); }, "arrival 0 is at -0.5 s");
  expect_config_error([&] { run_server_arrivals(clock, run, {0, nan}, 8, 0.01); }, "arrival 1");
  expect_config_error([&] { run_server_arrivals(clock, run, {0, 0.1}, 0, 0.01); }, "--max-batch");

  expect_config_error([&] { find_max_server_rate(clock, run, good, 0, 100, 5); }, "--rate-lo must be > 0");
  expect_config_error([&] { find_max_server_rate(clock, run, good, 100, 100, 5); },
                      "--rate-hi must be above --rate-lo (100), got 100");
  expect_config_error([&] { find_max_server_rate(clock, run, good, 10, 100, 0); }, "--rate-steps must be >= 1, got 0");
  ServerOptions no_bound = good;
  no_bound.latency_bound = -1;
  expect_config_error([&] { find_max_server_rate(clock, run, no_bound, 10, 100, 5); }, "--latency-bound");
  expect_config_error([&] { find_max_server_rate(clock, run, good, 10, 1e9, 5); },
                      "--rate-hi 1000000000 over --seconds 1");

  EXPECT_TRUE(device.sizes().empty());
  EXPECT_EQ(clock.now(), 0);
}

TEST(InferScenario, SteadyClockNeverWakesEarly) {
  SteadyClock clock;
  const double before = clock.now();
  EXPECT_GE(before, 0);
  const double target = before + 0.02;
  clock.sleep_until(target);
  EXPECT_GE(clock.now(), target);
  clock.sleep_until(before);  // a time already past: returns at once, and the clock does not go back
  EXPECT_GE(clock.now(), target);
}

}  // namespace
}  // namespace cnnscale::infer
