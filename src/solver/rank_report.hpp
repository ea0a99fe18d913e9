// What each rank of a train run tells rank 0 at its end: identity, timeline, power samples and
// energy windows, as one struct. It travels between ranks as JSON text; to_json/from_json's schema
// tables are the only code that knows its keys, so rank 0 reads it by field.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "io/run_results.hpp"
#include "measure/energy_monitor.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

struct RankGpu {
  std::string name, uuid;
  std::optional<std::string> driver;
  double power_limit_w = kMissing;
  int64_t sm_count = 0, memory_bytes = 0;
  double peak_sm_clock_mhz = kMissing;
  std::optional<std::string> compute_capability;
};

using PhaseSeconds = std::array<double, kTimelinePhaseCount>;  // TimelinePhase order; NaN: not measured

struct RankReport {
  int64_t rank = 0;
  std::string host;
  int64_t local_batch = 0;
  std::optional<RankGpu> gpu;           // GPU ranks
  std::optional<int64_t> blas_threads;  // CPU ranks: its BLAS thread pool
  // The timeline: one row per recorded iteration, warm-up included.
  std::vector<int64_t> iteration;
  std::vector<uint8_t> warmup;  // 1: warm-up
  std::vector<PhaseSeconds> seconds;
  PhaseSeconds phase_means{};  // over the steady iterations
  int64_t phase_iterations = 0;
  std::optional<PowerSeries> power;  // its GPU's samples, when sampled
  bool reads_rapl = false;           // the rank that reads its host's RAPL counters
  std::optional<measure::EnergyReading> window;  // the steady window; nullopt: none
  int64_t extension_iterations = 0;
  std::vector<PhaseLoopRecord> loops;  // --measure phases: three loops per repeat
  // Unequal ranks: the GPU power waiting is charged at (NaN: not measured), the SMs of its GPU
  // partition (0: the whole GPU, or a CPU rank) and its emulated straggler factor (1: none).
  double wait_watts = kMissing;
  int64_t sms = 0;
  double slowdown = 1.0;
  int64_t peak_memory_bytes = 0;  // the most its backend held at once (TrainResult::peak_memory_bytes)
};

RankReport make_rank_report(int rank, const std::string& host, const Device& device, measure::EnergyMonitor& energy,
                            const TrainResult& result, int64_t local_batch);

// The wire format (NaN and unknown values as null), through schema tables (rank_report_json.cpp):
// from_json throws ConfigError naming the key path of a field that is missing or of the wrong type.
void to_json(nlohmann::json& j, const RankReport& r);
void from_json(const nlohmann::json& j, RankReport& r);

}  // namespace cnnscale
