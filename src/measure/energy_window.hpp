// Counter arithmetic for energy windows: joules from NVML (64-bit mJ) and RAPL (wrapping uJ) counter
// differences, how many more iterations a too-short window needs, and the per-phase derivation of
// `measure: phases` (forward, backward, update+allreduce by difference of phase-isolated loops).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "measure/nvml.hpp"

namespace cnnscale::measure {

// NVML refreshes its energy counter about every 100 ms, so a window needs many periods for the
// quantisation error to vanish: a few seconds for the steady window, 1 s per phase-isolated loop.
inline constexpr double kCounterPeriodSeconds = 0.1;
inline constexpr double kMinSteadyWindowSeconds = 3.0;
inline constexpr double kMinPhaseWindowSeconds = 1.0;

struct CounterDifference {
  std::optional<double> joules;  // null when the counter went backwards (reset) or was unreadable
  bool counter_reset = false;
};

// NVML: a decrease cannot be a wrap of a 64-bit mJ counter, it is a driver reload/reset; the
// window has no valid energy and the caller records that.
CounterDifference nvml_counter_difference(std::optional<std::uint64_t> begin_mj, std::optional<std::uint64_t> end_mj);
// RAPL: the counter wraps at max_energy_range_uj back to 0; a decrease is one wrap (a window is
// far shorter than a wrap period, ~60 s at the very least). Without a known range a decrease is
// a reset.
CounterDifference rapl_counter_difference(std::optional<std::uint64_t> begin_uj, std::optional<std::uint64_t> end_uj,
                                          std::optional<std::uint64_t> max_range_uj);

// Further iterations needed so that a window of `done` iterations at `seconds_per_iteration`
// reaches `min_seconds` (0 when already long enough). The caller runs them inside the same window.
std::int64_t extra_iterations_needed(std::int64_t done, double seconds_per_iteration,
                                     double min_seconds = kMinSteadyWindowSeconds);

// One measured window of one GPU.
struct WindowEnergy {
  std::optional<double> joules;
  double seconds = 0;
  std::int64_t iterations = 0;
  bool counter_reset = false;
  std::string method;  // how the figure was obtained, stored next to it
  std::optional<double> joules_per_iteration() const;
  std::optional<double> watts() const;
};

// The window from two counter readings the caller took (after synchronising the device); `what`
// names the window in the method string, e.g. "steady window".
WindowEnergy nvml_window(std::optional<std::uint64_t> begin_mj, std::optional<std::uint64_t> end_mj, double seconds,
                         std::int64_t iterations, const std::string& what = "steady window");

// Convenience for the trainer: reads the counter and the steady clock at start() and stop().
class CounterWindow {
 public:
  explicit CounterWindow(GpuPowerReader& reader) : reader_(reader) {}
  void start();
  WindowEnergy stop(std::int64_t iterations, const std::string& what = "steady window");
  double elapsed_seconds() const;  // since start(), to decide whether to extend

 private:
  GpuPowerReader& reader_;
  std::optional<std::uint64_t> begin_mj_;
  double begin_s_ = 0;
};

// --- measure: phases -------------------------------------------------------------------------
struct PhaseLoop {  // one phase-isolated loop: total joules over `iterations` in `seconds`
  double joules = 0;
  std::int64_t iterations = 0;
  double seconds = 0;
};
struct PhaseRepeat {           // one repeat of the three loops
  PhaseLoop forward;           // forward only
  PhaseLoop forward_backward;  // forward + backward
  PhaseLoop full_step;         // forward + backward + allreduce + update
};
struct Stat {
  double mean = 0, stddev = 0, min = 0, max = 0;  // stddev: sample (n-1), 0 for one repeat
  int n = 0;
};
Stat make_stat(const std::vector<double>& values);

struct PhaseEnergy {  // joules per iteration
  Stat forward, backward, update_allreduce, full_step;
  std::string method;
  int pooled_repeats = 0;  // repeats whose loops were out of order and pooled (see below)
};
// Least-squares non-decreasing fit of `v` in place (pool-adjacent-violators, equal weights);
// returns whether any values were pooled.
bool pool_adjacent_violators(std::vector<double>& v);
// Per repeat, the per-iteration costs of the forward, forward+backward and full-step loops are
// fitted non-decreasing (pool_adjacent_violators) before the differences are taken, so every phase
// is >= 0 even on a loaded machine. Throws RuntimeError when a loop is shorter than min_seconds or
// has no iterations: its counter difference would be dominated by the 100 ms update period, so
// the caller must lengthen it.
PhaseEnergy derive_phase_energy(const std::vector<PhaseRepeat>& repeats, double min_seconds = kMinPhaseWindowSeconds);

}  // namespace cnnscale::measure
