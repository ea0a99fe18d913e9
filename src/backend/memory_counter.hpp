// MemoryCounter: the bytes a backend holds now and at most (Backend::memory_stats). Allocations add,
// their storage deleters subtract; both may run on any thread, so the counts are atomics, and a
// deleter holds the counter by shared_ptr because a tensor may outlive the backend that made it.
#pragma once
#include <atomic>
#include <cstdint>

#include "backend/backend.hpp"

namespace cnnscale {

class MemoryCounter {
 public:
  void add(int64_t bytes) {
    const int64_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    // Raise the peak unless another thread already raised it further.
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void release(int64_t bytes) { current_.fetch_sub(bytes, std::memory_order_relaxed); }
  MemoryStats stats() const {
    return {current_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed)};
  }
  void reset_peak() { peak_.store(current_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace cnnscale
