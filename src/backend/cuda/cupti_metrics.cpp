// CUPTI's range profiler behind KernelMetricProfiler. The sequence is the one CUPTI documents for
// its range_profiling sample: the host side (cupti_profiler_host.h) checks the metric names for the
// chip, builds the config image that schedules their counters into passes and later evaluates the
// decoded counter data; the target side (cupti_range_profiler.h) enables profiling on the context,
// sizes the counter data for a number of ranges, runs the work between start and stop, and decodes.
// With auto ranges every kernel launch is a range, and each launch is synchronous (kernels of
// concurrent streams are profiled one at a time). With kernel replay CUPTI saves the memory a kernel
// touches, runs it once per pass and restores it, so the work itself runs once and sees no
// difference; with user replay the work runs once per pass, between a start and a stop. Every CUPTI call goes through
// CUPTI_CHECK, which names the call and CUPTI's text, and turns the statuses that mean "no counters here" into
// ConfigError (cupti_check.hpp).
#include "backend/cuda/cupti_metrics.hpp"

#include "backend/cuda/cuda_backend.hpp"
#include "core/error.hpp"

#ifdef CNNSCALE_HAVE_CUPTI
#include <cudaTypedefs.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <chrono>
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cupti_check.hpp"
#include "backend/cuda/cupti_metric_host.hpp"
#include "core/log.hpp"

namespace cnnscale::cuda {
namespace {

// The driver API through the runtime's entry points, as device_context.cpp reaches it: nothing in
// cnnscale links libcuda, so machines without a driver still start the program.
template <typename Fn>
Fn driver_entry(const char* symbol, unsigned int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) throw_runtime("the CUDA driver has no {}", symbol);
  return reinterpret_cast<Fn>(fn);
}

// The context the range profiler attaches to: the one current after the backend made its own
// current (its green context on an SM partition, the device's primary context otherwise).
CUcontext current_context() {
  CUcontext ctx = nullptr;
  const CUresult status = driver_entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000)(&ctx);
  if (status != CUDA_SUCCESS || ctx == nullptr)
    throw_runtime("cuCtxGetCurrent: no current CUDA context to profile (CUresult {})", static_cast<int>(status));
  return ctx;
}

CUdevice driver_device(int ordinal) {
  CUdevice device = 0;
  const CUresult status = driver_entry<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000)(&device, ordinal);
  if (status != CUDA_SUCCESS) throw_runtime("cuDeviceGet({}) failed (CUresult {})", ordinal, static_cast<int>(status));
  return device;
}

// cuptiProfilerInitialize for the time of one use: it hooks the driver, which the timed runs
// between a profiler's creation and its profile() should not carry.
class ProfilerInterface {
 public:
  ProfilerInterface() {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_Initialize_Params);
    CUPTI_CHECK(cuptiProfilerInitialize(&p));
  }
  ~ProfilerInterface() {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_DeInitialize_Params);
    cuptiProfilerDeInitialize(&p);  // nothing to do about a failure while unwinding
  }
  ProfilerInterface(const ProfilerInterface&) = delete;
  ProfilerInterface& operator=(const ProfilerInterface&) = delete;
};

// Why CUPTI cannot profile this device, from cuptiProfilerDeviceSupported; "" when it can.
std::string unsupported_reason(int device) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_DeviceSupported_Params);
  p.cuDevice = driver_device(device);
  p.api = CUPTI_PROFILER_RANGE_PROFILING;
  CUPTI_CHECK(cuptiProfilerDeviceSupported(&p));
  if (p.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return "";
  const auto unsupported = [](CUpti_Profiler_Support_Level l) { return l != CUPTI_PROFILER_CONFIGURATION_SUPPORTED; };
  if (unsupported(p.architecture)) return "its architecture has no range profiler (compute capability 7.5 or newer)";
  if (p.vGpu == CUPTI_PROFILER_CONFIGURATION_DISABLED)
    return "it is a virtual GPU whose hypervisor has not enabled profiling";
  if (unsupported(p.vGpu)) return "it is a virtual GPU, which CUPTI cannot profile";
  if (unsupported(p.confidentialCompute)) return "confidential computing is on";
  if (unsupported(p.cmp)) return "it is a crypto-mining processor (CMP)";
  if (unsupported(p.sli)) return "it is part of an SLI group";
  if (unsupported(p.wsl)) return "CUPTI cannot profile under this WSL";
  return "CUPTI gives no reason";
}

std::string chip_name(int device) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Device_GetChipName_Params);
  p.deviceIndex = static_cast<size_t>(device);
  CUPTI_CHECK(cuptiDeviceGetChipName(&p));
  if (p.pChipName == nullptr) throw_runtime("cuptiDeviceGetChipName: no chip name for gpu:{}", device);
  return p.pChipName;
}

