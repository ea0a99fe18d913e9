// `bench gemm|conv` result folders in `cnnscale report`: a summary row per benchmark (problems,
// variants, best and worst problem by share of the peak, how often the fastest variant is not the
// lowest-energy one), the per-problem table DeepBench users read, and Li et al.'s sweeps in long
// form (time and memory per algorithm against the swept parameter) for their figures.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "experiment/report_table.hpp"
#include "io/kernel_bench_results.hpp"

namespace cnnscale::report {

struct KernelBenchFile {
  std::string path;      // the folder's summary.json
  KernelBenchSummary s;  // as read through its schema
};

// Every <results>/*/bench/*/summary.json of a kernel benchmark, sorted by path; unreadable ones
// (or ones the schema refuses) are skipped with a warning naming them.
// Each published summary.json of a result folder under RESULTS/<experiment>/<kind>/ below
// results_dir (hidden .tmp- folders are still being written), sorted by path, handed to `read`; a
// file `read` refuses is skipped with a warning naming it. For the kinds of kernel results.
void for_each_result_summary(const std::string& results_dir, const std::string& kind,
                             const std::function<void(const std::string& path)>& read);

std::vector<KernelBenchFile> find_kernel_benches(const std::string& results_dir);

Table kernel_summary_table(const std::vector<KernelBenchFile>& files);
// The fastest variant of each problem (and pass) of the files that are not sweeps.
Table kernel_cases_table(const std::vector<KernelBenchFile>& files);
// One row per (sweep, value, pass, algorithm): median time and memory (operands + workspace); no
// rows when no file is a sweep.
Table conv_sweep_table(const std::vector<KernelBenchFile>& files);

}  // namespace cnnscale::report
