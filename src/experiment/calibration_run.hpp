// What `cnnscale calibrate` does, below the command: int8 post-training calibration of a trained
// network on real data (infer/calibrate_run.hpp), with the accuracy int8 would cost on the test set,
// simulated and executed, and the result written where asked. The command parses and prints.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/calibrate_run.hpp"
#include "io/calibration_results.hpp"
#include "job/job.hpp"

namespace cnnscale {

struct CalibrateRequest {
  std::string checkpoint, net, data, data_dir, device, method, out;
  int64_t samples = 1000, batch = 100, test_samples = -1;
  double percentile = 99.99;
  std::string results_root;  // "": the result is not saved for `report`
  std::string experiment;    // the folder under results_root
};

struct CalibrationRun {
  CalibrationResult result;  // the file's fields but provenance and settings (the command's)
  infer::CalibrationTable table;
  std::string train_set;  // the calibration samples' data set
  std::optional<infer::AccuracyPair> cost;  // fp32 and simulated int8 top-1, with a test set
  std::optional<double> executed_top1;      // the table executed by the backend's int8 kernels
  std::vector<std::string> executed_layers;
};

// ConfigError for everything that can be checked before anything is loaded; makes the results
// folder where one is given, so a run never fails at its end for want of it.
void check_calibrate_request(const CalibrateRequest& r);

// Loads the network and data, checks them against each other, calibrates on `job`'s device and,
// with a test set, measures what int8 costs.
CalibrationRun run_calibration(const CalibrateRequest& r, Job& job);

// Writes `result` to r.out (atomically) and, with a results root, as a new file of the results
// folder (stamped `time`). Returns the latter's path ("" without a results root).
std::string save_calibration(const CalibrateRequest& r, CalibrationResult& result);

}  // namespace cnnscale
