// What the layers above the backend may know of GPUs, without a CUDA header and without asking
// whether this build has CUDA: device count, identity, library versions and the device-side
// communicator. Defined in backend/factory.cpp, the one place that calls into the CUDA library.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/communicator.hpp"

namespace cnnscale {

// Whether this build has the CUDA backend (a build without it still runs every CPU path).
bool cuda_backend_built();

// The GPU's UUID as nvidia-smi prints it ("GPU-xxxxxxxx-..."): it names the physical GPU whatever
// CUDA_VISIBLE_DEVICES does to indices, so ranks compare it to find two of them on one GPU.
// RuntimeError for a device that does not exist or a build without CUDA.
std::string gpu_uuid(int device_index);
// The GPU's name and what sets its speed when unequal GPUs train together; RuntimeError as gpu_uuid.
struct GpuFacts {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int64_t sm_count = 0;
  int64_t memory_bytes = 0;
  double peak_sm_clock_mhz = 0;
  std::string compute_capability;  // "9.0"
};
GpuFacts gpu_facts(int device_index);

// Versions of the GPU libraries actually loaded at run time, for results files; empty strings in a
// build without CUDA.
struct GpuLibraryVersions {
  std::string cuda;   // "runtime 13.0, driver 13.0"
  std::string cudnn;  // "9.19.0"
  std::string nccl;   // "2.28.9"
};
GpuLibraryVersions gpu_library_versions();

// The device-side communicator (NCCL). Bootstrap: rank 0 calls device_communicator_id() and
// broadcasts the bytes with the caller's MPI; every rank passes them to make_device_communicator().
// `backend` must be a GPU backend (its compute stream orders the collectives); `algo` sets
// NCCL_ALGO unless the user exported it; `timeout_seconds` bounds every host wait (PeerError past
// it); `tuning.max_ctas` > 0 sets NCCL_MAX_CTAS the same way (0: NCCL's choice), `tuning`'s CTA
// policy and stream priority go to the communicator itself. RuntimeError in a build without CUDA or
// for a CPU backend.
std::vector<char> device_communicator_id();
std::unique_ptr<DeviceCommunicator> make_device_communicator(Backend& backend, int rank, int size,
                                                             const std::vector<char>& id, AllreduceAlgo algo,
                                                             double timeout_seconds, const NcclTuning& tuning = {});

}  // namespace cnnscale
