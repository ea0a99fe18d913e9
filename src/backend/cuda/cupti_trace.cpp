// The kernel trace of the CUDA backend (backend/kernel_trace.hpp) from CUPTI's activity API: kernel
// records (CONCURRENT_KERNEL: start, end, launch configuration), and EXTERNAL_CORRELATION records
// that link each runtime or driver API call to the external id on top of the stack the work pushes.
// API records (RUNTIME, DRIVER) must be enabled for CUPTI to emit the links; their own records are
// read and dropped. CUPTI hands records over in buffers we give it, from a thread of its own, hence
// the mutex; its callbacks are plain functions, hence one tracer per process at a time.
#include "backend/cuda/cupti_trace.hpp"

#include "backend/cuda/cuda_backend.hpp"

#ifdef CNNSCALE_HAVE_CUPTI
#include <cuda.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cupti_check.hpp"
#include "core/error.hpp"

namespace cnnscale::cuda {

void fail(CUptiResult status, const char* statement, const char* file, int line) {
  const char* text = nullptr;
  if (cuptiGetResultString(status, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown CUPTI status";
  switch (status) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      throw_config(
          "kernel profiling refused: {} ({}): the driver lets only administrators read GPU performance "
          "counters here (NVreg_RestrictProfilingToAdminUsers=1)",
          text, statement);
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      throw_config("kernel profiling refused: {}: CUPTI cannot profile a virtualised GPU", text);
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_HARDWARE_BUSY:
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      throw_config("kernel profiling refused: {} ({} at {}:{})", text, statement, file, line);
    default:
      throw_runtime("CUPTI error {} ({}) in '{}' at {}:{}", static_cast<int>(status), text, statement, file, line);
  }
}

std::string demangle(const char* name) {
  if (name == nullptr) return "(unnamed)";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);  // a C name stays as it is
}

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kBufferAlign = 8;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

class CuptiTracer;
std::mutex g_mutex;               // guards g_active and the active tracer's trace
CuptiTracer* g_active = nullptr;  // the tracer CUPTI's buffers are delivered to

class CuptiTracer final : public KernelTracer {
 public:
  CuptiTracer(std::string sm_arch, std::string device) {
    trace_.sm_arch = std::move(sm_arch);
    trace_.device = std::move(device);
    {
      std::lock_guard lock(g_mutex);
      if (g_active != nullptr) throw_runtime("kernel trace: a trace is already running in this process");
      g_active = this;
    }
    try {
      CUPTI_CHECK(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed));
      for (CUpti_ActivityKind kind : kKinds) {
        CUPTI_CHECK(cuptiActivityEnable(kind));
        ++enabled_;
      }
    } catch (...) {
      stop();
      throw;
    }
  }
  ~CuptiTracer() override {
    if (!finished_) stop();
  }

  void push(uint64_t external_id) override {
    CUPTI_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_id));
    ++depth_;
  }
  void pop() override {
    if (depth_ == 0) throw_runtime("kernel trace: pop without a push");
    uint64_t last = 0;
    CUPTI_CHECK(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
    --depth_;
  }

  KernelTrace finish() override {
    if (finished_) throw_runtime("kernel trace: finished twice");
    if (depth_ != 0) throw_runtime("kernel trace: {} external id(s) pushed and never popped", depth_);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    stop();
    std::lock_guard lock(g_mutex);
    // Launch order: a graph's kernels share their launch's correlation id, so start breaks the tie.
    std::stable_sort(trace_.kernels.begin(), trace_.kernels.end(), [](const TracedKernel& a, const TracedKernel& b) {
      return a.correlation_id != b.correlation_id ? a.correlation_id < b.correlation_id : a.start_ns < b.start_ns;
    });
    return std::move(trace_);
  }

 private:
  // Disables what was enabled, delivers what CUPTI still holds, and lets the next tracer start.
  void stop() noexcept {
    for (int i = 0; i < enabled_; ++i) cuptiActivityDisable(kKinds[i]);
    enabled_ = 0;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    finished_ = true;
    std::lock_guard lock(g_mutex);
    if (g_active == this) g_active = nullptr;
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t /*size*/,
                                        size_t valid) {
    std::unique_ptr<uint8_t, decltype(&std::free)> owned(buffer, &std::free);
    std::lock_guard lock(g_mutex);
    if (g_active == nullptr) return;  // records of a trace that ended: nobody asked for them
    KernelTrace& t = g_active->trace_;
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        TracedKernel out;
        out.name = demangle(k->name);
        out.start_ns = static_cast<int64_t>(k->start);
        out.end_ns = static_cast<int64_t>(k->end);
        out.launch.grid = {k->gridX, k->gridY, k->gridZ};
        out.launch.block = {k->blockX, k->blockY, k->blockZ};
        out.launch.cluster = {k->clusterX, k->clusterY, k->clusterZ};
        out.launch.registers_per_thread = k->registersPerThread;
        out.launch.static_shared_memory = k->staticSharedMemory;
        out.launch.dynamic_shared_memory = k->dynamicSharedMemory;
        out.launch.shared_memory_carveout = k->sharedMemoryExecuted;
        out.correlation_id = k->correlationId;
        out.stream = k->streamId;
        out.in_graph = k->graphId != 0;
        t.kernels.push_back(std::move(out));
      } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
          t.links.push_back(ExternalCorrelation{e->correlationId, e->externalId});
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS)
      t.dropped_records += static_cast<int64_t>(dropped);
  }

  KernelTrace trace_;
  int enabled_ = 0;
  int depth_ = 0;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<KernelTracer> make_cupti_tracer(CudaBackend& backend) {
  backend.context()->make_current();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, backend.device_index()));
  return std::make_unique<CuptiTracer>(fmt::format("sm_{}{}", prop.major, prop.minor), prop.name);
}

}  // namespace cnnscale::cuda

#else  // a toolkit without CUPTI

#include "core/error.hpp"

namespace cnnscale::cuda {

std::unique_ptr<KernelTracer> make_cupti_tracer(CudaBackend&) {
  throw_config(
      "kernel profiling needs CUPTI, which this build of cnnscale was made without (its CUDA toolkit had none)");
}

}  // namespace cnnscale::cuda

#endif
