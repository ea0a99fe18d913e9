// A train run's results across ranks: each rank's report (identity, timeline, power samples,
// energy windows) as JSON, and rank 0's assembly of the job's RunResults and summary figures
// (job = slowest rank's time, energy summed over every GPU), with how each figure was obtained.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/run_results.hpp"
#include "measure/energy_monitor.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

// What rank 0 needs from every rank, as JSON (NaN written as null).
nlohmann::json make_rank_report(int rank, const std::string& host, const Device& device,
                                measure::EnergyMonitor& energy, const TrainResult& result, int64_t local_batch);

// The run as the Trainer and the command saw it, for the summary.
struct RunDescription {
  std::string experiment, run_id, config_text;
  std::string net, data, device_kind;  // device_kind: "cpu" or "gpu"
  int64_t world_size = 1, global_batch = 0, seed = 0, iterations = 0, iterations_per_epoch = 0;
  int64_t train_samples = 0;
  double run_epochs = 0;
  bool overlap = true;
  std::string allreduce_algo;  // empty: not applicable (one rank, MPI)
  double forward_macs = 0;     // per sample
  MeasureMode measure = MeasureMode::Steady;
  double phase_window = 1.0;
  std::vector<EpochRecord> epochs;
  std::vector<std::string> tags;
  std::optional<std::string> cuda_version, cudnn_version, nccl_version, mpi_version;
};

RunResults assemble_run_results(const RunDescription& run, const TrainResult& rank0_result,
                                const std::vector<nlohmann::json>& ranks, int64_t whole_epochs, int64_t whole_samples);

}  // namespace cnnscale