// Which counters the context may read now (another profiling session, or the device-level counters
// a driver setting withholds, take some away): the host schedules only those.
std::vector<uint8_t> counter_availability(CUcontext ctx) {
  auto p = CNNSCALE_CUPTI_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
  p.ctx = ctx;
  CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&p));
  std::vector<uint8_t> image(p.counterAvailabilityImageSize);
  p.pCounterAvailabilityImage = image.data();
  CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&p));
  image.resize(p.counterAvailabilityImageSize);
  return image;
}

// Range profiling enabled on a context, from cuptiRangeProfilerEnable to cuptiRangeProfilerDisable.
class RangeSession {
 public:
  explicit RangeSession(CUcontext ctx) {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_Enable_Params);
    p.ctx = ctx;
    CUPTI_CHECK(cuptiRangeProfilerEnable(&p));
    object_ = p.pRangeProfilerObject;
  }
  ~RangeSession() {
    if (started_) {
      auto stop = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
      stop.pRangeProfilerObject = object_;
      cuptiRangeProfilerStop(&stop);  // only on an error path, which is already being reported
    }
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_Disable_Params);
    p.pRangeProfilerObject = object_;
    cuptiRangeProfilerDisable(&p);
  }
  RangeSession(const RangeSession&) = delete;
  RangeSession& operator=(const RangeSession&) = delete;

  // Counter data for `max_ranges` ranges of `metrics`, initialised.
  std::vector<uint8_t> counter_data(const std::vector<std::string>& metrics, size_t max_ranges) {
    std::vector<const char*> names = c_names(metrics);
    auto size = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
    size.pRangeProfilerObject = object_;
    size.pMetricNames = names.data();
    size.numMetrics = names.size();
    size.maxNumOfRanges = max_ranges;
    size.maxNumRangeTreeNodes = static_cast<uint32_t>(max_ranges);
    CUPTI_CHECK(cuptiRangeProfilerGetCounterDataSize(&size));
    std::vector<uint8_t> data(size.counterDataSize);
    auto init = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
    init.pRangeProfilerObject = object_;
    init.counterDataSize = data.size();
    init.pCounterData = data.data();
    CUPTI_CHECK(cuptiRangeProfilerCounterDataImageInitialize(&init));
    return data;
  }

  void set_config(const std::vector<uint8_t>& config_image, std::vector<uint8_t>& counter_data, size_t max_ranges,
                  MetricReplay replay) {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
    p.pRangeProfilerObject = object_;
    p.configSize = config_image.size();
    p.pConfig = config_image.data();
    p.counterDataImageSize = counter_data.size();
    p.pCounterDataImage = counter_data.data();
    p.range = CUPTI_AutoRange;
    p.replayMode = replay == MetricReplay::Kernel ? CUPTI_KernelReplay : CUPTI_UserReplay;
    p.maxRangesPerPass = max_ranges;
    p.numNestingLevels = 1;  // what auto ranges require
    p.minNestingLevel = 1;
    p.passIndex = 0;
    p.targetNestingLevel = 1;
    CUPTI_CHECK(cuptiRangeProfilerSetConfig(&p));
  }

  void start() {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_Start_Params);
    p.pRangeProfilerObject = object_;
    CUPTI_CHECK(cuptiRangeProfilerStart(&p));
    started_ = true;
  }

  // Whether every pass has been submitted.
  bool stop() {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
    p.pRangeProfilerObject = object_;
    started_ = false;
    CUPTI_CHECK(cuptiRangeProfilerStop(&p));
    return p.isAllPassSubmitted != 0;
  }

  // Decodes into the counter data given to set_config; returns the ranges it had no room for.
  size_t decode() {
    auto p = CNNSCALE_CUPTI_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
    p.pRangeProfilerObject = object_;
    CUPTI_CHECK(cuptiRangeProfilerDecodeData(&p));
    return p.numOfRangeDropped;
  }

 private:
  CUpti_RangeProfiler_Object* object_ = nullptr;
  bool started_ = false;
};

class CuptiMetricProfiler final : public KernelMetricProfiler {
 public:
  explicit CuptiMetricProfiler(CudaBackend& backend) : backend_(backend) {
    backend_.context()->make_current();
    const ProfilerInterface interface;
    const std::string reason = unsupported_reason(backend_.device_index());
    if (!reason.empty())
      throw_config("hardware metrics refused: gpu:{} ({}) cannot be profiled: {}", backend_.device_index(),
                   backend_.device_name(), reason);
    chip_ = chip_name(backend_.device_index());
    // Enabling the range profiler is where the driver checks the permission to read counters: a
    // run without it refuses here, before its work.
    const CUcontext ctx = current_context();
    counter_availability(ctx);
    const RangeSession probe(ctx);
  }

