// Energy window arithmetic: counter differences with wrap/reset handling, window extension and the
// per-phase split by difference of phase-isolated loops.
#include "measure/energy_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"

namespace cnnscale::measure {

CounterDifference nvml_counter_difference(std::optional<std::uint64_t> begin_mj, std::optional<std::uint64_t> end_mj) {
  if (!begin_mj || !end_mj) return {};
  if (*end_mj < *begin_mj) return {std::nullopt, true};
  return {static_cast<double>(*end_mj - *begin_mj) / 1e3, false};
}

CounterDifference rapl_counter_difference(std::optional<std::uint64_t> begin_uj, std::optional<std::uint64_t> end_uj,
                                          std::optional<std::uint64_t> max_range_uj) {
  if (!begin_uj || !end_uj) return {};
  if (*end_uj >= *begin_uj) return {static_cast<double>(*end_uj - *begin_uj) / 1e6, false};
  if (!max_range_uj || *max_range_uj < *begin_uj) return {std::nullopt, true};
  // The counter ran from begin up to the range, restarted at 0 and reached end.
  return {static_cast<double>(*max_range_uj - *begin_uj + *end_uj) / 1e6, false};
}

std::int64_t extra_iterations_needed(std::int64_t done, double seconds_per_iteration, double min_seconds) {
  CNNSCALE_CHECK(seconds_per_iteration > 0, "seconds per iteration {} must be positive", seconds_per_iteration);
  auto total = static_cast<std::int64_t>(std::ceil(min_seconds / seconds_per_iteration));
  return std::max<std::int64_t>(0, total - done);
}

std::optional<double> WindowEnergy::joules_per_iteration() const {
  if (!joules || iterations <= 0) return std::nullopt;
  return *joules / static_cast<double>(iterations);
}

std::optional<double> WindowEnergy::watts() const {
  if (!joules || seconds <= 0) return std::nullopt;
  return *joules / seconds;
}

WindowEnergy nvml_window(std::optional<std::uint64_t> begin_mj, std::optional<std::uint64_t> end_mj, double seconds,
                         std::int64_t iterations, const std::string& what) {
  WindowEnergy w;
  auto d = nvml_counter_difference(begin_mj, end_mj);
  w.joules = d.joules;
  w.counter_reset = d.counter_reset;
  w.seconds = seconds;
  w.iterations = iterations;
  if (d.joules)
    w.method =
        fmt::format("nvml energy counter difference over {} of {} iterations ({:.3f} s)", what, iterations, seconds);
  else if (d.counter_reset)
    w.method = fmt::format("nvml energy counter went backwards (reset) during {} of {} iterations; no value", what,
                           iterations);
  else
    w.method = "no energy counter (NVML unavailable or unsupported)";
  return w;
}

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void CounterWindow::start() {
  begin_mj_ = reader_.energy_mj();
  begin_s_ = steady_seconds();
}

double CounterWindow::elapsed_seconds() const {
  return steady_seconds() - begin_s_;
}

WindowEnergy CounterWindow::stop(std::int64_t iterations, const std::string& what) {
  double seconds = elapsed_seconds();
  return nvml_window(begin_mj_, reader_.energy_mj(), seconds, iterations, what);
}

Stat make_stat(const std::vector<double>& values) {
  Stat s;
  s.n = static_cast<int>(values.size());
  if (values.empty()) return s;
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / s.n;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  if (s.n > 1) {
    double ss = 0;
    for (double v : values) ss += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(ss / (s.n - 1));
  }
  return s;
}

bool pool_adjacent_violators(std::vector<double>& v) {
  // Blocks of (mean, count); merging a block into its predecessor while they are out of order.
  std::vector<std::pair<double, int>> blocks;
  bool pooled = false;
  for (double x : v) {
    blocks.push_back({x, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].first > blocks.back().first) {
      auto [m, n] = blocks.back();
      blocks.pop_back();
      auto& prev = blocks.back();
      prev.first = (prev.first * prev.second + m * n) / (prev.second + n);
      prev.second += n;
      pooled = true;
    }
  }
  size_t i = 0;
  for (auto [m, n] : blocks)
    for (int k = 0; k < n; ++k) v[i++] = m;
  return pooled;
}

PhaseEnergy derive_phase_energy(const std::vector<PhaseRepeat>& repeats, double min_seconds) {
  if (repeats.empty()) throw_runtime("phase energy: no repeats");
  auto per_iter = [&](const PhaseLoop& l, const char* name) {
    if (l.iterations <= 0 || l.seconds < min_seconds)
      throw_runtime("phase energy: the {} loop ran {} iterations in {:.3f} s; each loop needs >= {} s", name,
                    l.iterations, l.seconds, min_seconds);
    return l.joules / static_cast<double>(l.iterations);
  };
  std::vector<double> fwd, bwd, upd, full;
  double shortest = 1e300;
  int pooled = 0;
  for (const auto& r : repeats) {
    // Cumulative cost per iteration of forward, forward+backward and the full step. Each loop does
    // all the work of the one before it and more, so the true values are non-decreasing; measured
    // ones need not be (a noisy or loaded machine). The phases are the differences of the
    // least-squares non-decreasing fit (pool-adjacent-violators: a pair out of order is replaced by
    // its mean), so no phase is ever negative and a repeat that needed pooling is counted.
    std::vector<double> c = {per_iter(r.forward, "forward-only"), per_iter(r.forward_backward, "forward+backward"),
                             per_iter(r.full_step, "full-step")};
    if (pool_adjacent_violators(c)) ++pooled;
    fwd.push_back(c[0]);
    bwd.push_back(c[1] - c[0]);
    upd.push_back(c[2] - c[1]);
    full.push_back(c[2]);
    shortest = std::min({shortest, r.forward.seconds, r.forward_backward.seconds, r.full_step.seconds});
  }
  PhaseEnergy p{make_stat(fwd), make_stat(bwd), make_stat(upd), make_stat(full), "", pooled};
  p.method = fmt::format(
      "phase-isolated windows (forward-only, forward+backward, full step; each >= {:.3f} s), {} repeats, "
      "nvml energy counter differences per iteration; backward = (fwd+bwd) - fwd, update+allreduce = "
      "full - (fwd+bwd), after a non-decreasing least-squares fit of the three per-iteration costs (out-of-order "
      "pairs pooled to their mean: {} of {} repeats), so no phase is negative; mean and sample std over repeats",
      shortest, repeats.size(), pooled, repeats.size());
  return p;
}

}  // namespace cnnscale::measure
