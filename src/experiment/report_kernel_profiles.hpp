// Kernel profile folders (`time --kernels`, `bench conv --kernels`) in `cnnscale report`: the top
// kernels of each layer type or algorithm (Li et al.'s Fig. 4 in words), the registers, shared
// memory and occupancy of those kernels (their Table II) and, where metrics were measured, the
// runtime-weighted metrics per layer type or algorithm with the share of time each covers (their
// Fig. 6, drawn by scripts/report_plots_kernel_profile.py).
#pragma once
#include <string>
#include <vector>

#include "experiment/report_table.hpp"
#include "io/kernel_profile_results.hpp"

namespace cnnscale::report {

struct KernelProfileFile {
  std::string path;        // the folder's summary.json
  KernelProfileSummary s;  // as read through its schema
};

// Every <results>/*/kernels/*/summary.json, sorted by path; unreadable ones (or ones the schema
// refuses) are skipped with a warning naming them.
std::vector<KernelProfileFile> find_kernel_profiles(const std::string& results_dir);

inline constexpr const char* kKernelProfileMetricsTable = "kernel_profile_metrics";

// Per profile, group and pass: its `top` longest kernels (the layers' kernels of one name and block
// merged), their share of the group's kernel time and time per step.
Table kernel_profile_top_table(const std::vector<KernelProfileFile>& files, size_t top = 3);
// The same kernels' launch resources: threads per block, registers per thread, static and dynamic
// shared memory per block, theoretical occupancy and its limiter.
Table kernel_profile_resources_table(const std::vector<KernelProfileFile>& files, size_t top = 3);
// Per profile with metrics, group and pass: share of the step's kernel time and each measured
// metric with the share of the group's time it covers; no rows when no profile has metrics.
Table kernel_profile_metrics_table(const std::vector<KernelProfileFile>& files);

}  // namespace cnnscale::report
