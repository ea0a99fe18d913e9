// Entry points of the CUDA backend library for code that includes no CUDA header. Only the backend
// factory (backend/factory.cpp) calls them; the layers above reach them through backend/devices.hpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/communicator.hpp"

namespace cnnscale {

// Any driver/runtime error (no driver, no device) counts as zero devices.
int cuda_backend_device_count();
// Throws RuntimeError if the device does not exist or cannot be initialised. sm_count > 0: the
// backend runs on a green context of at least that many SMs (ConfigError if the GPU cannot).
// `algorithms`: whether convolution searches also time cuDNN's graph-API engines, deterministic
// algorithms, the activations' memory order (CudaBackendOptions).
std::unique_ptr<Backend> make_cuda_backend(int device_index, int sm_count = 0, bool allow_tf32 = false,
                                           const AlgorithmChoice& algorithms = {});

// The device's UUID as nvidia-smi prints it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"). It names
// the physical GPU whatever CUDA_VISIBLE_DEVICES does to indices, so ranks compare it to find two
// of them on one GPU. Throws RuntimeError for a device that does not exist.
std::string cuda_device_uuid(int device_index);
// The linked NCCL library's version, "2.28.9".
std::string nccl_version_string();
// For results files: the device's name ("NVIDIA H100 80GB HBM3") and what decides its speed in a
// mix of unequal GPUs: SMs, memory, peak SM clock (kHz) and the compute capability.
struct CudaDeviceFacts {
  std::string name;
  int sm_count = 0;
  size_t memory_bytes = 0;
  int peak_sm_clock_khz = 0;
  int cc_major = 0, cc_minor = 0;
};
CudaDeviceFacts cuda_device_facts(int device_index);
// The versions actually loaded at run time: CUDA runtime and driver API ("runtime 13.0, driver
// 13.0"), cuDNN ("9.14.0").
std::string cuda_version_string();
std::string cudnn_version_string();

// NCCL bootstrap: rank 0 calls nccl_unique_id() and broadcasts the bytes (the caller's MPI), every
// rank passes them to make_nccl_communicator(). The CUDA library stays free of MPI.
std::vector<char> nccl_unique_id();

// A communicator of `size` ranks over the GPU of `cuda_backend` (a CudaBackend; its compute stream
// orders the collectives). Collective over all ranks. `algo` sets NCCL_ALGO (Ring, Tree; Auto
// leaves it to NCCL's tuner) unless the user exported NCCL_ALGO: the environment wins, and a
// differing request is logged. `timeout_seconds` bounds every host wait (initialisation,
// synchronize_host, elapsed_ms): past it the communicator is aborted and PeerError thrown.
// `tuning.max_ctas` > 0 sets NCCL_MAX_CTAS, the most blocks (channels) a collective runs on, as `algo`
// sets NCCL_ALGO (an exported NCCL_MAX_CTAS wins); 0 leaves it to NCCL. `tuning.cta_policy` goes to
// the communicator's config (RuntimeError for a non-default policy where NCCL is older than 2.27);
// `tuning.low_priority` puts the communication stream at the least priority instead of the greatest.
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Backend& cuda_backend, int rank, int size,
                                                           const std::vector<char>& unique_id, AllreduceAlgo algo,
                                                           double timeout_seconds = 300.0,
                                                           const NcclTuning& tuning = {});

}  // namespace cnnscale
