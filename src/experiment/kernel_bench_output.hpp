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
// A benchmark's result folder PARENT/<stem> (-1, -2, ... when taken): summary.json (`j`), cases.csv
// and cases.h5 (the `columns` of j["rows"], one row / dataset entry per case; the summary's text
// and number attributes on the HDF5 root), written under a hidden temporary name and renamed when complete;
// returns its path. Shared by the kernel benches and bench allreduce.
std::string write_bench_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                               const std::vector<std::string>& columns, const std::vector<std::string>& text_attributes,
                               const std::vector<std::string>& number_attributes);
// The folder RESULTS/<experiment>/bench/<kind>-<precision>[-nhwc]-<stamp>; returns its path.
std::string write_kernel_bench_folder(const std::string& results_root, const std::string& experiment,
                                      const measure::KernelBenchResult& r, const nlohmann::json& j,
                                      const std::string& utc_stamp);

}  // namespace cnnscale::report
