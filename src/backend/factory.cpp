// The backend factory and everything the layers above learn about GPUs: the one file that decides,
// at build time, whether the CUDA library is there, so that nothing above the backend has to.
#include <cstdlib>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/devices.hpp"
#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_entry.hpp"
#endif

namespace cnnscale {

#if !CNNSCALE_HAVE_CUDA
namespace {
std::string no_cuda_text(const std::string& what) {
  return fmt::format("{}: this build of cnnscale has no CUDA backend (configure with -DCNNSCALE_CUDA=ON)", what);
}
[[noreturn]] void no_cuda(const std::string& what) { throw_runtime("{}", no_cuda_text(what)); }
}  // namespace
#endif

#if CNNSCALE_HAVE_CUDA
bool cuda_backend_built() { return true; }
int cuda_device_count() { return cuda_backend_device_count(); }
std::string gpu_uuid(int device_index) { return cuda_device_uuid(device_index); }
GpuFacts gpu_facts(int device_index) {
  const CudaDeviceFacts f = cuda_device_facts(device_index);
  return {f.name, f.sm_count, static_cast<int64_t>(f.memory_bytes), f.peak_sm_clock_khz / 1e3,
          fmt::format("{}.{}", f.cc_major, f.cc_minor)};
}
GpuLibraryVersions gpu_library_versions() {
  return {cuda_version_string(), cudnn_version_string(), nccl_version_string()};
}
std::vector<char> device_communicator_id() { return nccl_unique_id(); }
std::unique_ptr<DeviceCommunicator> make_device_communicator(Backend& backend, int rank, int size,
                                                             const std::vector<char>& id, AllreduceAlgo algo,
                                                             double timeout_seconds, const NcclTuning& tuning) {
  return make_nccl_communicator(backend, rank, size, id, algo, timeout_seconds, tuning);
}
#else
bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }
std::string gpu_uuid(int device_index) { no_cuda(fmt::format("UUID of gpu:{}", device_index)); }
GpuFacts gpu_facts(int device_index) { no_cuda(fmt::format("properties of gpu:{}", device_index)); }
GpuLibraryVersions gpu_library_versions() { return {}; }
std::vector<char> device_communicator_id() { no_cuda("NCCL communicator"); }
std::unique_ptr<DeviceCommunicator> make_device_communicator(Backend& backend, int, int, const std::vector<char>&,
                                                             AllreduceAlgo, double, const NcclTuning&) {
  no_cuda(fmt::format("NCCL communicator on {}", backend.name()));
}
#endif

void check_backend_precision(const std::string& spec, Precision precision) {
  if (spec == "cpu" && precision != Precision::FP32)
    throw_config("--precision {} runs on a GPU only: the CPU backend is the fp32 reference", precision_name(precision));
}

std::unique_ptr<Backend> make_backend(const std::string& spec, int sm_count, Precision precision,
                                      AlgorithmChoice algorithms) {
  if (sm_count < 0) throw_config("--sm-counts: SM counts must be >= 1, got {}", sm_count);
  if (spec == "cpu") {
    if (sm_count != 0) throw_config("--sm-counts applies to GPU ranks");
    if (algorithms.layout == LayoutChoice::NHWC)
      throw_config("--layout nhwc runs on a GPU only: the CPU backend computes in NCHW");
    if (algorithms.batchnorm != BatchNormKernels::Auto)
      throw_config("--batchnorm chooses GPU kernels: the CPU backend has one batch norm");
    if (algorithms.fc_gemv != FcGemv::Auto)
      throw_config("--fc-gemv chooses a GPU kernel: the CPU backend has one fully connected forward");
    check_backend_precision(spec, precision);
    return std::make_unique<CpuBackend>();
  }
  int index = 0;
  if (spec == "gpu" || spec == "cuda") {
    index = 0;
  } else if (spec.rfind("gpu:", 0) == 0 || spec.rfind("cuda:", 0) == 0) {
    std::string num = spec.substr(spec.find(':') + 1);
    char* end = nullptr;
    long v = std::strtol(num.c_str(), &end, 10);
    if (num.empty() || *end != '\0' || v < 0) throw_config("--device '{}': expected cpu, gpu or gpu:N", spec);
    index = static_cast<int>(v);
  } else {
    throw_config("--device '{}': expected cpu, gpu or gpu:N", spec);
  }
#if CNNSCALE_HAVE_CUDA
  return make_cuda_backend(index, sm_count, uses_tf32(precision), algorithms);
#else
  (void)index;
  (void)algorithms;
  // What was asked for cannot be run by this build: a configuration error, refused before any work.
  throw_config("{}", no_cuda_text(fmt::format("--device {}", spec)));
#endif
}

}  // namespace cnnscale