  KernelMetricResult profile(const std::vector<std::string>& metrics, const std::function<void()>& work,
                             MetricReplay replay, int64_t max_kernels) override {
    if (metrics.empty()) throw_config("hardware metrics: no metric to profile");
    if (max_kernels < 1 || max_kernels >= std::numeric_limits<uint32_t>::max())
      throw_config("hardware metrics: room for {} kernels asked; from 1 to {} can be had", max_kernels,
                   std::numeric_limits<uint32_t>::max() - 1);
    // One range more than allowed: under kernel replay CUPTI stops recording at the room it has
    // without counting what it dropped, so a range in the spare slot is how an overrun shows.
    const auto max_ranges = static_cast<size_t>(max_kernels) + 1;
    backend_.context()->make_current();
    // Kernel replay saves and restores the device memory a kernel could reach before each pass; the
    // blocks the stream-ordered pool keeps for reuse but nothing holds now need not be among them.
    backend_.synchronize();
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, backend_.device_index()));
    CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    const CUcontext ctx = current_context();
    const ProfilerInterface interface;
    ProfilerHost host(chip_, counter_availability(ctx));
    std::vector<uint8_t> config = host.config_image(metrics);

    KernelMetricResult result;
    result.metrics = metrics;
    result.chip = chip_;
    result.passes = passes_of(config);
    RangeSession session(ctx);
    std::vector<uint8_t> counter_data = session.counter_data(metrics, max_ranges);
    session.set_config(config, counter_data, max_ranges, replay);
    // The replay loop of the API: under kernel replay CUPTI replays inside each launch and reports
    // every pass submitted after the first run, so the work runs once; under work replay each run
    // is one pass. Should kernel replay ever ask for more, the work runs again, as the API
    // expects; never more often than there are passes.
    const auto started = std::chrono::steady_clock::now();
    int64_t runs = 0;
    for (bool submitted = false; !submitted; ++runs) {
      if (runs == result.passes)
        throw_runtime("hardware metrics: CUPTI had not received all {} passes after {} runs of the work", result.passes,
                      runs);
      session.start();
      work();
      backend_.synchronize();
      submitted = session.stop();
    }
    result.runs = runs;
    result.replay = replay;
    const size_t dropped = session.decode();
    const auto replayed = std::chrono::steady_clock::now();
    const size_t ranges = ranges_in(counter_data);
    if (dropped > 0 || ranges > static_cast<size_t>(max_kernels))
      throw_runtime(
          "hardware metrics: the work launched more kernels than the {} the profiler was sized for; profile fewer "
          "kernels at a time or allow more",
          max_kernels);
    for (size_t r = 0; r < ranges; ++r)
      result.ranges.push_back(KernelMetricRange{range_name(counter_data, r), host.evaluate(counter_data, r, metrics)});
    // Where the profiling time goes: the replayed work (every pass of every kernel, with the saving
    // and restoring of memory between passes) or the evaluation of the counters on the host.
    const auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
    log::debug(
        "hardware metrics: {} kernel(s), {} pass(es): {:.1f} s replaying the work, {:.1f} s evaluating {} metric(s)",
        ranges, result.passes, seconds(started, replayed), seconds(replayed, std::chrono::steady_clock::now()),
        metrics.size());
    return result;
  }

 private:
  CudaBackend& backend_;
  std::string chip_;
};

}  // namespace

bool have_cupti_profiler() {
  return true;
}

int64_t cupti_metric_passes(const std::string& chip, const std::vector<std::string>& metrics) {
  ProfilerHost host(chip, {});
  std::vector<uint8_t> config = host.config_image(metrics);
  return passes_of(config);
}

std::unique_ptr<KernelMetricProfiler> make_cupti_metric_profiler(CudaBackend& backend) {
  return std::make_unique<CuptiMetricProfiler>(backend);
}

}  // namespace cnnscale::cuda

#else  // a toolkit without CUPTI

namespace cnnscale::cuda {

namespace {
[[noreturn]] void no_cupti() {
  throw_config(
      "hardware metrics need CUPTI, which this build of cnnscale was made without (its CUDA toolkit had none)");
}
}  // namespace

bool have_cupti_profiler() {
  return false;
}
int64_t cupti_metric_passes(const std::string&, const std::vector<std::string>&) {
  no_cupti();
}
std::unique_ptr<KernelMetricProfiler> make_cupti_metric_profiler(CudaBackend&) {
  no_cupti();
}

}  // namespace cnnscale::cuda

#endif
