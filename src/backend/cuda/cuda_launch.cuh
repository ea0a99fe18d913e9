// Launch geometry shared by the backend's own kernels: 256-thread blocks and grid-stride loops.
#pragma once
#include <cstdint>

namespace cnnscale::cuda {

constexpr int kThreads = 256;
// Grid-stride loops: enough blocks to fill an H100/H200 several times over, no more.
constexpr int64_t kMaxBlocks = 4096;

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace cnnscale::cuda
