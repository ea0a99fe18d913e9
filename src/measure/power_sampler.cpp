// Power sampler thread and the trapezoid integral of its samples.
#include "measure/power_sampler.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace cnnscale::measure {

PowerSampler::PowerSampler(std::vector<GpuPowerReader*> readers, double rate_hz, Clock::time_point run_start)
    : readers_(std::move(readers)), run_start_(run_start), samples_(readers_.size()) {
  CNNSCALE_CHECK(rate_hz > 0, "power sampling rate {} Hz must be positive", rate_hz);
  period_ = std::chrono::nanoseconds(static_cast<std::int64_t>(1e9 / rate_hz));
}

PowerSampler::~PowerSampler() {
  stop();
}

double PowerSampler::now_s() const {
  return std::chrono::duration<double>(Clock::now() - run_start_).count();
}

void PowerSampler::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void PowerSampler::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PowerSampler::sample_now() {
  // Read outside the lock: an NVML call takes up to milliseconds and samples() must not wait on it.
  std::vector<PowerSample> taken;
  taken.reserve(readers_.size());
  for (auto* r : readers_) {
    PowerSample s;
    s.t_s = now_s();
    s.power_w = r->power_w();
    s.average_power_w = r->average_power_w();
    s.energy_mj = r->energy_mj();
    s.sm_clock_mhz = r->sm_clock_mhz();
    s.temperature_c = r->temperature_c();
    taken.push_back(s);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < taken.size(); ++i) samples_[i].push_back(taken[i]);
}

void PowerSampler::loop() {
  // Ticks on a fixed grid from the start (not "period after the last sample") so the rate does not
  // drift by the NVML call time.
  auto next = Clock::now();
  for (;;) {
    sample_now();
    next += period_;
    std::unique_lock<std::mutex> lock(mutex_);
    if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
  }
}

std::vector<PowerSample> PowerSampler::samples(std::size_t gpu) const {
  std::lock_guard<std::mutex> lock(mutex_);
  CNNSCALE_CHECK(gpu < samples_.size(), "GPU {} of {}", gpu, samples_.size());
  return samples_[gpu];
}

std::optional<PowerSample> PowerSampler::latest(std::size_t gpu) const {
  std::lock_guard<std::mutex> lock(mutex_);
  CNNSCALE_CHECK(gpu < samples_.size(), "GPU {} of {}", gpu, samples_.size());
  if (samples_[gpu].empty()) return std::nullopt;
  return samples_[gpu].back();
}

std::optional<double> counter_watts(const PowerSample& from, const PowerSample& to) {
  if (!from.energy_mj || !to.energy_mj || *to.energy_mj < *from.energy_mj || to.t_s <= from.t_s) return std::nullopt;
  return static_cast<double>(*to.energy_mj - *from.energy_mj) * 1e-3 / (to.t_s - from.t_s);
}

std::optional<double> integrate_power_j(const std::vector<PowerSample>& samples, double t0, double t1, bool average) {
  std::vector<std::pair<double, double>> pts;  // (t, W), in time order as sampled
  for (const auto& s : samples) {
    const auto& p = average ? s.average_power_w : s.power_w;
    if (p) pts.emplace_back(s.t_s, *p);
  }
  if (pts.size() < 2 || t1 <= t0) return std::nullopt;
  auto at = [&](double t) {  // linear interpolation inside the sampled span
    for (std::size_t i = 1; i < pts.size(); ++i)
      if (pts[i].first >= t) {
        auto [ta, pa] = pts[i - 1];
        auto [tb, pb] = pts[i];
        return tb > ta ? pa + (pb - pa) * (t - ta) / (tb - ta) : pb;
      }
    return pts.back().second;
  };
  double lo = std::max(t0, pts.front().first), hi = std::min(t1, pts.back().first);
  if (hi <= lo) return std::nullopt;
  std::vector<std::pair<double, double>> w{{lo, at(lo)}};
  for (const auto& p : pts)
    if (p.first > lo && p.first < hi) w.push_back(p);
  w.emplace_back(hi, at(hi));
  double j = 0;
  for (std::size_t i = 1; i < w.size(); ++i) j += 0.5 * (w[i].second + w[i - 1].second) * (w[i].first - w[i - 1].first);
  return j;
}

double relative_difference(double a, double b) {
  if (b == 0) return a == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::abs(a - b) / std::abs(b);
}

}  // namespace cnnscale::measure
