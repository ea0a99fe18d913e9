// EnergyMonitor: everything one rank measures about energy during a run: its GPU's energy counter
// (NVML, or nothing), its host's RAPL package/DRAM counters (read by one rank per host only), and
// the background power sampler. Windows are made of segments (timed spans between pauses for
// evaluation or checkpoints), so the joules cover exactly the iterations they are divided by.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "measure/nvml.hpp"
#include "measure/power_sampler.hpp"
#include "measure/rapl.hpp"

namespace cnnscale::measure {

// One closed window of one rank.
struct EnergyReading {
  std::int64_t iterations = 0;
  double seconds = 0;                 // summed over segments
  int segments = 0;
  std::optional<double> gpu_joules;   // NVML counter differences; null without NVML or on a reset
  std::optional<double> gpu_sampled_joules;  // trapezoid integral of sampled power (cross-check)
  std::optional<double> cpu_package_joules;  // RAPL, this host; null when unread or unreadable
  std::optional<double> cpu_dram_joules;
  bool counter_reset = false;
  std::string gpu_method, cpu_method;
};

class EnergyMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // `gpu` may be an UnavailableGpuReader (CPU runs, no NVML); `rapl` null when this rank does not
  // read its host's counters. sample_hz <= 0 disables the sampler.
  EnergyMonitor(std::unique_ptr<GpuPowerReader> gpu, std::unique_ptr<RaplReader> rapl, double sample_hz,
                Clock::time_point run_start = Clock::now());
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  GpuPowerReader& gpu() { return *gpu_; }
  bool gpu_available() const { return gpu_->available(); }
  bool rapl_available() const { return rapl_ && rapl_->available(); }
  // True when a window can yield any joules (a GPU counter or RAPL): windows need a minimum length.
  bool measures_energy() const { return gpu_available() || rapl_available(); }
  const PowerSampler* sampler() const { return sampler_.get(); }
  double sample_hz() const { return sample_hz_; }

  void start_sampling();  // no-op without a sampler or a GPU
  void stop_sampling();

  // A window: begin, any number of pause/resume, end. Call each right after a device
  // synchronisation so that the counters bracket exactly the work in between.
  void begin(const std::string& what);
  void pause();
  void resume();
  bool open() const { return open_; }
  bool running() const { return running_; }
  double elapsed_seconds() const;  // segments so far, including a running one
  EnergyReading end(std::int64_t iterations);

 private:
  struct Segment {
    double t0 = 0, t1 = 0;  // sampler time base (seconds since run_start)
    std::optional<std::uint64_t> mj0, mj1;
    RaplSnapshot rapl0, rapl1;
  };
  double now_s() const;
  std::unique_ptr<GpuPowerReader> gpu_;
  std::unique_ptr<RaplReader> rapl_;
  double sample_hz_ = 0;
  Clock::time_point run_start_;
  std::unique_ptr<PowerSampler> sampler_;
  bool open_ = false, running_ = false;
  std::string what_;
  std::vector<Segment> segments_;
};

}  // namespace cnnscale::measure
