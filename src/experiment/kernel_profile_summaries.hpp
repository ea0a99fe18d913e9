// The kernel profiles of `time --kernels` and `bench conv --kernels` as the results schema's struct:
// the CUPTI values turned into cnnscale's metric keys (measure/kernel_metric_set) and the context
// each command knows (what a group is, the unprofiled times, what profiling cost).
#pragma once
#include <string>
#include <vector>

#include "experiment/kernel_bench_kernels.hpp"
#include "experiment/kernel_profile_output.hpp"
#include "experiment/kernel_profile_run.hpp"

namespace cnnscale {

// Where and when, as every result names them.
struct KernelProfileOrigin {
  std::string device;  // the backend's description
  std::string host;
  std::string utc_time;
};

// Our metric values per kernel from the profiler's CUPTI values.
measure::KernelMetricValues derive_metric_values(const measure::KernelMetricValues& raw,
                                                 const std::vector<std::string>& keys);

KernelProfileSummary network_kernel_summary(const NetworkKernelProfile& p, const TimeRequest& request,
                                            const std::vector<std::string>& metric_keys,
                                            const KernelProfileOrigin& origin);

// `batch`: the problems' common batch, 0 where they differ (the summary's batch is then null).
KernelProfileSummary bench_kernel_summary(const KernelBenchKernels& k, const std::string& precision,
                                          const std::string& layout, int64_t batch,
                                          const std::vector<std::string>& metric_keys,
                                          const KernelProfileOrigin& origin);

}  // namespace cnnscale
