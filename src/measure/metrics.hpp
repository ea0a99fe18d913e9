// Derived metrics of a measured window, per rank and for the job (energy summed over all GPUs, time
// of the slowest rank): s/batch, samples/s, J/batch, W, J/sample, whole-training time and energy,
// GFLOPS (2 x forward MACs x 3 per training sample), GFLOPS/W and EDP. Missing energy stays null.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cnnscale::measure {

// The workload a window ran: per rank (local batch) or for the job (global batch).
struct Workload {
  std::int64_t samples_per_batch = 0;
  std::optional<double> forward_macs_per_sample;  // from the net's shape inference; null: no GFLOPS
  std::int64_t iterations_per_epoch = 0;          // dataset size / global batch, as the study counts
  std::int64_t epochs = 0;                        // for the "whole training" columns
};

// One rank's steady window (warm-up excluded).
struct MeasuredWindow {
  std::int64_t iterations = 0;
  double seconds = 0;
  std::optional<double> joules;  // this rank's GPU; null when NVML is unavailable
  std::string energy_method;
};

struct Metrics {
  std::int64_t iterations = 0;
  double seconds = 0;
  double seconds_per_batch = 0;
  double samples_per_second = 0;
  std::optional<double> joules;
  std::optional<double> joules_per_batch;
  std::optional<double> watts;
  std::optional<double> joules_per_sample;
  double training_seconds = 0;  // seconds_per_batch x iterations_per_epoch x epochs
  std::optional<double> training_joules;
  std::optional<double> gflops;  // achieved training GFLOP/s
  std::optional<double> gflops_per_watt;
  std::optional<double> edp_batch_js;     // joules_per_batch x seconds_per_batch
  std::optional<double> edp_training_js;  // training_joules x training_seconds
  Workload workload;
  std::string energy_method;
  std::string time_method;
  nlohmann::json to_json() const;
};

// Throughput of `iterations` batches of `samples_per_batch` in `seconds` (0 without time): the one
// formula of samples/s, for the summary figures and the job line of `cnnscale train`.
double samples_per_second(std::int64_t samples_per_batch, std::int64_t iterations, double seconds);

// Throws RuntimeError on a window without iterations or time.
Metrics compute_metrics(const MeasuredWindow& window, const Workload& workload);
// The job: the same iterations on every rank; time of the slowest rank, joules summed over the
// ranks' GPUs (null if any rank has none). `job_workload` carries the global batch.
Metrics compute_job_metrics(const std::vector<MeasuredWindow>& ranks, const Workload& job_workload);

}  // namespace cnnscale::measure
