// Split policies: the probe's model fit, the exact choice of whole-sample shares under each
// objective, and the online refinement of `auto`, `energy` and `edp`.
#include "parallel/split_policy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

#include "core/error.hpp"

namespace cnnscale {

std::optional<SplitPolicy> split_policy_named(const std::string& text) {
  for (SplitPolicy p : {SplitPolicy::Even, SplitPolicy::Manual, SplitPolicy::Proportional, SplitPolicy::Auto,
                        SplitPolicy::Energy, SplitPolicy::Edp})
    if (text == to_string(p)) return p;
  return std::nullopt;
}

SplitPolicy parse_split_policy(const std::string& text) {
  if (const std::optional<SplitPolicy> p = split_policy_named(text)) return *p;
  throw_config("--split: expected even, manual, proportional, auto, energy or edp, got '{}'", text);
}

std::string to_string(SplitPolicy policy) {
  switch (policy) {
    case SplitPolicy::Even:
      return "even";
    case SplitPolicy::Manual:
      return "manual";
    case SplitPolicy::Proportional:
      return "proportional";
    case SplitPolicy::Auto:
      return "auto";
    case SplitPolicy::Energy:
      return "energy";
    case SplitPolicy::Edp:
      return "edp";
  }
  return "?";
}

bool split_needs_probe(SplitPolicy p) {
  return p == SplitPolicy::Proportional || p == SplitPolicy::Energy || p == SplitPolicy::Edp;
}
bool split_needs_energy(SplitPolicy p) { return p == SplitPolicy::Energy || p == SplitPolicy::Edp; }
bool split_refines_online(SplitPolicy p) {
  return p == SplitPolicy::Auto || split_needs_energy(p);
}

void check_rebalance_every(int64_t steps) {
  if (steps < 0) throw_config("--rebalance-every must be >= 0 (0: keep the start-up shares), got {}", steps);
}

void check_probe_seconds(double seconds) {
  if (!(seconds > 0)) throw_config("--probe-seconds must be > 0, got {}", seconds);
}

void check_slowdown(int rank, double factor) {
  if (!(factor >= 1.0) || !std::isfinite(factor))
    throw_config("--slowdown: rank {} has factor {}; factors are >= 1 (1: full speed)", rank, factor);
}

namespace {

struct Line {
  double intercept = 0, slope = 0;
};

// Least squares y = a + b x; through the origin when x has one value or the fit is not physical
// (negative slope or intercept: a larger share never costs less, and nothing costs less than nothing).
Line fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx > 0) {
    const Line l{my - sxy / sxx * mx, sxy / sxx};
    if (l.slope > 0 && l.intercept >= 0) return l;
  }
  double sx = 0, sy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i] * x[i];
    sy += x[i] * y[i];
  }
  return {0.0, sy / sx};
}

}  // namespace

RankCost fit_rank_cost(const std::vector<ProbeSample>& samples, double wait_watts) {
  CNNSCALE_CHECK(!samples.empty(), "no probe samples");
  std::vector<double> x, t, e;
  bool has_energy = true;
  for (const ProbeSample& s : samples) {
    CNNSCALE_CHECK(s.batch >= 1 && s.seconds > 0, "probe sample of {} samples in {} s", s.batch, s.seconds);
    x.push_back(static_cast<double>(s.batch));
    t.push_back(s.seconds);
    e.push_back(s.joules);
    has_energy = has_energy && std::isfinite(s.joules) && s.joules >= 0;
  }
  RankCost c;
  const Line time = fit_line(x, t);
  c.seconds_fixed = time.intercept;
  c.seconds_per_sample = time.slope;
  if (has_energy) {
    const Line energy = fit_line(x, e);
    c.joules_fixed = energy.intercept;
    c.joules_per_sample = energy.slope;
  } else {
    c.joules_fixed = c.joules_per_sample = std::nan("");
  }
  c.wait_watts = wait_watts;
  return c;
}

