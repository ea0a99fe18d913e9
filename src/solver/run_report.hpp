// A train run's results across ranks: rank 0's assembly of the job's RunResults and summary figures
// from every rank's report (rank_report.hpp): job = slowest rank's time, energy summed over every
// GPU, with how each figure was obtained.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/measure_mode.hpp"
#include "io/run_results.hpp"
#include "solver/rank_report.hpp"
#include "solver/solver_config.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

// Energy of one rank's reading for the run's device: the GPU counter on GPU runs; on CPU runs the
// host's RAPL package + DRAM (only on the rank that reads its host), else null.
std::optional<double> device_joules(const measure::EnergyReading& reading, bool gpu_run);

// The run as the Trainer and the command saw it, for the summary.
struct RunDescription {
  std::string experiment, run_id, config_text;
  std::string net, data, device_kind;  // device_kind: "cpu" or "gpu"
  int64_t world_size = 1, global_batch = 0, seed = 0, iterations = 0, iterations_per_epoch = 0;
  int64_t train_samples = 0;
  double run_epochs = 0;
  bool overlap = true;
  bool one_rank_exchange = false;  // --one-rank-exchange took effect
  std::string allreduce_algo;  // empty: not applicable (one rank, MPI)
  std::string precision = "fp32";        // core/precision.hpp's names
  std::string allreduce_dtype = "fp32";  // the gradient exchange's dtype: fp32, bf16 or fp16
  // NCCL's CTA policy and the stream priority of the exchange: "default", or what differs from it
  // ("efficiency", "low priority", "efficiency, low priority").
  std::string allreduce_tuning = "default";
  double forward_macs = 0;     // per sample
  MeasureMode measure = MeasureMode::Steady;
  double phase_window = 1.0;
  std::vector<EpochRecord> epochs;
  std::vector<std::string> tags;
  std::optional<std::string> cuda_version, cudnn_version, nccl_version, mpi_version;
  std::optional<std::string> nccl_env;      // SystemInfo::nccl_env
  std::optional<std::string> engine_cache;  // SystemInfo::engine_cache
  SolverConfig solver;                      // the solver's settings, recorded as typed figures
};

// The solver's settings as the summary's typed figures (lr, lr_scaled, momentum, ..., RunSummary).
void put_solver_figures(RunSummary& summary, const SolverConfig& solver, int64_t global_batch);

// `ranks`: every rank's report, in rank order.
RunResults assemble_run_results(const RunDescription& run, const TrainResult& rank0_result,
                                const std::vector<RankReport>& ranks, int64_t whole_epochs, int64_t whole_samples);

}  // namespace cnnscale
