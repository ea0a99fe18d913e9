// `cnnscale infer --results` files: one JSON object per run under ROOT/<experiment>/infer/, written
// without ever exposing or replacing a half-written file; and the report's inference table, the
// offline figures per (network, device, precision, batch, ranks), mean ± std over the files that
// repeat one.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiment/report_table.hpp"

namespace cnnscale::report {

inline constexpr const char* kInferFormat = "cnnscale-infer-1";

std::string infer_results_dir(const std::string& root, const std::string& experiment);  // ROOT/<experiment>/infer
// ConfigError naming the folder unless it exists (or can be made) and a file can be created in it.
void prepare_infer_results_dir(const std::string& dir);
// `run` (infer's --json object) with "format" added, at the first free name <dir>/<stem>[-k].json.
// numbered false: <dir>/<stem>.json only (a sweep's run id), a RuntimeError when it exists.
std::string write_infer_file(const std::string& dir, const std::string& stem, nlohmann::json run, bool numbered = true);

// One offline batch size of one file. A job of several ranks (mpirun) is the job's: images/s,
// watts and so energy summed over its ranks; latency and peak memory rank 0's.
struct InferRow {
  std::string net, device, precision;
  int64_t batch = 0, ranks = 1;
  double images_per_s = 0, p50_s = 0, p99_s = 0;
  double joules_per_image = 0, images_per_joule = 0;  // NaN when not measured
  double peak_memory_bytes = 0;
};
struct InferFile {
  std::string path;
  std::string scenario;        // "offline" rows are tabled; other scenarios are counted
  std::vector<InferRow> rows;  // offline only
};
// Every */infer/*.json under `results_dir` (files of other formats are skipped, counted in
// `skipped`; a broken file of ours is a ConfigError naming it).
std::vector<InferFile> find_infer_results(const std::string& results_dir, int* skipped = nullptr);
Table infer_table(const std::vector<InferFile>& files);

}  // namespace cnnscale::report
