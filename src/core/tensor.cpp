// Host allocation for tensors that live outside any backend (tests, checkpoint staging).
#include "core/tensor.hpp"

#include <cstdlib>
#include <cstring>

namespace cnnscale {

Tensor host_tensor(const Shape& shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  // 64-byte alignment keeps OpenBLAS and vectorised loops on their fast paths.
  size_t padded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded ? padded : 64);
  if (!p) throw_runtime("host allocation of {} bytes failed", bytes);
  std::memset(p, 0, padded ? padded : 64);
  auto storage = std::make_shared<Storage>(p, bytes, Device{}, [](void* q) { std::free(q); });
  return Tensor(storage, 0, shape, dtype);
}

}  // namespace cnnscale
