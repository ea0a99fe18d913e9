// The host side of CUPTI's range profiler (cupti_metric_host.hpp).
#ifdef CNNSCALE_HAVE_CUPTI
#include "backend/cuda/cupti_metric_host.hpp"

#include <cupti_range_profiler.h>
#include <fmt/ranges.h>

#include <utility>

#include "backend/cuda/cupti_check.hpp"
#include "core/error.hpp"

namespace cnnscale::cuda {

std::string cupti_text(CUptiResult status) {
  const char* text = nullptr;
  return cuptiGetResultString(status, &text) == CUPTI_SUCCESS && text != nullptr ? text : "unknown CUPTI status";
}

std::vector<const char*> c_names(const std::vector<std::string>& names) {
  std::vector<const char*> out;
  for (const std::string& n : names) out.push_back(n.c_str());
  return out;
}

ProfilerHost::ProfilerHost(const std::string& chip, std::vector<uint8_t> availability)
    : chip_(chip), availability_(std::move(availability)) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_Initialize_Params);
  p.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  p.pChipName = chip_.c_str();
  p.pCounterAvailabilityImage = availability_.empty() ? nullptr : availability_.data();
  const CUptiResult status = cuptiProfilerHostInitialize(&p);
  if (status == CUPTI_ERROR_INVALID_CHIP_NAME)
    throw_config("hardware metrics refused: this CUPTI cannot profile chip '{}' ({})", chip_, cupti_text(status));
  CUPTI_CHECK(status);
  host_ = p.pHostObject;
}

ProfilerHost::~ProfilerHost() {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
  p.pHostObject = host_;
  cuptiProfilerHostDeinitialize(&p);  // nothing to do about a failure while unwinding
}

void ProfilerHost::check_metrics(const std::vector<std::string>& metrics) const {
  std::vector<std::string> unknown;
  std::string text;
  for (const std::string& m : metrics) {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_GetMetricProperties_Params);
    p.pHostObject = host_;
    p.pMetricName = m.c_str();
    const CUptiResult status = cuptiProfilerHostGetMetricProperties(&p);
    if (status == CUPTI_ERROR_INVALID_METRIC_NAME) {
      unknown.push_back(m);
      text = cupti_text(status);
      continue;
    }
    CUPTI_CHECK(status);
  }
  if (!unknown.empty())
    throw_config("hardware metrics: CUPTI has no metric {} for chip {} ({})", fmt::join(unknown, ", "), chip_, text);
}

std::vector<uint8_t> ProfilerHost::config_image(const std::vector<std::string>& metrics) {
  check_metrics(metrics);
  std::vector<const char*> names = c_names(metrics);
  auto add = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
  add.pHostObject = host_;
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  CUPTI_CHECK(cuptiProfilerHostConfigAddMetrics(&add));
  auto size = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
  size.pHostObject = host_;
  CUPTI_CHECK(cuptiProfilerHostGetConfigImageSize(&size));
  std::vector<uint8_t> image(size.configImageSize);
  auto get = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
  get.pHostObject = host_;
  get.configImageSize = image.size();
  get.pConfigImage = image.data();
  CUPTI_CHECK(cuptiProfilerHostGetConfigImage(&get));
  return image;
}

std::map<std::string, double> ProfilerHost::evaluate(std::vector<uint8_t>& counter_data, size_t range,
                                                     const std::vector<std::string>& metrics) const {
  std::vector<const char*> names = c_names(metrics);
  std::vector<double> values(metrics.size());
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
  p.pHostObject = host_;
  p.pCounterDataImage = counter_data.data();
  p.counterDataImageSize = counter_data.size();
  p.rangeIndex = range;
  p.ppMetricNames = names.data();
  p.numMetrics = names.size();
  p.pMetricValues = values.data();
  CUPTI_CHECK(cuptiProfilerHostEvaluateToGpuValues(&p));
  std::map<std::string, double> out;
  for (size_t i = 0; i < metrics.size(); ++i) out.emplace(metrics[i], values[i]);
  return out;
}

int64_t passes_of(std::vector<uint8_t>& config_image) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
  p.configImageSize = config_image.size();
  p.pConfigImage = config_image.data();
  CUPTI_CHECK(cuptiProfilerHostGetNumOfPasses(&p));
  return static_cast<int64_t>(p.numOfPasses);
}

// In auto-range mode CUPTI names a range by its kernel's place in the launch order ("0", "1", ...).
// The name is CUPTI's allocation, which the header says is the caller's to free but not with what;
// a few bytes a range are left rather than freed with the wrong allocator.
std::string range_name(const std::vector<uint8_t>& counter_data, size_t range) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Host_GetRangeName_Params);
  p.pCounterDataImage = counter_data.data();
  p.counterDataImageSize = counter_data.size();
  p.rangeIndex = range;
  p.delimiter = "/";
  CUPTI_CHECK(cuptiProfilerHostGetRangeName(&p));
  return p.pRangeName != nullptr ? p.pRangeName : std::to_string(range);
}

size_t ranges_in(const std::vector<uint8_t>& counter_data) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
  p.pCounterDataImage = counter_data.data();
  p.counterDataImageSize = counter_data.size();
  CUPTI_CHECK(cuptiRangeProfilerGetCounterDataInfo(&p));
  return p.numTotalRanges;
}

}  // namespace cnnscale::cuda

#endif
