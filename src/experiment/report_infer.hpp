// The report's inference table: the offline figures of `cnnscale infer --results` files (read through
// io/infer_results.hpp) per (network, device, precision, batch, ranks), mean ± std over the files that
// repeat one; and the int8 accuracy table of `cnnscale calibrate --results` files.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiment/report_table.hpp"
#include "io/calibration_results.hpp"
#include "io/infer_results.hpp"

namespace cnnscale::report {

// One offline batch size of one file. A job of several ranks (mpirun) is the job's: images/s,
// watts and so energy summed over its ranks; latency and peak memory rank 0's.
struct InferRow {
  std::string net, device, precision;
  int64_t batch = 0, ranks = 1;
  double images_per_s = 0, p50_s = 0, p99_s = 0;
  double joules_per_image = 0, images_per_joule = 0;  // NaN when not measured
  double peak_memory_bytes = 0;
  // The values of infer's settings that group runs (those with a report label, in table order) as
  // texts: the file's recorded settings, the default in files written before settings were
  // recorded, "" where the setting does not apply (a GPU's only on a CPU run).
  std::vector<std::string> settings;
};
struct InferFile {
  std::string path;
  std::string scenario;        // "offline" rows are tabled; other scenarios are counted
  std::vector<InferRow> rows;  // offline only
  InferResult result;         // the whole file, as read
};
// Every */infer/*.json under `results_dir` (files of other formats are skipped, counted in
// `skipped`; a broken file of ours is a ConfigError naming it).
std::vector<InferFile> find_infer_results(const std::string& results_dir, int* skipped = nullptr);
Table infer_table(const std::vector<InferFile>& files);

// `cnnscale calibrate --results` files: the calibration table and its accuracy cost, one JSON object
// per run under ROOT/<experiment>/calibration/ (written as infer's files are; io/calibration_results.hpp).
std::string calibration_results_dir(const std::string& root, const std::string& experiment);
struct CalibrationFile {
  std::string path, net, checkpoint, method, test_set;
  double percentile = 0;  // NaN unless method percentile
  int64_t samples = 0, test_samples = 0;
  double fp32_top1 = 0, int8_top1 = 0;  // NaN without an accuracy (no test set)
  double int8_executed_top1 = 0;        // the table run as int8 kernels; NaN where not recorded
  std::string executed_on;              // its device ("" where not recorded)
  CalibrationResult result;             // the whole file, as read
};
// Every */calibration/*.json under `results_dir` of our format (others skipped; a broken one of ours
// is a ConfigError naming it).
std::vector<CalibrationFile> find_calibrations(const std::string& results_dir);
// int8's accuracy cost: fp32, simulated int8 and executed int8 top-1 per network, checkpoint, test
// set, method and calibration samples, mean ± std over the files that repeat one.
Table int8_accuracy_table(const std::vector<CalibrationFile>& files);

}  // namespace cnnscale::report
