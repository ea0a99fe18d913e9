// The figures of a run on unequal ranks, from every rank's timeline and the split record: each
// rank's compute and waiting per batch, the joules waiting costs, the job's imbalance and its
// throughput against the ideal combined throughput of its ranks.
#include "solver/split_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "parallel/split_policy.hpp"

namespace cnnscale {

namespace {

// Shares in force at `iteration`: the last change at or before it.
const std::vector<int64_t>* shares_at(const SplitRecord& split, int64_t iteration) {
  const std::vector<int64_t>* out = nullptr;
  for (const SplitChange& c : split.changes)
    if (c.iteration <= iteration) out = &c.shares;
  return out;
}

std::string mix_label(const std::vector<RankReport>& ranks) {
  const bool partitions = std::any_of(ranks.begin(), ranks.end(), [](const RankReport& r) { return r.sms > 0; });
  const bool emulated = std::any_of(ranks.begin(), ranks.end(), [](const RankReport& r) { return r.slowdown != 1.0; });
  std::vector<std::string> parts;
  if (partitions) {
    for (const RankReport& r : ranks)
      parts.push_back(fmt::format("{}", r.sms > 0 ? r.sms : r.gpu ? r.gpu->sm_count : 0));
    return fmt::format("{} SMs", fmt::join(parts, "+"));
  }
  if (emulated) {
    for (const RankReport& r : ranks) parts.push_back(fmt::format("{:g}", r.slowdown));
    return fmt::format("slowdown {}", fmt::join(parts, "+"));
  }
  return "";
}

}  // namespace

void put_split_figures(RunResults& res, const TrainResult& r0, const std::vector<RankReport>& ranks) {
  const auto n = ranks.size();
  const std::string mix = mix_label(ranks);
  res.split = r0.split;
  if (n < 2 && r0.split.policy == "even" && mix.empty()) return;  // one whole device: nothing is unequal
  RunSummary& S = res.summary;
  auto& M = res.methods;
  S.split = r0.split.policy;
  if (!r0.split.changes.empty()) {
    S.split_shares = fmt::format("{}", fmt::join(r0.split.changes.back().shares, "+"));
    S.split_changes = static_cast<double>(r0.split.changes.size() - 1);
  }
  if (!mix.empty()) S.mix = mix;

  // Per steady iteration and rank: compute = the step less its exposed exchange; the imbalance
  // wait is the slowest rank's compute less this rank's (what it idles at the exchange for them).
  std::vector<double> compute(n, 0.0), exchange(n, 0.0), waiting(n, 0.0), samples(n, 0.0);
  int64_t rows = 0;
  const Timeline& tl = res.timeline;
  for (int64_t i = 0; i < tl.iterations(); ++i) {
    if (tl.warmup()[static_cast<size_t>(i)]) continue;
    std::vector<double> c(n), total(n);
    bool complete = true;
    for (size_t r = 0; r < n; ++r) {
      total[r] = tl.at(i, static_cast<int64_t>(r), TimelinePhase::Total);
      c[r] = compute_seconds(total[r], tl.at(i, static_cast<int64_t>(r), TimelinePhase::Allreduce));
      complete = complete && std::isfinite(total[r]);
    }
    if (!complete) continue;  // a rank without this iteration's times: the row says nothing of balance
    const std::vector<int64_t>* shares = shares_at(r0.split, tl.iteration()[static_cast<size_t>(i)]);
    const double slowest = *std::max_element(c.begin(), c.end());
    for (size_t r = 0; r < n; ++r) {
      compute[r] += c[r];
      exchange[r] += total[r] - c[r];
      waiting[r] += slowest - c[r];
      samples[r] += shares && shares->size() == n ? static_cast<double>((*shares)[r])
                                                  : static_cast<double>(ranks[r].local_batch);
    }
    ++rows;
  }
  if (rows == 0) return;

  std::vector<double> mean_compute(n);
  double ideal = 0, wait_joules = 0;
  bool joules_known = true;
  const double per = 1.0 / static_cast<double>(rows);
  for (size_t r = 0; r < n; ++r) {
    mean_compute[r] = compute[r] * per;
    ideal += compute[r] > 0 ? samples[r] / compute[r] : kMissing;
    const double w = ranks[r].wait_watts;
    joules_known = joules_known && std::isfinite(w);
    wait_joules += waiting[r] * per * w;
    if (r < res.rank_summary.size()) {
      RankSummary& out = res.rank_summary[r];
      out.compute_s = mean_compute[r];
      out.exchange_wait_s = exchange[r] * per;
      out.imbalance_wait_s = waiting[r] * per;
      out.wait_watts = std::isfinite(w) ? NumberFigure(w) : NumberFigure::null();
      out.waiting_joules_per_batch = std::isfinite(w) ? NumberFigure(waiting[r] * per * w) : NumberFigure::null();
      if (ranks[r].sms > 0) out.sms = static_cast<double>(ranks[r].sms);
      if (ranks[r].slowdown != 1.0) out.slowdown = ranks[r].slowdown;
    }
  }
  S.imbalance = imbalance(mean_compute);
  S.waiting_joules_per_batch = joules_known ? NumberFigure(wait_joules) : NumberFigure::null();
  S.ideal_samples_per_s = ideal;
  S.efficiency = S.samples_per_s.has_value() && std::isfinite(ideal) && ideal > 0
                     ? NumberFigure(S.samples_per_s.value() / ideal)
                     : NumberFigure::null();
  M["imbalance"] = fmt::format(
      "(max - mean) / max over ranks of compute seconds per batch (step total less its exposed allreduce), mean "
      "over {} steady iterations",
      rows);
  M["waiting_joules_per_batch"] =
      joules_known ? "sum over ranks of (slowest rank's compute - own compute) per iteration x the rank's idle GPU "
                     "power, measured for 0.5 s before training"
                   : "null: a rank has no idle-power reading (CPU ranks, or no GPU energy counter)";
  M["ideal_samples_per_s"] = "sum over ranks of the samples it took / its compute seconds, over the steady iterations";
  M["efficiency"] = "samples_per_s / ideal_samples_per_s";
  if (std::any_of(ranks.begin(), ranks.end(), [](const RankReport& r) { return r.slowdown != 1.0; }))
    M["mix"] = "emulation: CPU ranks idle (slowdown - 1) x their forward and backward time (--slowdown)";

  if (!r0.split.models.empty() && !r0.split.changes.empty() && r0.split.models.size() == n) {
    std::vector<RankCost> models;
    for (const RankModel& m : r0.split.models)
      models.push_back({m.seconds_fixed, m.seconds_per_sample, m.joules_fixed, m.joules_per_sample, m.wait_watts});
    const std::vector<int64_t>& shares = r0.split.changes.back().shares;
    // Runs on one rank, and files written before the exchange was probed, have none (nor joules
    // where a rank had no energy reading during it): the prediction then leaves it out, and its
    // method says so.
    const bool exchange_known = std::isfinite(r0.split.exchange_seconds);
    const bool exchange_joules_known = exchange_known && std::isfinite(r0.split.exchange_joules);
    const ExchangeCost exchange{exchange_known ? r0.split.exchange_seconds : 0.0,
                                exchange_joules_known ? r0.split.exchange_joules : 0.0};
    const SplitCost predicted = predict_split(shares, models, exchange);
    S.predicted_seconds_per_batch = predicted.seconds;
    const double batch = S.global_batch.value_or(0);
    S.predicted_joules_per_sample =
        std::isfinite(predicted.joules) && batch > 0 ? NumberFigure(predicted.joules / batch) : NumberFigure::null();
    M["predicted_seconds_per_batch"] =
        exchange_known
            ? "the probe's per-rank models at the final shares: the slowest rank's forward+backward+update, + the "
              "exchange's seconds per step (whole steps timed on every rank at the even split, less the models' "
              "compute there)"
            : "the probe's per-rank models at the final shares: the slowest rank's forward+backward+update (no "
              "exchange)";
    M["predicted_joules_per_sample"] =
        exchange_joules_known
            ? "the same models: compute joules (forward+backward+update) of every rank + idle power x waiting + the "
              "exchange's joules per step (measured as its seconds), per sample"
            : "the same models: compute joules (forward+backward+update) of every rank + idle power x waiting, per "
              "sample (no exchange)";
  }
}

}  // namespace cnnscale
