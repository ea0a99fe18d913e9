// What every cnnscale benchmark shares, below the layers that run them (measure/'s kernel benches,
// parallel/'s bench allreduce): per-call statistics of timed repeats, and the mean power of a busy
// device over a window cut at two updates of its cumulative energy counter. Pure arithmetic and
// clocks: the device is reached through hooks, so fakes test it.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cnnscale {

struct TimingStats {
  double median_ms = 0, min_ms = 0, max_ms = 0;  // per call
  int repeats = 0;
  int64_t calls_per_repeat = 0;
};

// The median of `values` (the mean of the middle two for an even count); `values` is not empty.
double median_of(std::vector<double> values);

// Per-call statistics of repeats that each timed `calls` calls.
TimingStats timing_stats(std::vector<double> repeat_ms, int64_t calls);

// Mean power of a device kept busy by a kernel, over a window between two updates of its cumulative
// energy counter (NVML refreshes it about every 100 ms: a window cut at arbitrary instants carries up
// to one refresh period of error at each end; cut at the updates, only the polling interval).
struct PowerWindow {
  std::optional<double> watts;
  double seconds = 0;  // between the two counter updates
  double joules = 0;   // counter difference over them
  int64_t calls = 0;   // calls enqueued while the window was measured
  std::string method;  // how the figure was obtained (or why there is none)
};

struct PowerWindowHooks {
  std::function<std::optional<double>()> counter_joules;  // cumulative; nullopt: unreadable
  std::function<void(int64_t)> enqueue;                   // enqueue n calls, returns at once
  std::function<double()> now_seconds;                    // a steady clock
  std::function<void(double)> sleep_seconds;
  std::function<void()> drain;  // wait for the enqueued calls
};

// Keeps about `lead_seconds` of calls (at `seconds_per_call`) enqueued ahead of the clock; after
// `settle_seconds` of that (a GPU's power controller lets a burst after idle draw more than its limit
// for a few hundred milliseconds: a window there reads the transient, not the kernel's steady power),
// waits for one counter update, then for the first update at least `window_seconds` later. No update
// within `update_timeout_seconds`: no figure (the counter is frozen or absent).
PowerWindow measure_power_window(const PowerWindowHooks& hooks, double seconds_per_call, double window_seconds,
                                 double settle_seconds = 0.0, double lead_seconds = 0.05,
                                 double update_timeout_seconds = 0.5, double poll_seconds = 0.0005);

// The same quantity for work that must run as a whole, in a count fixed beforehand (collectives:
// every rank runs the same number of allreduces, whatever its own counter does): `work` runs on the
// calling thread while a second thread samples `counter` every `poll_seconds`; the window runs from
// the first update at least `settle_seconds` after the work began to the last update seen before it
// ended, so both ends fall on updates while the device was busy. Fewer than two such updates: no
// figure. `counter` must be callable from another thread (NVML's is).
PowerWindow power_while(const std::function<std::optional<double>()>& counter, const std::function<void()>& work,
                        double settle_seconds, double poll_seconds = 0.0005);

}  // namespace cnnscale
