// EnergyMonitor: segment bookkeeping and the per-window sums of counter differences.
#include "measure/energy_monitor.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "measure/energy_window.hpp"

namespace cnnscale::measure {

EnergyMonitor::EnergyMonitor(std::unique_ptr<GpuPowerReader> gpu, std::unique_ptr<RaplReader> rapl, double sample_hz,
                             Clock::time_point run_start)
    : gpu_(std::move(gpu)), rapl_(std::move(rapl)), sample_hz_(sample_hz), run_start_(run_start) {
  CNNSCALE_CHECK(gpu_ != nullptr, "energy monitor without a GPU reader");
  if (sample_hz_ > 0 && gpu_->available())
    sampler_ = std::make_unique<PowerSampler>(std::vector<GpuPowerReader*>{gpu_.get()}, sample_hz_, run_start_);
}

EnergyMonitor::~EnergyMonitor() = default;

void EnergyMonitor::start_sampling() {
  if (sampler_) sampler_->start();
}

void EnergyMonitor::stop_sampling() {
  if (sampler_) sampler_->stop();
}

double EnergyMonitor::now_s() const {
  return std::chrono::duration<double>(Clock::now() - run_start_).count();
}

void EnergyMonitor::begin(const std::string& what) {
  CNNSCALE_CHECK(!open_, "energy window '{}' begun while '{}' is open", what, what_);
  open_ = true;
  what_ = what;
  segments_.clear();
  resume();
}

void EnergyMonitor::resume() {
  CNNSCALE_CHECK(open_ && !running_, "energy window: resume without a paused window");
  running_ = true;
  Segment s;
  s.mj0 = gpu_->energy_mj();
  if (rapl_) s.rapl0 = rapl_->read();
  s.t0 = now_s();
  segments_.push_back(std::move(s));
}

void EnergyMonitor::pause() {
  CNNSCALE_CHECK(open_ && running_, "energy window: pause without a running window");
  Segment& s = segments_.back();
  s.t1 = now_s();
  s.mj1 = gpu_->energy_mj();
  if (rapl_) s.rapl1 = rapl_->read();
  running_ = false;
}

double EnergyMonitor::elapsed_seconds() const {
  double total = 0;
  for (const Segment& s : segments_) total += (running_ && &s == &segments_.back() ? now_s() : s.t1) - s.t0;
  return total;
}

EnergyReading EnergyMonitor::end(std::int64_t iterations) {
  if (running_) pause();
  CNNSCALE_CHECK(open_, "energy window: end without a window");
  open_ = false;
  EnergyReading r;
  r.iterations = iterations;
  r.segments = static_cast<int>(segments_.size());
  std::optional<double> gpu = 0.0, package = 0.0, dram = 0.0, sampled = 0.0;
  std::vector<PowerSample> samples;
  if (sampler_) {
    sampler_->sample_now();  // a sample at the window's end, so the integral reaches it
    samples = sampler_->samples(0);
  } else {
    sampled.reset();
  }
  for (const Segment& s : segments_) {
    r.seconds += s.t1 - s.t0;
    CounterDifference d = nvml_counter_difference(s.mj0, s.mj1);
    r.counter_reset = r.counter_reset || d.counter_reset;
    if (gpu && d.joules)
      *gpu += *d.joules;
    else
      gpu.reset();
    if (rapl_) {
      RaplEnergy e = rapl_->difference(s.rapl0, s.rapl1);
      if (package && e.package_j) *package += *e.package_j; else package.reset();
      if (dram && e.dram_j) *dram += *e.dram_j; else dram.reset();
    }
    if (sampled) {
      std::optional<double> j = integrate_power_j(samples, s.t0, s.t1);
      if (j) *sampled += *j; else sampled.reset();
    }
  }
  if (!rapl_) package.reset(), dram.reset();
  r.gpu_joules = gpu;
  r.cpu_package_joules = package;
  r.cpu_dram_joules = dram;
  r.gpu_sampled_joules = sampled;
  const std::string span = fmt::format("{} of {} iterations ({:.3f} s in {} segment{})", what_, iterations, r.seconds,
                                       r.segments, r.segments == 1 ? "" : "s");
  if (gpu)
    r.gpu_method = "nvml total-energy counter differences over the " + span;
  else if (r.counter_reset)
    r.gpu_method = "null: the nvml energy counter went backwards (driver reset) during the " + span;
  else
    r.gpu_method = "null: no GPU energy counter (" + gpu_->description() + ")";
  if (package)
    r.cpu_method = "RAPL package" + std::string(dram ? " and DRAM" : "") + " counter differences (this host) over the " + span;
  else
    r.cpu_method = rapl_ ? "null: RAPL counters not readable" : "null: RAPL read by another rank of this host, or off";
  return r;
}

}  // namespace cnnscale::measure
