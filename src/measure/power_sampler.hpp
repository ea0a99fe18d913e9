// Background power sampler: one thread polls every GPU reader at a fixed rate (default 10 Hz) and
// keeps the samples in memory for the results file's /power group, plus the trapezoid integral of
// sampled power used to cross-check the energy counter.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "measure/nvml.hpp"

namespace cnnscale::measure {

struct PowerSample {
  double t_s = 0;                         // steady clock, seconds since the run start given to the sampler
  std::optional<double> power_w;          // instant
  std::optional<double> average_power_w;  // driver's 1 s average
  std::optional<std::uint64_t> energy_mj;
  std::optional<double> sm_clock_mhz;
  std::optional<double> temperature_c;
};

class PowerSampler {
 public:
  using Clock = std::chrono::steady_clock;
  // The readers must outlive the sampler. rate_hz > 0.
  PowerSampler(std::vector<GpuPowerReader*> readers, double rate_hz = 10.0, Clock::time_point run_start = Clock::now());
  ~PowerSampler();  // stops the thread
  PowerSampler(const PowerSampler&) = delete;
  PowerSampler& operator=(const PowerSampler&) = delete;

  void start();  // no-op when running
  void stop();   // joins; samples stay available
  bool running() const { return thread_.joinable(); }
  void sample_now();     // one sample of every reader, on the caller's thread
  double now_s() const;  // the sampler's time base
  std::size_t gpus() const { return readers_.size(); }
  std::vector<PowerSample> samples(std::size_t gpu) const;  // copy, safe while running
  // The newest sample of one GPU (none yet: nullopt), without copying the rest and without reading
  // the GPU: what a caller on the training thread may ask for while the device idles.
  std::optional<PowerSample> latest(std::size_t gpu) const;

 private:
  void loop();
  std::vector<GpuPowerReader*> readers_;
  std::chrono::nanoseconds period_;
  Clock::time_point run_start_;
  mutable std::mutex mutex_;  // guards samples_ and stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::vector<PowerSample>> samples_;
  std::thread thread_;
};

// Joules by the trapezoid rule over the samples' power within [t0, t1] (linearly interpolated at
// the ends when samples bracket them; otherwise clipped to the sampled span). `average` picks the
// average-power field instead of the instant one. Null with fewer than two usable samples.
std::optional<double> integrate_power_j(const std::vector<PowerSample>& samples, double t0, double t1,
                                        bool average = false);

// The GPU's mean power (W) between two samples' energy-counter readings: null when either has no
// reading, the counter went back (a driver reset) or no time passed. The counter moves about every
// 100 ms, so this is rough over spans of that order.
std::optional<double> counter_watts(const PowerSample& from, const PowerSample& to);

// |a - b| / |b|: the cross-check is counter joules vs sampled integral within 0.10.
double relative_difference(double a, double b);

}  // namespace cnnscale::measure
