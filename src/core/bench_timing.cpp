// Timing statistics and the counter-aligned power window (see bench_timing.hpp).
#include "core/bench_timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <system_error>
#include <thread>

#include "core/error.hpp"

namespace cnnscale {

namespace {
// The window from counter reading (t0, e0) to (t1, e1): its length, energy and, where both make
// sense (a counter that went backwards was reset), its mean power.
void between(PowerWindow& w, double t0, double e0, double t1, double e1) {
  w.seconds = t1 - t0;
  w.joules = e1 - e0;
  if (w.seconds > 0 && w.joules >= 0) w.watts = w.joules / w.seconds;
}
}  // namespace

double median_of(std::vector<double> values) {
  if (values.empty()) throw_runtime("median_of: no values");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

TimingStats timing_stats(std::vector<double> repeat_ms, int64_t calls) {
  if (repeat_ms.empty() || calls < 1) throw_runtime("timing_stats: no repeats");
  for (double& v : repeat_ms) v /= static_cast<double>(calls);
  std::sort(repeat_ms.begin(), repeat_ms.end());
  const size_t n = repeat_ms.size();
  TimingStats s;
  s.median_ms = median_of(repeat_ms);
  s.min_ms = repeat_ms.front();
  s.max_ms = repeat_ms.back();
  s.repeats = static_cast<int>(n);
  s.calls_per_repeat = calls;
  return s;
}

PowerWindow measure_power_window(const PowerWindowHooks& h, double seconds_per_call, double window_seconds,
                                 double settle_seconds, double lead_seconds, double update_timeout_seconds,
                                 double poll_seconds) {
  PowerWindow w;
  if (!h.counter_joules || !h.counter_joules()) {
    w.method = "no energy counter readable";
    return w;
  }
  const double per_call = std::max(seconds_per_call, 1e-7);
  double queued_until = h.now_seconds();  // when the enqueued calls will have run, as estimated
  // At most 256 calls (and about 5 ms of work) per enqueue, and at most 512 calls queued ahead: a
  // long batch of tiny kernels would fill the launch queue and block the host, and a counter update
  // seen after the block would be timed late by as much.
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(0.005 / per_call)), 1, 256);
  const double ahead = std::min(lead_seconds, 512.0 * per_call);
  auto keep_busy = [&] {
    const double now = h.now_seconds();
    if (queued_until < now) queued_until = now;
    while (queued_until - now < ahead) {
      h.enqueue(chunk);
      w.calls += chunk;
      queued_until += static_cast<double>(chunk) * per_call;
    }
  };
  // Waits, feeding the device, for the first update of the counter at or after `not_before` (from
  // `last`, the value last seen); the time and value of that update.
  auto next_update = [&](double last, double not_before) -> std::optional<std::pair<double, double>> {
    const double give_up = std::max(h.now_seconds(), not_before) + update_timeout_seconds;
    for (;;) {
      keep_busy();
      const double t = h.now_seconds();
      const std::optional<double> e = h.counter_joules();
      if (!e) return std::nullopt;
      if (*e != last) {
        if (t >= not_before) return std::make_pair(t, *e);
        last = *e;
      }
      if (t > give_up) return std::nullopt;
      h.sleep_seconds(poll_seconds);
    }
  };
  const double settled = h.now_seconds() + settle_seconds;
  do {
    keep_busy();
    h.sleep_seconds(poll_seconds);
  } while (h.now_seconds() < settled);
  const std::optional<double> start = h.counter_joules();
  if (!start) {
    h.drain();
    w.method = "the energy counter became unreadable";
    return w;
  }
  std::optional<std::pair<double, double>> begin = next_update(*start, 0);
  // The first update only starts the window; the device is already busy with the calls queued.
  std::optional<std::pair<double, double>> end;
  if (begin) end = next_update(begin->second, begin->first + window_seconds);
  h.drain();
  if (!begin || !end) {
    w.method = "the energy counter did not update within the window";
    return w;
  }
  between(w, begin->first, begin->second, end->first, end->second);
  w.method = fmt::format(
      "mean power between two updates of the energy counter at least {:.2f} s apart, after {:.2f} s of back-to-back "
      "calls to settle the power controller, the device busy throughout",
      window_seconds, settle_seconds);
  return w;
}

PowerWindow power_while(const std::function<std::optional<double>()>& counter, const std::function<void()>& work,
                        double settle_seconds, double poll_seconds) {
  PowerWindow w;
  const std::optional<double> first = counter ? counter() : std::nullopt;
  if (!first) {
    work();
    w.method = "no energy counter readable";
    return w;
  }
  auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  struct Update {
    double seconds, joules;
  };
  std::vector<Update> updates;  // written by the poller only, read after it joined
  std::atomic<bool> done{false}, unreadable{false};
  const double start = now();
  auto sample = [&]() -> std::optional<double> {
    try {
      return counter();
    } catch (...) {  // a counter that throws is one that cannot be read
      return std::nullopt;
    }
  };
  std::thread poller;
  try {
    poller = std::thread([&] {
      // Its own first reading is the baseline: an update between `first` and the thread's start
      // would otherwise be stamped with the thread's first time, late by its start-up.
      std::optional<double> last = sample();
      while (last && !done.load(std::memory_order_acquire)) {
        const double t = now();
        const std::optional<double> e = sample();
        if (e && *e != *last) updates.push_back({t, *e});
        last = e;
        std::this_thread::sleep_for(std::chrono::duration<double>(poll_seconds));
      }
      if (!last) unreadable.store(true);
    });
  } catch (const std::system_error&) {
    // No thread, no figure; the work still runs (a collective's peers wait for it).
    work();
    w.method = "the counter's sampling thread could not be started";
    return w;
  }
  double finished = 0;
  try {
    work();
    finished = now();
  } catch (...) {
    done.store(true, std::memory_order_release);
    poller.join();
    throw;
  }
  done.store(true, std::memory_order_release);
  poller.join();
  if (unreadable.load()) {
    w.method = "the energy counter became unreadable";
    return w;
  }
  const Update* begin = nullptr;
  const Update* end = nullptr;
  for (const Update& u : updates) {
    if (u.seconds > finished) break;
    if (!begin && u.seconds >= start + settle_seconds)
      begin = &u;
    else if (begin)
      end = &u;
  }
  if (!begin || !end) {
    w.method = "the energy counter did not update twice while the work ran";
    return w;
  }
  between(w, begin->seconds, begin->joules, end->seconds, end->joules);
  w.method = fmt::format(
      "mean power between the first update of the energy counter {:.2f} s or more into the work and its last update "
      "before the work ended, the counter sampled every {:.1f} ms by a second thread",
      settle_seconds, poll_seconds * 1e3);
  return w;
}

}  // namespace cnnscale