std::vector<int64_t> probe_batches(int64_t global_batch, int ranks) {
  CNNSCALE_CHECK(ranks >= 1 && global_batch >= ranks, "global batch {} over {} ranks", global_batch, ranks);
  const int64_t even = (global_batch + ranks - 1) / ranks;
  const int64_t most = global_batch - ranks + 1;
  std::vector<int64_t> out;
  for (int64_t n : {even / 2, even, 2 * even}) out.push_back(std::clamp<int64_t>(n, 1, most));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

SplitCost predict_split(const std::vector<int64_t>& shares, const std::vector<RankCost>& models,
                        const ExchangeCost& exchange) {
  CNNSCALE_CHECK(shares.size() == models.size(), "{} shares for {} models", shares.size(), models.size());
  SplitCost c;
  for (size_t r = 0; r < shares.size(); ++r) c.seconds = std::max(c.seconds, models[r].seconds(shares[r]));
  for (size_t r = 0; r < shares.size(); ++r)
    c.joules += models[r].joules(shares[r]) + models[r].wait_watts * (c.seconds - models[r].seconds(shares[r]));
  c.seconds += exchange.seconds;
  c.joules += exchange.joules;
  return c;
}

ExchangeCost fit_exchange_cost(const std::vector<int64_t>& shares, const std::vector<RankCost>& models,
                               const std::vector<ProbeSample>& steps) {
  CNNSCALE_CHECK(steps.size() == shares.size(), "{} timed steps for {} shares", steps.size(), shares.size());
  const SplitCost compute = predict_split(shares, models);
  double longest = 0, joules = 0;
  for (const ProbeSample& s : steps) {
    CNNSCALE_CHECK(s.seconds > 0, "a timed step of {} s", s.seconds);
    longest = std::max(longest, s.seconds);
    joules += s.joules;
  }
  ExchangeCost x;
  x.seconds = std::max(0.0, longest - compute.seconds);
  x.joules =
      std::isfinite(joules) && std::isfinite(compute.joules) ? std::max(0.0, joules - compute.joules) : std::nan("");
  return x;
}

namespace {

// What a policy minimises of a split's predicted cost: joules (energy), joules x seconds (edp),
// seconds (the time policies).
double objective_of(SplitPolicy policy, const SplitCost& c) {
  if (policy == SplitPolicy::Edp) return c.joules * c.seconds;
  return policy == SplitPolicy::Energy ? c.joules : c.seconds;
}

// Min-max compute time: one sample at a time to the rank whose step would then be shortest. For
// non-decreasing per-rank times this greedy is optimal; ties go to the lower rank, so identical
// models give the even split.
std::vector<int64_t> balance_time(int64_t global_batch, const std::vector<RankCost>& models) {
  const size_t ranks = models.size();
  std::vector<int64_t> shares(ranks, 1);
  using Entry = std::pair<double, size_t>;  // (seconds after one more sample, rank)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  for (size_t r = 0; r < ranks; ++r) next.emplace(models[r].seconds(2), r);
  for (int64_t left = global_batch - static_cast<int64_t>(ranks); left > 0; --left) {
    const size_t r = next.top().second;
    next.pop();
    ++shares[r];
    next.emplace(models[r].seconds(shares[r] + 1), r);
  }
  return shares;
}

// The most samples rank `m` can take within `limit` seconds (at most `most`; 0 when not even one).
int64_t samples_within(const RankCost& m, double limit, int64_t most) {
  if (m.seconds(1) > limit) return 0;
  if (m.seconds_per_sample <= 0) return most;
  auto n = static_cast<int64_t>(std::floor((limit - m.seconds_fixed) / m.seconds_per_sample));
  n = std::clamp<int64_t>(n, 1, most);
  while (n < most && m.seconds(n + 1) <= limit) ++n;  // floor's rounding, both ways
  while (n > 1 && m.seconds(n) > limit) --n;
  return n;
}

// Fewest predicted joules (energy) or joules x seconds (edp). For a step length T every rank's
// share is capped by T, and the joules are linear in the shares (each sample costs d_r - w_r b_r
// beyond a term fixed by T), so filling the cheapest ranks first up to their caps is optimal for
// that T. The optimum's own step length is one of the ranks' step times at some share, so trying
// every such T and keeping the best real cost finds it.
std::vector<int64_t> minimise_energy(SplitPolicy policy, int64_t global_batch, const std::vector<RankCost>& models,
                                     const ExchangeCost& exchange) {
  const size_t ranks = models.size();
  const int64_t most = global_batch - static_cast<int64_t>(ranks) + 1;
  for (const RankCost& m : models)
    if (!std::isfinite(m.joules_fixed) || !std::isfinite(m.joules_per_sample) || !std::isfinite(m.wait_watts))
      throw_config("--split {} needs every rank's energy, and a rank has no energy reading", to_string(policy));
  // The exchange's joules are the same at every split: the fewest joules are where they are without
  // them, so only edp, whose product they change, needs them.
  ExchangeCost x = exchange;
  if (!std::isfinite(x.joules)) {
    if (policy == SplitPolicy::Edp)
      throw_config("--split edp needs the exchange's energy, and a rank had no energy reading during it");
    x.joules = 0;
  }
  std::vector<double> limits;
  for (const RankCost& m : models)
    for (int64_t n = 1; n <= most; ++n) limits.push_back(m.seconds(n));
  std::sort(limits.begin(), limits.end());
  limits.erase(std::unique(limits.begin(), limits.end()), limits.end());

  std::vector<size_t> order(ranks);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto cost = [&](size_t r) {
      return models[r].joules_per_sample - models[r].wait_watts * models[r].seconds_per_sample;
    };
    return cost(a) < cost(b);
  });

  std::vector<int64_t> best;
  double best_value = 0;
  std::vector<int64_t> shares(ranks);
  for (double limit : limits) {
    int64_t capacity = 0;
    bool feasible = true;
    std::vector<int64_t> caps(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      caps[r] = samples_within(models[r], limit, most);
      feasible = feasible && caps[r] >= 1;
      capacity += caps[r];
    }
    if (!feasible || capacity < global_batch) continue;
    std::fill(shares.begin(), shares.end(), int64_t{1});
    int64_t left = global_batch - static_cast<int64_t>(ranks);
    for (size_t r : order) {
      const int64_t take = std::min(left, caps[r] - 1);
      shares[r] += take;
      left -= take;
    }
    const double value = objective_of(policy, predict_split(shares, models, x));
    if (best.empty() || value < best_value) {
      best = shares;
      best_value = value;
    }
  }
  CNNSCALE_CHECK(!best.empty(), "no split of {} samples fits", global_batch);
  return best;
}

}  // namespace

