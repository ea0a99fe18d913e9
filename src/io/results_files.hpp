// The parts of a run folder, each written by its own file of io/ (run.h5, summary.json,
// summary.csv); results_writer.cpp puts them together under the partial-folder protocol.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/run_results.hpp"

namespace cnnscale {

// Called after each part of run.h5 ("h5:config", ...); a throw aborts the write.
using ResultsStep = std::function<void(std::string_view step)>;

// run.h5 at `path` (results_h5_write.cpp).
void write_results_h5(const std::string& path, const RunResults& results, const ResultsStep& step);
// The whole summary.json object (results_json.cpp).
nlohmann::json summary_json(const RunResults& results);
// summary.csv: the header line and the run's row (results_csv.cpp).
std::string summary_csv_text(const RunResults& results);

}  // namespace cnnscale
