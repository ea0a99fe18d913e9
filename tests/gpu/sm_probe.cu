// The SM-id probe's kernel: every block records the id of the SM it runs on (%smid, a PTX special
// register), then spins briefly so that blocks overlap and occupy every SM the stream may use.
#include <vector>

#include "sm_probe.hpp"

namespace cnnscale::testing {
namespace {

__global__ void record_sm_ids(unsigned int* ids, long long spin_cycles) {
  unsigned int sm = 0;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const long long start = clock64();
  while (clock64() - start < spin_cycles) {
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = sm;
}

}  // namespace

SmProbeResult probe_sm_ids(cudaStream_t stream, int blocks, long long spin_cycles) {
  SmProbeResult r;
  unsigned int* device_ids = nullptr;
  std::vector<unsigned int> ids(static_cast<size_t>(blocks), 0u);
  auto failed = [&r](cudaError_t e) {
    if (e == cudaSuccess) return false;
    r.error = e;
    return true;
  };
  if (failed(cudaMalloc(&device_ids, ids.size() * sizeof(unsigned int)))) return r;
  record_sm_ids<<<blocks, 32, 0, stream>>>(device_ids, spin_cycles);
  if (!failed(cudaGetLastError()) &&
      !failed(
          cudaMemcpyAsync(ids.data(), device_ids, ids.size() * sizeof(unsigned int), cudaMemcpyDeviceToHost, stream)) &&
      !failed(cudaStreamSynchronize(stream)))
    r.sm_ids.insert(ids.begin(), ids.end());
  cudaFree(device_ids);
  return r;
}

}  // namespace cnnscale::testing
