// The CPU backend's host memory: 64-byte aligned, zeroed allocations, and the count of the tensors'
// bytes behind Backend::memory_stats (a buffer from alloc_host is not counted).
#pragma once
#include <cstddef>
#include <memory>

#include "backend/memory_counter.hpp"
#include "core/tensor.hpp"

namespace cnnscale::cpu {

class HostMemory {
 public:
  Tensor alloc(const Shape& shape, DType dtype);
  std::shared_ptr<Storage> alloc_host(size_t bytes);
  MemoryStats stats() const { return counter_->stats(); }
  void reset_peak() { counter_->reset_peak(); }

 private:
  // Shared with every tensor's deleter: a tensor may be freed after the backend.
  std::shared_ptr<MemoryCounter> counter_ = std::make_shared<MemoryCounter>();
};

}  // namespace cnnscale::cpu