std::vector<int64_t> choose_split(SplitPolicy policy, int64_t global_batch, const std::vector<RankCost>& models,
                                  const ExchangeCost& exchange) {
  const auto ranks = static_cast<int64_t>(models.size());
  CNNSCALE_CHECK(ranks >= 1, "no ranks");
  if (global_batch < ranks)
    throw_config("global batch {} cannot be split across {} ranks: every rank needs at least one sample", global_batch,
                 ranks);
  switch (policy) {
    case SplitPolicy::Proportional:
    case SplitPolicy::Auto:
      return balance_time(global_batch, models);
    case SplitPolicy::Energy:
    case SplitPolicy::Edp:
      return minimise_energy(policy, global_batch, models, exchange);
    case SplitPolicy::Even:
    case SplitPolicy::Manual:
      break;
  }
  throw_config("--split {} does not choose shares from models", to_string(policy));
}

double imbalance(const std::vector<double>& compute_seconds) {
  if (compute_seconds.empty()) return 0;
  const double most = *std::max_element(compute_seconds.begin(), compute_seconds.end());
  if (!(most > 0)) return 0;
  const double mean =
      std::accumulate(compute_seconds.begin(), compute_seconds.end(), 0.0) / static_cast<double>(compute_seconds.size());
  return (most - mean) / most;
}

