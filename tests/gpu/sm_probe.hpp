// A probe of where kernels run: launches many short blocks on a stream and reports the distinct SM
// ids (%smid) they ran on, so a test can see that a backend's stream is confined to its partition.
#pragma once
#include <cuda_runtime.h>

#include <set>

namespace cnnscale::testing {

struct SmProbeResult {
  cudaError_t error = cudaSuccess;  // of the first failing CUDA call; ids are empty then
  std::set<unsigned int> sm_ids;
};

// Launches `blocks` blocks (each staying resident for about `spin_cycles` clock cycles, so that the
// scheduler spreads them over every SM it may use) on `stream` with the calling thread's current
// context, and waits for them. The context current to the thread must be the stream's.
SmProbeResult probe_sm_ids(cudaStream_t stream, int blocks, long long spin_cycles = 20000);

}  // namespace cnnscale::testing
