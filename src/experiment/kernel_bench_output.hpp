// What `bench gemm|conv|rnn|spmm` prints and saves: the per-problem table, and the run as the results
// schema's struct (io/kernel_bench_results.hpp), which writes the JSON object and the result folder.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "io/kernel_bench_results.hpp"
#include "measure/kernel_bench_suite.hpp"

namespace cnnscale::report {

std::string kernel_bench_table(const measure::KernelBenchResult& r);
KernelBenchSummary kernel_bench_summary(const measure::KernelBenchResult& r, const std::string& utc_time,
                                        const std::string& host);
// kernel_bench_summary's JSON object.
nlohmann::json kernel_bench_json(const measure::KernelBenchResult& r, const std::string& utc_time,
                                 const std::string& host);

}  // namespace cnnscale::report
