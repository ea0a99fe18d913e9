// Hardware counters per kernel from CUPTI's range profiler (cupti_range_profiler.h with the profiler
// host API of cupti_profiler_host.h): one range per kernel launch (auto ranges), each kernel
// replayed by CUPTI as often as the metric set needs (kernel replay), so the work runs once. Which
// metrics to ask for and what they mean is measure/kernel_metric_set's business; this is the glue.
// No CUPTI header here: a build without CUPTI compiles the same declarations, which refuse.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernel_trace.hpp"

namespace cnnscale {
class CudaBackend;
}  // namespace cnnscale

namespace cnnscale::cuda {

// Whether this build has CUPTI's profiler (CNNSCALE_HAVE_CUPTI).
bool have_cupti_profiler();

// The replay passes CUPTI needs to collect `metrics` on `chip` ("GH100"), from the profiler host
// alone: no GPU needed. ConfigError for a metric the chip does not have (naming it, with CUPTI's
// text) or a build without CUPTI.
int64_t cupti_metric_passes(const std::string& chip, const std::vector<std::string>& metrics);

// A profiler on `backend`'s device and context (its green context on an SM partition). Checks on
// creation that the device, driver and permissions allow counters, so a run refuses (ConfigError,
// one line) before its work; the backend must outlive it.
std::unique_ptr<KernelMetricProfiler> make_cupti_metric_profiler(CudaBackend& backend);

}  // namespace cnnscale::cuda
