// runs.csv: one row per run of a whole results root, for pandas and spreadsheets, a `product` column
// saying which: every training run (its recorded settings as config.<key>, every summary figure and
// tag), every inference file (one row per offline batch size, one per scenario file), every bench
// allreduce file (one row per message size, its figures as rows.<field>), every kernel benchmark
// (one row: its settings; each variant's figures stay in its cases.csv) and every calibration (one
// row: settings and accuracy.<field>), every kernel profile (one row: its settings and step figures;
// its kernels, owners and groups stay in their CSVs); fields as written, nested ones as <object>.<field>, with
// empty cells where a column does not apply.
#pragma once
#include <string>
#include <vector>

#include "experiment/report_data.hpp"
#include "experiment/report_allreduce.hpp"
#include "experiment/report_infer.hpp"
#include "experiment/report_kernel_profiles.hpp"
#include "experiment/report_kernels.hpp"

namespace cnnscale::report {

inline constexpr const char* kRunsCsvFile = "runs.csv";

// The leading columns, then config.* and the other columns in name order.
std::string runs_csv(const std::string& results_dir, const std::vector<RunRecord>& runs,
                     const std::vector<InferFile>& inferences, const std::vector<AllreduceBenchFile>& allreduces = {},
                     const std::vector<KernelBenchFile>& kernels = {},
                     const std::vector<CalibrationFile>& calibrations = {},
                     const std::vector<KernelProfileFile>& profiles = {});

}  // namespace cnnscale::report
