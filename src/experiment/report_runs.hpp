// runs.csv: one row per run of a whole results root, for pandas and spreadsheets: every training
// run (its recorded settings as config.<key>, every summary figure and tag) and every inference file
// (one row per offline batch size, one per scenario file: its fields as written, nested ones as
// <object>.<field>), with empty cells where a column does not apply.
#pragma once
#include <string>
#include <vector>

#include "experiment/report_data.hpp"
#include "experiment/report_infer.hpp"

namespace cnnscale::report {

inline constexpr const char* kRunsCsvFile = "runs.csv";

// The leading columns, then config.* and the other columns in name order.
std::string runs_csv(const std::string& results_dir, const std::vector<RunRecord>& runs,
                     const std::vector<InferFile>& inferences);

}  // namespace cnnscale::report
