// measure_batch and find_max_batch: the timing and energy windows of one batch size.
#include "infer/batch_measure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "solver/run_report.hpp"

namespace cnnscale::infer {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

EnergyWindow::EnergyWindow(measure::EnergyMonitor* energy, const char* what, bool gpu_run)
    : energy_(energy && energy->measures_energy() && !energy->open() ? energy : nullptr), gpu_run_(gpu_run) {
  if (energy_) energy_->begin(what);
}

WindowEnergy EnergyWindow::close(int64_t iterations, double samples) {
  WindowEnergy e;
  if (!energy_) return e;
  const measure::EnergyReading r = energy_->end(iterations);
  const std::optional<double> j = device_joules(r, gpu_run_);
  if (!j || !(r.seconds > 0) || !(samples > 0)) return e;
  e.source = gpu_run_ ? "gpu" : "cpu";
  e.joules = *j;
  e.watts = *j / r.seconds;
  e.joules_per_sample = *j / samples;
  e.samples_per_joule = samples / *j;
  return e;
}

void check_options(const BatchMeasureOptions& o) {
  if (o.warmup < 0) throw_config("--warmup must be >= 0, got {}", o.warmup);
  if (!(o.min_seconds > 0)) throw_config("--seconds must be > 0, got {}", o.min_seconds);
  if (!(o.latency_seconds >= 0)) throw_config("--latency-seconds must be >= 0, got {}", o.latency_seconds);
  if (o.min_latency_batches < 1 || o.max_latency_batches < o.min_latency_batches)
    throw_config("latency batches: need 1 <= min ({}) <= max ({})", o.min_latency_batches, o.max_latency_batches);
}

BatchFigures measure_batch(InferenceEngine& engine, int64_t batch, measure::EnergyMonitor* energy,
                           const BatchMeasureOptions& o) {
  check_options(o);
  Backend& backend = engine.backend();
  // This batch size alone in memory, so its peak is its own.
  engine.release_nets();
  backend.reset_peak_memory();
  BatchFigures f;
  f.batch = batch;
  for (int64_t i = 0; i < std::max<int64_t>(o.warmup, 1); ++i) engine.run(batch);
  engine.synchronize();

  // Calibration: a few synchronised batches give the window's batch count, so the window is one
  // uninterrupted queue of work between two synchronisations (nothing of the host in it).
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) engine.run(batch);
  engine.synchronize();
  const double per_batch = std::max(seconds_since(t0) / 3, 1e-7);
  f.window_batches = std::max<int64_t>(3, static_cast<int64_t>(std::ceil(o.min_seconds / per_batch)));

  if (o.before_window) o.before_window();
  EnergyWindow window(energy, "inference window", !backend.device().is_cpu());
  t0 = Clock::now();
  for (int64_t i = 0; i < f.window_batches; ++i) engine.run(batch);
  if (energy && energy->gpu_available()) f.sm_clock_mhz = energy->gpu().sm_clock_mhz();  // the queue is running
  engine.synchronize();
  f.window_seconds = seconds_since(t0);
  const double images = static_cast<double>(f.window_batches * batch);
  f.images_per_s = images / f.window_seconds;
  const WindowEnergy e = window.close(f.window_batches, images);
  f.joules = e.joules;
  f.watts = e.watts;
  f.joules_per_image = e.joules_per_sample;
  f.images_per_joule = e.samples_per_joule;
  f.energy_source = e.source;

  // Latency: each batch between two synchronisations, as a request that finds the device idle.
  std::vector<double> latencies;
  const auto start = Clock::now();
  while (static_cast<int64_t>(latencies.size()) < o.max_latency_batches &&
         (static_cast<int64_t>(latencies.size()) < o.min_latency_batches || seconds_since(start) < o.latency_seconds)) {
    const auto b0 = Clock::now();
    engine.run(batch);
    engine.synchronize();
    latencies.push_back(seconds_since(b0));
  }
  f.latency = latency_stats(std::move(latencies));
  f.peak_memory_bytes = backend.memory_stats().peak_bytes;
  return f;
}

namespace {
// Peak backend memory of `batch`'s net alone after one forward.
int64_t peak_of(InferenceEngine& engine, int64_t batch) {
  engine.release_nets();
  engine.backend().reset_peak_memory();
  engine.run(batch);
  engine.synchronize();
  return engine.backend().memory_stats().peak_bytes;
}
}  // namespace

MaxBatch find_max_batch(InferenceEngine& engine, int64_t limit_bytes) {
  if (limit_bytes <= 0) throw_config("memory limit must be > 0 bytes, got {}", limit_bytes);
  MaxBatch m;
  m.limit_bytes = limit_bytes;
  engine.release_nets();
  engine.backend().reset_peak_memory();
  const int64_t base = engine.backend().memory_stats().current_bytes;  // the weights' source net
  const int64_t small = peak_of(engine, 1), large = peak_of(engine, 9);
  if (small <= 0 || large <= small)
    throw_runtime("--batch max: the {} backend keeps no account of its memory, so no batch can be fitted to it",
                  engine.backend().name());
  m.bytes_per_sample = (large - small + 7) / 8;
  m.fixed_bytes = std::max<int64_t>(small - m.bytes_per_sample, base);
  if (m.fixed_bytes + m.bytes_per_sample > limit_bytes)
    throw_config("--batch max: one sample needs {} bytes with the network's {} fixed, over the limit of {}",
                 m.bytes_per_sample, m.fixed_bytes, limit_bytes);
  int64_t batch = std::max<int64_t>(1, (limit_bytes - m.fixed_bytes) / m.bytes_per_sample);
  for (int attempt = 0; attempt < 20; ++attempt) {
    try {
      const int64_t peak = peak_of(engine, batch);
      if (peak <= limit_bytes) {
        m.batch = batch;
        engine.release_nets();
        return m;
      }
      log::debug("--batch max: batch {} peaks at {} bytes, over {}", batch, peak, limit_bytes);
    } catch (const RuntimeError& e) {  // the backend could not allocate it
      log::debug("--batch max: batch {} does not fit: {}", batch, e.what());
    }
    engine.release_nets();
    if (batch == 1) break;
    batch = std::max<int64_t>(1, batch * 9 / 10);
  }
  throw_runtime("--batch max: no batch size fits in {} bytes of {} memory", limit_bytes, engine.backend().name());
}

}  // namespace cnnscale::infer
