#include "backend/cpu/cpu_memory.hpp"

#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace cnnscale::cpu {

namespace {
// 64-byte alignment keeps OpenBLAS and vectorised loops on their fast paths.
constexpr size_t kAlignment = 64;

void* aligned_zeroed(size_t bytes) {
  size_t padded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (padded == 0) padded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, padded);
  if (!p) throw_runtime("cpu: host allocation of {} bytes failed", bytes);
  std::memset(p, 0, padded);
  return p;
}
}  // namespace

Tensor HostMemory::alloc(const Shape& shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = aligned_zeroed(bytes);
  const auto counted = static_cast<int64_t>(bytes);
  std::shared_ptr<MemoryCounter> memory = counter_;
  auto storage = std::make_shared<Storage>(p, bytes, Device{}, [memory, counted](void* q) {
    std::free(q);
    memory->release(counted);
  });
  counter_->add(counted);  // once the deleter that gives it back exists
  return Tensor(storage, 0, shape, dtype);
}

std::shared_ptr<Storage> HostMemory::alloc_host(size_t bytes) {
  return std::make_shared<Storage>(aligned_zeroed(bytes), bytes, Device{}, [](void* q) { std::free(q); });
}

}  // namespace cnnscale::cpu
