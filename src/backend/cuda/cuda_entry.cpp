// The CUDA library's entry points for code without CUDA headers: device count (0 on any
// driver/runtime error), CudaBackend and NcclCommunicator construction, GPU UUID, NCCL version.
#include "backend/cuda/cuda_entry.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstring>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/nccl_communicator.hpp"

namespace cnnscale {

// A build machine with the toolkit but no driver answers cudaErrorInsufficientDriver (35), not 0
// devices; "no GPU" it is, whatever the error.
int cuda_backend_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // do not leave the error for the next unrelated check to report
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index, int sm_count, bool allow_tf32,
                                           const AlgorithmChoice& algorithms) {
  // CudaBackend's constructor checks the index against the device count and says what it found.
  CudaBackendOptions options;
  options.sm_count = sm_count;
  options.allow_tf32 = allow_tf32;
  options.width_lowering = ConvWidthLowering::Measured;
  if (algorithms.conv_search == ConvSearch::Legacy) {
    options.conv_graph_plans = 0;
    options.conv_lowering = ConvLowering::Never;
  }
  if (algorithms.conv_search != ConvSearch::All) options.width_lowering = ConvWidthLowering::Never;
  options.deterministic = algorithms.deterministic;
  options.layout = algorithms.layout;
  options.batchnorm = algorithms.batchnorm;
  options.fc_gemv = algorithms.fc_gemv;
  return std::make_unique<CudaBackend>(device_index, options);
}

std::string cuda_device_uuid(int device_index) {
  const int count = cuda_backend_device_count();
  if (device_index < 0 || device_index >= count)
    throw_runtime("gpu:{}: no such CUDA device ({} visible), so no UUID", device_index, count);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  // nvidia-smi's grouping: 4-2-2-2-6 bytes.
  return fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[0],
      b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

std::string nccl_version_string() {
  int code = 0;
  NCCL_CHECK(ncclGetVersion(&code));
  // Since NCCL 2.9 the code is major * 10000 + minor * 100 + patch (NCCL_VERSION in nccl.h).
  return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
}

CudaDeviceFacts cuda_device_facts(int device_index) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  CudaDeviceFacts f;
  f.name = prop.name;
  f.sm_count = prop.multiProcessorCount;
  f.memory_bytes = prop.totalGlobalMem;
  f.cc_major = prop.major;
  f.cc_minor = prop.minor;
  CUDA_CHECK(cudaDeviceGetAttribute(&f.peak_sm_clock_khz, cudaDevAttrClockRate, device_index));
  return f;
}

std::string cuda_version_string() {
  int runtime = 0, driver = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  // 1000 * major + 10 * minor.
  return fmt::format("runtime {}.{}, driver {}.{}", runtime / 1000, (runtime % 1000) / 10, driver / 1000,
                     (driver % 1000) / 10);
}

std::string cudnn_version_string() {
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  const size_t v = cudnnGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

std::vector<char> nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return std::vector<char>(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES);
}

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Backend& cuda_backend, int rank, int size,
                                                           const std::vector<char>& unique_id, AllreduceAlgo algo,
                                                           double timeout_seconds, const NcclTuning& tuning) {
  auto* backend = dynamic_cast<CudaBackend*>(&cuda_backend);
  if (!backend) throw_runtime("the NCCL communicator needs the cuda backend, not the {} backend", cuda_backend.name());
  if (unique_id.size() != NCCL_UNIQUE_ID_BYTES)
    throw_runtime("NCCL unique id has {} bytes, expected {} (was it broadcast from rank 0?)", unique_id.size(),
                  NCCL_UNIQUE_ID_BYTES);
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  return std::make_unique<NcclCommunicator>(*backend, rank, size, id, algo, timeout_seconds, tuning);
}

}  // namespace cnnscale
