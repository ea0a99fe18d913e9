// The figures of one (network, batch size, precision): throughput over a window long enough for the
// energy counter, the latency of batches each timed alone, joules per image, watts, the SM clock
// and peak memory; and the search for the largest batch that fits in a memory budget.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "infer/inference_engine.hpp"
#include "infer/latency.hpp"
#include "measure/energy_monitor.hpp"

namespace cnnscale::infer {

// Energy over one window of inference work: joules of the run's device (solver's device_joules),
// watts, and per sample (null where nothing measures).
struct WindowEnergy {
  std::optional<double> joules, watts, joules_per_sample, samples_per_joule;
  std::string source;  // "gpu" (NVML), "cpu" (RAPL package + DRAM of the host) or ""
};

// Opens an energy window at construction, right after a synchronisation (a no-op without a monitor
// that measures); close() ends it after the next one.
class EnergyWindow {
 public:
  EnergyWindow(measure::EnergyMonitor* energy, const char* what, bool gpu_run);
  WindowEnergy close(int64_t iterations, double samples);

 private:
  measure::EnergyMonitor* energy_;
  bool gpu_run_;
};

struct BatchMeasureOptions {
  int64_t warmup = 3;             // untimed batches first (allocation, algorithm search, clocks)
  double min_seconds = 3.0;       // the throughput window: NVML's energy counter moves every ~100 ms
  double latency_seconds = 1.0;   // batches timed alone, one after another, for about this long
  int64_t min_latency_batches = 20;
  int64_t max_latency_batches = 2000;
  // Called right before the throughput window opens: under mpirun a barrier, so that the ranks'
  // windows overlap and their images/s and watts may be added up.
  std::function<void()> before_window;
};

struct BatchFigures {
  int64_t batch = 0;
  int64_t window_batches = 0;  // back-to-back batches in the throughput window
  double window_seconds = 0;
  double images_per_s = 0;
  LatencyStats latency;  // of single batches, each between two synchronisations
  // From the energy window (null where nothing measures energy, e.g. a CPU without RAPL).
  std::optional<double> joules, watts, joules_per_image, images_per_joule;
  std::string energy_source;  // "gpu" (NVML), "cpu" (RAPL package + DRAM) or ""
  std::optional<double> sm_clock_mhz;  // read while the window's batches run
  int64_t peak_memory_bytes = 0;       // this batch size's nets and workspaces (Backend::memory_stats)
};

void check_options(const BatchMeasureOptions& o);  // ConfigError naming the flag
// Measures `batch` on `engine`: warm-up, then the throughput window inside one energy window
// (`energy` may be null), then the single-batch latencies.
BatchFigures measure_batch(InferenceEngine& engine, int64_t batch, measure::EnergyMonitor* energy,
                           const BatchMeasureOptions& o);

struct MaxBatch {
  int64_t batch = 0;
  int64_t limit_bytes = 0;                    // the budget it fits in
  int64_t fixed_bytes = 0, bytes_per_sample = 0;  // the memory model it was predicted from
};
// The largest batch whose nets fit in `limit_bytes` of backend memory: peak memory measured at two
// batch sizes gives fixed + per-sample bytes; the prediction is then built to confirm it, stepping
// down by 10% while the backend cannot allocate it.
MaxBatch find_max_batch(InferenceEngine& engine, int64_t limit_bytes);

}  // namespace cnnscale::infer
