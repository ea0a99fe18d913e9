// Tensor: a typed, shaped view into reference-counted device or host storage. Views share storage
// (the net keeps all parameters and all gradients in two flat buffers, so allreduce can work on
// contiguous buckets). Tensors never allocate by themselves: a Backend creates their storage.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"

namespace cnnscale {

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;
  bool is_cpu() const { return kind == Kind::CPU; }
  bool operator==(const Device&) const = default;
  std::string to_string() const { return is_cpu() ? "cpu" : "gpu:" + std::to_string(index); }
};

// A block of memory and the function that frees it.
class Storage {
 public:
  Storage(void* ptr, size_t bytes, Device device, std::function<void(void*)> deleter)
      : ptr_(ptr), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage() {
    if (deleter_ && ptr_) deleter_(ptr_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* ptr_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype = DType::F32,
         Layout layout = Layout::NCHW)
      : storage_(std::move(storage)), offset_(offset_bytes), shape_(std::move(shape)), dtype_(dtype),
        layout_(layout) {
    CNNSCALE_CHECK(!storage_ || offset_ + bytes() <= storage_->bytes(), "view {} at offset {} overruns storage of {} bytes",
                   shape_.to_string(), offset_, storage_->bytes());
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t offset_bytes() const { return offset_; }

  void* raw() const { return storage_ ? static_cast<char*>(storage_->ptr()) + offset_ : nullptr; }
  float* f32() const {
    CNNSCALE_CHECK(dtype_ == DType::F32, "tensor is {}, not f32", dtype_name(dtype_));
    return static_cast<float*>(raw());
  }
  int32_t* i32() const {
    CNNSCALE_CHECK(dtype_ == DType::I32, "tensor is {}, not i32", dtype_name(dtype_));
    return static_cast<int32_t*>(raw());
  }

  // Same storage and shape, memory order tagged `layout` (the caller says how the bytes are laid out).
  Tensor as_layout(Layout layout) const { return Tensor(storage_, offset_, shape_, dtype_, layout); }
  // Same storage, new shape with the same number of elements.
  Tensor reshape(Shape shape) const {
    CNNSCALE_CHECK(shape.numel() == numel(), "reshape {} -> {}", shape_.to_string(), shape.to_string());
    return Tensor(storage_, offset_, std::move(shape), dtype_, layout_);
  }
  // A view of `shape` starting `element_offset` elements into this tensor.
  Tensor view(int64_t element_offset, Shape shape) const {
    return Tensor(storage_, offset_ + static_cast<size_t>(element_offset) * dtype_size(dtype_), std::move(shape),
                  dtype_, layout_);
  }
  // Samples [begin, begin + count) along the batch dimension.
  Tensor slice_batch(int64_t begin, int64_t count) const {
    return view(begin * shape_.sample_numel(), shape_.with_batch(count));
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
  Layout layout_ = Layout::NCHW;
};

// The order an activation of `shape` and `dtype` takes in a net computing in `compute` and preferring
// `preferred` (Backend::activation_layout_for): tensors of the compute dtype as activation_layout()
// says; those of another dtype (the f32 losses and accuracies of a 16-bit net, i32 labels) stay NCHW.
inline Layout activation_layout(Layout preferred, const Shape& shape, DType dtype, DType compute) {
  if (dtype != compute) return Layout::NCHW;
  return activation_layout(preferred, shape.rank(), shape.rank() == 4 ? shape.h() * shape.w() : 1);
}

// Host tensor helpers used by tests, checkpoints and the CPU backend.
Tensor host_tensor(const Shape& shape, DType dtype = DType::F32);

}  // namespace cnnscale