void Rebalancer::start_from(SplitPolicy policy, const std::vector<RankCost>& models, const ExchangeCost& exchange) {
  CNNSCALE_CHECK(split_refines_online(policy), "--split {} is not refined online", to_string(policy));
  policy_ = policy;
  models_ = models;
  for (RankCost& m : models_) {
    m.seconds_fixed = std::isfinite(m.seconds_fixed) ? std::max(0.0, m.seconds_fixed) : 0.0;
    // A measurement is read against the model's step, which must take time (fit_rank_cost's slope is > 0).
    CNNSCALE_CHECK(m.seconds(1) > 0, "a rank model of {} + {} n seconds", m.seconds_fixed, m.seconds_per_sample);
  }
  // auto compares the slowest rank's compute alone: the exchange, the same at every split, stays
  // out. energy without the exchange's joules (not measured) counts them as 0, as its choice does:
  // the same at every split, they move nothing there (edp refuses to start without them).
  exchange_ = split_needs_energy(policy) ? exchange : ExchangeCost{};
  if (!std::isfinite(exchange_.joules)) exchange_.joules = 0;
  ratio_.clear();
}

std::optional<std::vector<int64_t>> Rebalancer::propose(const std::vector<int64_t>& shares,
                                                        const std::vector<double>& compute_seconds) {
  CNNSCALE_CHECK(shares.size() == compute_seconds.size(), "{} shares, {} times", shares.size(), compute_seconds.size());
  for (double c : compute_seconds)
    if (!(c > 0) || !std::isfinite(c)) return std::nullopt;  // nothing measured on a rank: keep the split
  if (ratio_.size() != shares.size()) ratio_.assign(shares.size(), 0.0);
  const bool modelled = models_.size() == shares.size();
  const bool by_energy = split_needs_energy(policy_);
  CNNSCALE_CHECK(modelled || !by_energy, "--split {} refines the probe's models, and there are none for {} ranks",
                 to_string(policy_), shares.size());
  std::vector<RankCost> speed(shares.size());
  int64_t total = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    // The step this rank was expected to take at its share: the probe's a + b n, or without a probe
    // (auto from even) a step that is all per sample, which one share's measurement fixes alone.
    const RankCost base = modelled ? models_[r] : RankCost{0.0, 1.0, 0.0, 0.0, 0.0};
    const double expected = base.seconds(shares[r]);
    // How much longer (or shorter) the running job makes it. The whole line is scaled, fixed part
    // and slope alike: one measurement cannot tell them apart, and charging a fixed extra (the
    // exchange's kernels beside a small partition's backward) to the slope alone would read a rank
    // cut to n samples as extra/n slower per sample, and cut it further.
    const double ratio = compute_seconds[r] / expected;
    ratio_[r] = ratio_[r] > 0 ? smoothing_ * ratio_[r] + (1 - smoothing_) * ratio : ratio;
    speed[r] = base;
    speed[r].seconds_fixed *= ratio_[r];
    speed[r].seconds_per_sample *= ratio_[r];
    if (by_energy) {
      // The power the probe measured is held over the longer (or shorter) step.
      speed[r].joules_fixed *= ratio_[r];
      speed[r].joules_per_sample *= ratio_[r];
    }
    total += shares[r];
  }
  // For energy and edp the refined times hold what the exchange's kernels take from backward, which
  // the probe's exchange cost holds too: both sides of the comparison carry the same constant, so
  // energy's choice is unmoved and the hysteresis a little stricter; edp's product counts it twice.
  const std::vector<int64_t> next = choose_split(policy_, total, speed, exchange_);
  if (next == shares) return std::nullopt;
  if (objective_of(policy_, predict_split(next, speed, exchange_)) >=
      (1.0 - hysteresis_) * objective_of(policy_, predict_split(shares, speed, exchange_)))
    return std::nullopt;
  return next;
}

}  // namespace cnnscale
