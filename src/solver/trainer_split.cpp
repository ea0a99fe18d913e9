// Trainer, unequal ranks: the start-up probe that times each rank's forward+backward at a few local
// batches (and reads its GPU's joules), the policy's first shares from the fitted models, `auto`'s
// online rebalancing, the switch to new shares mid-run, and the CPU straggler emulation.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ranges>
#include <thread>

#include "core/log.hpp"
#include "core/watchdog.hpp"
#include "solver/trainer.hpp"
#include "solver/upload_slots.hpp"

namespace cnnscale {

namespace {

std::vector<int64_t> shares_of(const DataParallel& dp, int64_t global_batch) {
  return dp.rank_batches.empty() ? std::vector<int64_t>{global_batch} : dp.rank_batches;
}

// Values per rank in the probe's exchange: the model's five numbers, the whole step's seconds and
// joules, then seconds and joules of each probe batch.
constexpr size_t kModelValues = 5;

// The probe's outcome in one log line: the batches timed, each rank's fitted model, the shares
// chosen and what the models predict for them.
std::string describe_probe(const std::string& policy, const std::vector<int64_t>& batches,
                           const std::vector<RankCost>& models, const ExchangeCost& exchange,
                           const std::vector<int64_t>& shares) {
  std::string text = fmt::format("split {}: probe of {} samples per rank;", policy, fmt::join(batches, "/"));
  for (size_t r = 0; r < models.size(); ++r) {
    const RankCost& m = models[r];
    text.append(fmt::format(" rank {}: {:.3g} + {:.3g} n ms", r, 1e3 * m.seconds_fixed, 1e3 * m.seconds_per_sample));
    if (std::isfinite(m.joules_per_sample))
      text.append(
          fmt::format(", {:.3g} + {:.3g} n J, idle {:.0f} W", m.joules_fixed, m.joules_per_sample, m.wait_watts));
    text.append(";");
  }
  if (exchange.seconds > 0 || exchange.joules > 0)
    text.append(fmt::format(" exchange {:.3g} ms{};", 1e3 * exchange.seconds,
                            std::isfinite(exchange.joules) ? fmt::format(", {:.3g} J", exchange.joules) : ""));
  const SplitCost p = predict_split(shares, models, exchange);
  text.append(fmt::format(" shares {} (predicted {:.3g} ms", fmt::join(shares, "+"), 1e3 * p.seconds));
  text.append(std::isfinite(p.joules) ? fmt::format(", {:.3g} J per batch)", p.joules) : std::string(")"));
  return text;
}

}  // namespace

// The idle time owed is paid in sleeps of at least half a millisecond, and what a sleep overshoots
// (the kernel's timer slack, tens of microseconds) is credited against the next: calling sleep for
// every small layer would add a fixed cost per layer and make the emulated rank slower than the
// factor on small steps. `flush` pays what is owed now (the end of backward, before the exchange).
void Trainer::slow_down(Clock::time_point since, bool flush) {
  if (options_.slowdown <= 1.0) return;
  slowdown_debt_ += (options_.slowdown - 1.0) * seconds_since(since);
  if (slowdown_debt_ < (flush ? 0.0 : 5e-4)) return;
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(slowdown_debt_));
  slowdown_debt_ -= seconds_since(t0);
}

// GPU power with nothing running, over half a second: what a rank draws while it waits for the
// others at the gradient exchange (its kernels there only poll). NaN without a GPU energy counter.
double Trainer::measure_wait_watts() {
  measure::EnergyMonitor* energy = measurement_.energy;
  if (!energy || !energy->gpu_available() || energy->open()) return std::nan("");
  host_sync("host sync (idle power)");
  energy->begin("idle power");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const measure::EnergyReading r = energy->end(0);
  return r.gpu_joules && r.seconds > 0 ? *r.gpu_joules / r.seconds : std::nan("");
}

// Copies of tensors the probe's work writes, put back by restore(): the run starts as it would
// unprobed.
struct ProbeSaved {
  Backend& backend;
  std::vector<std::pair<Tensor, Tensor>> kept;  // (live, copy)
  void keep(const Tensor& t) {
    if (!t.defined() || t.numel() == 0) return;
    Tensor copy = backend.alloc(t.shape(), t.dtype()).as_layout(t.layout());
    backend.copy(t, copy);
    kept.emplace_back(t, copy);
  }
  void restore() {
    for (auto& [live, copy] : kept) backend.copy(copy, live);
  }
};

