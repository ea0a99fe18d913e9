// What `bench gemm|conv|spmm` prints and saves: the per-problem table, the JSON object of every row, and
// the result folder (summary.json, cases.csv, cases.h5) under RESULTS/<experiment>/bench/.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "measure/kernel_bench_suite.hpp"

namespace cnnscale::report {

std::string kernel_bench_table(const measure::KernelBenchResult& r);
nlohmann::json kernel_bench_json(const measure::KernelBenchResult& r, const std::string& utc_time,
                                 const std::string& host);
// The folder RESULTS/<experiment>/bench/<kind>-<precision>[-nhwc]-<stamp>, written under a temporary
// name and renamed when complete; returns its path.
std::string write_kernel_bench_folder(const std::string& results_root, const std::string& experiment,
                                      const measure::KernelBenchResult& r, const nlohmann::json& j,
                                      const std::string& utc_stamp);

}  // namespace cnnscale::report
