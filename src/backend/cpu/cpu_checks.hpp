// Argument checks shared by the CPU backend's op files: every op validates dtypes, devices and
// element counts so that a layer bug fails loudly with the op's name instead of reading out of bounds.
#pragma once
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace cnnscale::cpu {

inline void check_f32(const char* op, const Tensor& t, const char* what) {
  CNNSCALE_CHECK(t.defined(), "cpu {}: {} is not allocated", op, what);
  CNNSCALE_CHECK(t.dtype() == DType::F32, "cpu {}: {} is {}, expected f32", op, what, dtype_name(t.dtype()));
  CNNSCALE_CHECK(t.device().is_cpu(), "cpu {}: {} lives on {}", op, what, t.device().to_string());
}

inline void check_i32(const char* op, const Tensor& t, const char* what) {
  CNNSCALE_CHECK(t.defined(), "cpu {}: {} is not allocated", op, what);
  CNNSCALE_CHECK(t.dtype() == DType::I32, "cpu {}: {} is {}, expected i32", op, what, dtype_name(t.dtype()));
  CNNSCALE_CHECK(t.device().is_cpu(), "cpu {}: {} lives on {}", op, what, t.device().to_string());
}

inline void check_same_numel(const char* op, const Tensor& a, const Tensor& b) {
  CNNSCALE_CHECK(a.numel() == b.numel(), "cpu {}: element counts differ: {} vs {}", op, a.shape().to_string(),
                 b.shape().to_string());
}

}  // namespace cnnscale::cpu