// How long a probe window lasts: probe_seconds, or for the policies that choose by joules (energy,
// edp), where the window reads the GPU's energy counter, at least min_window_seconds. The counter
// moves about every 100 ms, so a 0.5 s window's joules may be off by a fifth
// (docs/measurements/2026-11-26-scaling-four-gpus.md), and their models' differences are a few
// percent; a window of a few seconds reads them within a few percent. The policies that choose by
// time keep probe_seconds (their joules are recorded as they come).
double Trainer::probe_window_seconds(bool joules) const {
  return joules && split_needs_energy(options_.split) ? std::max(options_.probe_seconds, measurement_.min_window_seconds)
                                                      : options_.probe_seconds;
}

// `step` timed: two untimed runs (allocation, algorithm choice), `sizing` timed to size the loop,
// then enough to fill the window (at least 3), bracketed by one host sync each side so the time and
// the GPU's energy counter cover exactly those runs; a window that fell short of a joules window's
// floor (a first run slower than the rest) is lengthened by more runs. `collective`: the steps have
// collectives, so every rank runs the same number (the largest any rank needs, for the loop and for
// each lengthening, whose rounds are decided from the options alone, the same on every rank), from
// a barrier. Seconds and joules per run (joules NaN without a GPU counter); `batch` is recorded as
// given.
ProbeSample Trainer::time_probe(int64_t batch, const std::function<void()>& step, bool collective) {
  measure::EnergyMonitor* energy = measurement_.energy;
  const bool joules = energy && energy->gpu_available() && !energy->open();
  const double window = probe_window_seconds(joules);
  auto agree = [&](int64_t steps) { return collective ? agree_max(steps) : steps; };
  const int sizing = collective ? 3 : 1;
  step();
  step();
  host_sync("host sync (split probe)");
  auto t0 = Clock::now();
  for (int i = 0; i < sizing; ++i) step();
  host_sync("host sync (split probe)");
  const double per = std::max(seconds_since(t0) / sizing, 1e-6);
  int64_t steps = agree(std::min<int64_t>(int64_t{1} << 20, std::max<int64_t>(3, std::ceil(window / per))));
  if (collective) agree_max(0);  // a barrier: the ranks' timed steps start together
  if (joules) energy->begin("split probe");
  t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  host_sync("host sync (split probe)");
  const bool floored = probe_window_seconds(collective || joules) > options_.probe_seconds;
  for (int round = 0; floored && round < 20; ++round) {
    const double elapsed = seconds_since(t0);
    const double mean = std::max(elapsed / static_cast<double>(steps), 1e-6);
    const int64_t extra =
        agree(joules && elapsed < window
                  ? std::min<int64_t>(int64_t{1} << 20, static_cast<int64_t>(std::ceil((window - elapsed) / mean)) + 1)
                  : 0);
    if (extra == 0) break;
    for (int64_t i = 0; i < extra; ++i) step();
    steps += extra;
    host_sync("host sync (split probe)");
  }
  ProbeSample p{batch, seconds_since(t0) / static_cast<double>(steps), std::nan("")};
  if (joules) {
    const measure::EnergyReading r = energy->end(steps);
    if (r.gpu_joules) p.joules = *r.gpu_joules / static_cast<double>(steps);
  }
  return p;
}

// Forward+backward of this rank alone (no exchange) at each probe batch. The batch-norm running
// statistics the probe's forward passes move are put back afterwards.
std::vector<ProbeSample> Trainer::probe_rank(const std::vector<int64_t>& batches) {
  ProbeSaved saved{backend_, {}};
  for (auto& [name, t] : net_->state()) saved.keep(t);
  std::vector<ProbeSample> out;
  for (int64_t n : batches) {
    upload_probe_batch(n);
    const StepScalars s = step_scalars(0, 0, true);
    write_step_values(s);
    out.push_back(time_probe(n, [&] {
      forward(s);
      backward(s, /*exchange=*/false);
    }));
  }
  net_->reshape(split_.local);
  saved.restore();
  return out;
}

void Trainer::upload_probe_batch(int64_t n) {
  net_->reshape(n);
  std::vector<int64_t> indices(static_cast<size_t>(n));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  std::vector<float> data(static_cast<size_t>(net_->input().numel()));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  train_->fill(indices, data.data(), labels.data());
  backend_.upload(data.data(), net_->input());
  backend_.upload(labels.data(), net_->labels());
}

// Whole training steps (forward, backward with the gradient exchange, the divergence check, the
// update) on every rank together at the shares in force: what the per-rank models leave out, the
// exchange's exposed tail and what its kernels take from backward beside them, is in these and
// nowhere else. Timed collectively (time_probe). Everything a step writes is saved before and put
// back after, as for the update.
ProbeSample Trainer::probe_step() {
  ProbeSaved saved{backend_, {}};
  for (auto& [name, t] : net_->state()) saved.keep(t);
  keep_update_writes(saved);
  if (overflow_.defined()) {
    saved.keep(loss_scale_);
    saved.keep(scale_state_);
  }
  upload_probe_batch(split_.local);
  const StepScalars s = step_scalars(0, 0, true);
  write_step_values(s);
  const ProbeSample p = time_probe(
      split_.local,
      [&] {
        forward(s);
        backward(s, /*exchange=*/true);
        gradients_ready();
        flag_divergence();
        update(s);
      },
      /*collective=*/true);
  saved.restore();
  return p;
}

