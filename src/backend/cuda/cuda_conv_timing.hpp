// Timing pieces the convolution searches (cuda_conv_search.cpp) and the trials of convolution
// forms (cuda_conv.cpp) share: transient search buffers, event pairs and medians of timed runs.
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cuda/cuda_check.hpp"

namespace cnnscale::cuda {

// One cudnnFind call times each algorithm once, at the start of a run: clocks still ramping and
// kernels loaded on first use (lazy module loading) can put one timing off by a large factor, and
// then the choice, and the run's speed, differs from one run to the next (with one search, runs of
// one training configuration differed by up to 1.6x in samples/s:
// docs/measurements/2026-11-25-convolution-choices.md). Three searches, each algorithm (with its
// math type) ranked by its median time, outvote one bad timing.
constexpr int kFindTrials = 3;

// Temporary search workspace, freed in stream order whatever happens to the search.
class SearchBuffer {
 public:
  SearchBuffer(size_t wanted, cudaStream_t stream) : stream_(stream) {
    // Halve on failure: a smaller search space beats failing the first step.
    for (bytes_ = wanted; bytes_ >= (size_t{1} << 20); bytes_ /= 2) {
      if (cudaMallocAsync(&ptr_, bytes_, stream_) == cudaSuccess) return;
      cudaGetLastError();
      ptr_ = nullptr;
    }
    bytes_ = 0;
  }
  ~SearchBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  SearchBuffer(const SearchBuffer&) = delete;
  SearchBuffer& operator=(const SearchBuffer&) = delete;
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A pair of timing events, destroyed whatever happens to the search.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// One call of `run` (which says whether it succeeded) between the pair of events on `stream`: its
// time in ms, or a negative value if it failed.
template <typename Run>
float timed_run(const EventPair& ev, cudaStream_t stream, Run&& run) {
  CUDA_CHECK(cudaEventRecord(ev.start, stream));
  const bool ok = run();
  CUDA_CHECK(cudaEventRecord(ev.stop, stream));
  CUDA_CHECK(cudaEventSynchronize(ev.stop));
  if (!ok) return -1.0f;
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return ms;
}

// The median of kFindTrials timed calls of `run`, as the legacy search ranks its algorithms; a
// negative value if one failed.
template <typename Run>
float median_run_ms(const EventPair& ev, cudaStream_t stream, Run&& run) {
  std::vector<float> times;
  for (int t = 0; t < kFindTrials; ++t) {
    const float ms = timed_run(ev, stream, run);
    if (ms < 0.0f) return -1.0f;
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A run of a graph plan for timed_run: whether it ran (a refusal leaves no sticky error behind).
inline bool ran(cudnnStatus_t st) {
  if (st != CUDNN_STATUS_SUCCESS) cudaGetLastError();
  return st == CUDNN_STATUS_SUCCESS;
}

}  // namespace cnnscale::cuda
