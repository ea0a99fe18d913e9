// Tensor shapes: a small vector of extents with the helpers layers need (N, C, H, W access).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace cnnscale {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t& operator[](int i) { return dims_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  const std::vector<int64_t>& dims() const { return dims_; }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  // Logical NCHW accessors (independent of memory layout); missing trailing dims count as 1.
  int64_t n() const { return rank() > 0 ? dims_[0] : 1; }
  int64_t c() const { return rank() > 1 ? dims_[1] : 1; }
  int64_t h() const { return rank() > 2 ? dims_[2] : 1; }
  int64_t w() const { return rank() > 3 ? dims_[3] : 1; }
  // Elements per sample: everything but the leading batch dimension.
  int64_t sample_numel() const { return rank() > 0 ? numel() / (dims_[0] ? dims_[0] : 1) : 1; }
  Shape with_batch(int64_t n) const {
    Shape s = *this;
    if (!s.dims_.empty()) s.dims_[0] = n;
    return s;
  }

  std::string to_string() const {
    std::string s = "(";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + ")";
  }
  bool operator==(const Shape& o) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace cnnscale