void Trainer::keep_update_writes(ProbeSaved& saved) const {
  saved.keep(net_->flat_params());
  saved.keep(net_->flat_mirrors());
  for (const Tensor& h : solver_->history()) saved.keep(h);
  saved.keep(nonfinite_);
}

// The update alone, timed as the passes are, on the gradients the probe's last pass left. It costs
// the same at every share (one pass over the parameters), so it joins the models' fixed parts:
// compute, as the run measures and `auto` balances it, is the step less its exposed exchange,
// update included, and the update is no small part of it where few SMs stream the parameters
// (on a 40-SM partition of an H200, about a third of CaffeNet's forward+backward:
// docs/measurements/2026-11-26-training-step-choices.md). Everything it writes (the f32 masters,
// their compute copies, the momentum, and a single process's divergence flag, which its update sets
// itself) is saved before and put back after. The restored compute copies are those of the restored
// masters, so the next forward may skip converting them as the update's flag
// (Net::mirrors_written_by_update) tells it to.
ProbeSample Trainer::probe_update() {
  ProbeSaved saved{backend_, {}};
  keep_update_writes(saved);
  const StepScalars s = step_scalars(0, 0, true);
  write_step_values(s);
  const ProbeSample u = time_probe(0, [&] { update(s); });
  saved.restore();
  return u;
}

bool Trainer::refines_split() const {
  return split_refines_online(options_.split) && options_.rebalance_every > 0 && job_.parallel.comm &&
         job_.parallel.size() > 1;
}

bool Trainer::probes_split() const {
  return split_needs_probe(options_.split) ||
         (options_.split == SplitPolicy::Auto && options_.auto_probe && job_.parallel.size() > 1);
}

// Before the first step of run(): the wait power, and for proportional / energy / edp the probe on
// every rank, the models every rank then shares, and the shares they choose (the same on every
// rank: each decides from the same gathered numbers).
void Trainer::plan_split(TrainResult& result, int64_t start, const TrainCallbacks& cb) {
  const DataParallel& dp = job_.parallel;
  const int ranks = dp.size();
  split_record_ = SplitRecord{};
  split_record_.policy = to_string(options_.split);
  // What was asked (one rank has nothing to refine, whatever the interval).
  split_record_.refine_every = split_refines_online(options_.split) ? options_.rebalance_every : 0;
  if (split_record_.refine_every > 0) split_record_.refine_model = kRefineModel;
  rebalancer_ = Rebalancer(options_.rebalance_hysteresis);
  if ((dp.comm && ranks > 1) || split_needs_energy(options_.split)) result.wait_watts = measure_wait_watts();
  if (probes_split()) {
    const std::vector<int64_t> batches = probe_batches(split_.global, ranks);
    const std::vector<ProbeSample> samples = probe_rank(batches);
    RankCost own = fit_rank_cost(samples, result.wait_watts);
    const ProbeSample update_cost = probe_update();
    own.seconds_fixed += update_cost.seconds;
    own.joules_fixed += update_cost.joules;  // NaN where unmeasured, as the line's energy terms then are
    // With other ranks, whole steps at the split in force (the even split: only the model-based
    // policies probe, and they start from it): the exchange's cost, which no rank's own passes hold.
    const bool exchanges = dp.comm && ranks > 1;
    const ProbeSample step = exchanges ? probe_step() : ProbeSample{};
    std::vector<float> payload = {static_cast<float>(own.seconds_fixed), static_cast<float>(own.seconds_per_sample),
                                  static_cast<float>(own.joules_fixed),  static_cast<float>(own.joules_per_sample),
                                  static_cast<float>(own.wait_watts),    static_cast<float>(step.seconds),
                                  static_cast<float>(step.joules)};
    for (const ProbeSample& p : samples) {
      payload.push_back(static_cast<float>(p.seconds));
      payload.push_back(static_cast<float>(p.joules));
    }
    const std::vector<std::vector<float>> all =
        exchanges ? allgather_host(*dp.comm, backend_, payload) : std::vector<std::vector<float>>{payload};
    const std::vector<int64_t> in_force = shares_of(dp, split_.global);
    std::vector<RankCost> models;
    std::vector<ProbeSample> steps;
    for (size_t r = 0; r < all.size(); ++r) {
      const std::vector<float>& v = all[r];
      RankCost m{v[0], v[1], v[2], v[3], v[4]};
      models.push_back(m);
      split_record_.models.push_back({static_cast<int64_t>(r), m.seconds_fixed, m.seconds_per_sample, m.joules_fixed,
                                      m.joules_per_sample, m.wait_watts});
      if (exchanges) steps.push_back({in_force[r], v[kModelValues], v[kModelValues + 1]});
      for (size_t i = 0; i < batches.size(); ++i)
        split_record_.probe.push_back(
            {static_cast<int64_t>(r), batches[i], v[kModelValues + 2 + 2 * i], v[kModelValues + 3 + 2 * i]});
    }
    ExchangeCost exchange;
    if (exchanges) {
      exchange = fit_exchange_cost(in_force, models, steps);
      for (size_t r = 0; r < steps.size(); ++r)
        split_record_.steps.push_back({static_cast<int64_t>(r), steps[r].batch, steps[r].seconds, steps[r].joules});
      split_record_.exchange_seconds = exchange.seconds;
      split_record_.exchange_joules = exchange.joules;
    }
    const std::vector<int64_t> shares = choose_split(options_.split, split_.global, models, exchange);
    // auto, energy and edp refine these models online, each under its own objective.
    if (split_refines_online(options_.split)) rebalancer_.start_from(options_.split, models, exchange);
    if (cb.on_message) cb.on_message(describe_probe(split_record_.policy, batches, models, exchange, shares));
    if (shares != in_force) apply_split(shares);
  }
  split_record_.changes.push_back({start, shares_of(dp, split_.global)});
}

