// Sizes and counts from user input (network files, dataset headers, experiment matrices) computed
// without overflow, and the bound on what one tensor may hold, so that a wrapped product or an
// absurd size is refused with a located error before anything is allocated.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/shape.hpp"

namespace cnnscale {

// The most elements one tensor (a blob at its batch, a parameter, a dataset array) and all of a
// net's parameters together may hold: 2^40, 4 TiB of f32. No device this tool runs on comes near
// it (an H200 holds 141 GB, a large host a few TiB), so a size above it is a typo or a wrapped
// value, never a real network; and a product of such a count with a 2^23 factor (a batch, a
// kernel window) still fits in int64.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;
// The most one extent may be: the GPU libraries (cuDNN, cuBLAS) take extents as 32-bit ints.
inline constexpr int64_t kMaxExtent = INT32_MAX;

// a * b and a + b, or nullopt where the result does not fit in int64.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of non-negative factors, or nullopt where it exceeds `limit` (or int64) on the way:
// a zero factor anywhere still gives zero.
template <typename Range>
std::optional<int64_t> bounded_product(const Range& factors, int64_t limit = INT64_MAX) {
  int64_t p = 1;
  bool over = false;
  for (int64_t f : factors) {
    if (f == 0) return 0;
    if (over) continue;
    auto next = checked_mul(p, f);
    if (!next || *next > limit) over = true;
    else p = *next;
  }
  if (over) return std::nullopt;
  return p;
}

// Empty when `shape` is a tensor that can exist (every extent in [0, kMaxExtent], at most
// kMaxElements in all); else the shape and why not, e.g. "(1, 20, 4294967314, 24): an extent of
// 4294967314, more than 2147483647 (32 bits)" or "(64, 4096, 4096, 4096): more than 2^40 elements".
inline std::string tensor_size_problem(const Shape& shape) {
  for (int64_t d : shape.dims()) {
    if (d < 0) return fmt::format("{}: a negative extent", shape.to_string());
    if (d > kMaxExtent)
      return fmt::format("{}: an extent of {}, more than {} (32 bits)", shape.to_string(), d, kMaxExtent);
  }
  if (!bounded_product(shape.dims(), kMaxElements)) return fmt::format("{}: more than 2^40 elements", shape.to_string());
  return {};
}

}  // namespace cnnscale
