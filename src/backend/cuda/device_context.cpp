// DeviceContext: a GPU's primary context, or a green context over part of its SMs. The driver API
// is reached through the runtime's entry points (cudaGetDriverEntryPointByVersion), so nothing
// links libcuda: a build machine without a driver still runs the programs and tests that need none.
#include "backend/cuda/device_context.hpp"

#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.hpp"
#include "core/error.hpp"

namespace cnnscale::cuda {
namespace {

// The newest call used here, cuGreenCtxStreamCreate, came with CUDA 12.5.
constexpr unsigned int kDriverApiVersion = 12050;

struct DriverApi {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetDevResource_v12040 device_get_dev_resource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 split_by_count = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 generate_desc = nullptr;
  PFN_cuGreenCtxCreate_v12040 green_create = nullptr;
  PFN_cuGreenCtxDestroy_v12040 green_destroy = nullptr;
  PFN_cuCtxFromGreenCtx_v12040 ctx_from_green = nullptr;
  PFN_cuGreenCtxGetDevResource_v12040 green_get_dev_resource = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 green_stream_create = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  std::string missing;  // symbols the driver did not provide
};

template <typename Fn>
void load(Fn& fn, const char* symbol, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, kDriverApiVersion, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();  // an older driver answers cudaErrorInvalidValue; not sticky, but not ours to leave
    missing += missing.empty() ? symbol : std::string(", ") + symbol;
    return;
  }
  fn = reinterpret_cast<Fn>(p);
}

const DriverApi& loaded_api() {
  static const DriverApi api = [] {
    DriverApi a;
    int count = 0;
    cudaGetDeviceCount(&count);  // initialises the driver (cuInit) before any driver call
    cudaGetLastError();
    load(a.device_get, "cuDeviceGet", a.missing);
    load(a.device_get_dev_resource, "cuDeviceGetDevResource", a.missing);
    load(a.split_by_count, "cuDevSmResourceSplitByCount", a.missing);
    load(a.generate_desc, "cuDevResourceGenerateDesc", a.missing);
    load(a.green_create, "cuGreenCtxCreate", a.missing);
    load(a.green_destroy, "cuGreenCtxDestroy", a.missing);
    load(a.ctx_from_green, "cuCtxFromGreenCtx", a.missing);
    load(a.green_get_dev_resource, "cuGreenCtxGetDevResource", a.missing);
    load(a.green_stream_create, "cuGreenCtxStreamCreate", a.missing);
    load(a.ctx_set_current, "cuCtxSetCurrent", a.missing);
    load(a.ctx_get_current, "cuCtxGetCurrent", a.missing);
    load(a.error_name, "cuGetErrorName", a.missing);
    return a;
  }();
  return api;
}

const DriverApi& driver(int device) {
  const DriverApi& api = loaded_api();
  if (!api.missing.empty()) {
    int version = 0;
    cudaDriverGetVersion(&version);
    throw_runtime("gpu:{}: SM partitions need green contexts (CUDA driver >= 12.5); driver {}.{} lacks {}", device,
                  version / 1000, (version % 1000) / 10, api.missing);
  }
  return api;
}

[[noreturn]] void fail_driver(CUresult status, const char* statement, int device) {
  const char* name = nullptr;
  if (const auto f = loaded_api().error_name) f(status, &name);
  throw_runtime("CUDA driver error {} ({}) in '{}' on gpu:{}", static_cast<int>(status), name ? name : "?", statement,
                device);
}

#define CU_CHECK(device, stmt)                                                                \
  do {                                                                                        \
    CUresult cnnscale_cu_status_ = (stmt);                                                    \
    if (cnnscale_cu_status_ != CUDA_SUCCESS) fail_driver(cnnscale_cu_status_, #stmt, device); \
  } while (0)

CUdevResource device_sm_resource(const DriverApi& api, int device) {
  CUdevice dev = 0;
  CU_CHECK(device, api.device_get(&dev, device));
  CUdevResource all{};
  CU_CHECK(device, api.device_get_dev_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  return all;
}

// The largest partition the driver makes from fewer than `below` SMs, or 0: for the message when a
// request rounds up past the whole device. Splits only simulate; nothing is provisioned.
int largest_partition_below(const DriverApi& api, const CUdevResource& all, int below) {
  for (int c = below - 1; c >= 1; --c) {
    CUdevResource group{};
    unsigned int groups = 1;
    if (api.split_by_count(&group, &groups, &all, nullptr, 0, static_cast<unsigned int>(c)) == CUDA_SUCCESS &&
        groups == 1 && group.sm.smCount < all.sm.smCount)
      return static_cast<int>(group.sm.smCount);
  }
  return 0;
}

}  // namespace

SmPartitionRules sm_partition_rules(int device) {
  const CUdevResource all = device_sm_resource(driver(device), device);
  return {static_cast<int>(all.sm.smCount), static_cast<int>(all.sm.minSmPartitionSize),
          static_cast<int>(all.sm.smCoscheduledAlignment)};
}

DeviceContext::DeviceContext(int device, int sm_count) : device_(device), requested_sms_(sm_count) {
  if (sm_count < 0) throw_config("gpu:{}: an SM partition needs at least 1 SM, got {}", device, sm_count);
  // The primary context first: a green context retains it, and the driver documentation advises
  // having it active rather than letting cuGreenCtxCreate initialise it.
  CUDA_CHECK(cudaSetDevice(device_));
  if (sm_count == 0) return;

  const DriverApi& api = driver(device_);
  const CUdevResource all = device_sm_resource(api, device_);
  const int total = static_cast<int>(all.sm.smCount);
  const int min_sms = std::max(1, static_cast<int>(all.sm.minSmPartitionSize));
  if (sm_count > total) throw_config("gpu:{}: a partition of {} SMs is more than its {} SMs", device_, sm_count, total);
  if (sm_count == total) return;  // the whole device is its primary context: nothing to partition
  if (sm_count < min_sms)
    throw_config("gpu:{}: a partition of {} SMs is below the smallest the driver makes ({} SMs, in groups of {})",
                 device_, sm_count, min_sms, all.sm.smCoscheduledAlignment);

  // One group of at least sm_count SMs; the driver rounds the count up to whole co-scheduled groups.
  CUdevResource part{};
  unsigned int groups = 1;
  const CUresult split = api.split_by_count(&part, &groups, &all, nullptr, 0, static_cast<unsigned int>(sm_count));
  if (split != CUDA_SUCCESS && split != CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION)
    fail_driver(split, "cuDevSmResourceSplitByCount", device_);
  if (split != CUDA_SUCCESS || groups < 1 || part.sm.smCount == 0)
    throw_config(
        "gpu:{}: a partition of {} SMs, rounded up to whole groups of {}, does not fit in its {} SMs; the largest "
        "short of the whole GPU has {} SMs ({} is the whole GPU)",
        device_, sm_count, all.sm.smCoscheduledAlignment, total, largest_partition_below(api, all, sm_count), total);

  CUdevResourceDesc desc = nullptr;
  CU_CHECK(device_, api.generate_desc(&desc, &part, 1));
  CUdevice dev = 0;
  CU_CHECK(device_, api.device_get(&dev, device_));
  CU_CHECK(device_, api.green_create(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  try {
    CU_CHECK(device_, api.ctx_from_green(&context_, green_));
    // What the created context holds is the authority on the count, not the split's estimate.
    CUdevResource got{};
    CU_CHECK(device_, api.green_get_dev_resource(green_, &got, CU_DEV_RESOURCE_TYPE_SM));
    granted_sms_ = static_cast<int>(got.sm.smCount);
    make_current();
  } catch (...) {
    cudaSetDevice(device_);
    api.green_destroy(green_);
    green_ = nullptr;
    throw;
  }
}

DeviceContext::~DeviceContext() {
  if (!green_) return;
  const DriverApi& api = loaded_api();  // loaded: green_ could not exist otherwise
  // A destroyed context left current would fail every later runtime call on this thread.
  CUcontext current = nullptr;
  if (api.ctx_get_current(&current) == CUDA_SUCCESS && current == context_) cudaSetDevice(device_);
  api.green_destroy(green_);
}

void DeviceContext::make_current() const {
  if (!green_) {
    CUDA_CHECK(cudaSetDevice(device_));
    return;
  }
  CU_CHECK(device_, loaded_api().ctx_set_current(context_));
}

void DeviceContext::make_current_noexcept() const noexcept {
  if (!green_) {
    cudaSetDevice(device_);
    return;
  }
  loaded_api().ctx_set_current(context_);
}

cudaStream_t DeviceContext::create_stream(int priority) const {
  cudaStream_t stream = nullptr;
  if (!green_) {
    make_current();
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
    return stream;
  }
  CUstream s = nullptr;  // CUstream and cudaStream_t are the same handle type
  CU_CHECK(device_, loaded_api().green_stream_create(&s, green_, CU_STREAM_NON_BLOCKING, priority));
  return s;
}

}  // namespace cnnscale::cuda