// `auto`, `energy`, `edp`: each rank's median compute seconds over the second half of the interval
// just run, gathered; every rank applies the same Rebalancer decision. The steady window pauses for
// the switch and restarts two steps later, and those steps count as warm-up.
void Trainer::maybe_rebalance(RunState& s, int64_t t, const TrainCallbacks& cb) {
  const DataParallel& dp = job_.parallel;
  const int64_t done = t + 1, every = options_.rebalance_every;
  if (!refines_split()) return;
  if ((done - s.start) % every != 0 || done >= s.end) return;
  host_sync("host sync (rebalance)");  // the steps queued before the pause are the interval's time
  const auto pause_start = Clock::now();
  if (train_slots_) train_slots_->release_all();
  resolve_phases();
  // The median: a step slowed by something else on the host does not move it. Warm-up steps (the
  // run's first, and those right after a change) are left out; an interval with none left decides
  // nothing.
  const int64_t from = done - std::max<int64_t>(1, every / 2);
  std::vector<double> steps;
  for (const IterationPhases& p : phase_timer_->timeline())
    if (p.iteration >= from && p.iteration < done && !p.warmup)
      steps.push_back(compute_seconds(p.total, p.seconds[static_cast<size_t>(TimelinePhase::Allreduce)]));
  float own = 0.0f;
  if (!steps.empty()) {
    std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
    own = static_cast<float>(steps[steps.size() / 2]);
  }
  std::vector<double> compute;
  for (const std::vector<float>& v : allgather_host(*dp.comm, backend_, {own})) compute.push_back(v[0]);
  const std::optional<std::vector<int64_t>> next = rebalancer_.propose(dp.rank_batches, compute);
  if (next) {
    const bool was_timing = s.window.timing();
    s.window.stop();
    apply_split(*next);
    split_record_.changes.push_back({done, *next});
    if (cb.on_message)
      cb.on_message(fmt::format(
          "split {}: after iteration {}: compute {:.2f} ms per rank -> shares {}", split_record_.policy, done,
          fmt::join(compute | std::views::transform([](double v) { return 1e3 * v; }), "/"), fmt::join(*next, "+")));
    if (was_timing) s.settle_until = done + 2;
  }
  s.display_paused += seconds_since(pause_start);
}

// New shares from the next step on: this rank's slice, the net's batch, the loss weight, and the
// input (a loader at the same position of the global order, or the device pool refilled).
void Trainer::apply_split(const std::vector<int64_t>& shares) {
  const int64_t global = split_.global;
  job_.parallel.rank_batches = shares;
  split_ = plan_batch();
  CNNSCALE_CHECK(split_.global == global, "new shares sum to {}, not to the global batch {}", split_.global, global);
  net_->reshape(split_.local);
  if (job_.parallel.comm) net_->set_loss_scale(split_.share);
  if (net_->gathering_layers() > 0) net_->set_gather_rows(*std::max_element(shares.begin(), shares.end()));
  if (loader_) {
    const LoaderState position = loader_->state();
    train_slots_.reset();
    loader_.reset();
    make_loader();
    loader_->restore(position);
  }
  if (options_.device_pool) {
    pool_data_.clear();
    pool_labels_.clear();
    fill_pool();
  }
}

}  // namespace cnnscale
