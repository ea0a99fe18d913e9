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

// f(I{}) with I = uint32_t when a grid-stride loop over n elements never forms an index past 2^31
// (n plus one grid stride, kMaxBlocks * kThreads = 2^20), else int64_t: kernels that decompose
// every index into coordinates are compute-bound in 64-bit division on large activations.
template <typename F>
void with_index_type(int64_t n, F&& f) {
  if (n < (int64_t{1} << 30))
    f(uint32_t{});
  else
    f(int64_t{});
}

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace cnnscale::cuda
