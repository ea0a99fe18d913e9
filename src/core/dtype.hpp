// Element types and memory layouts a tensor can carry. Float32 runs today; the half types exist
// so that bf16/fp16 storage with fp32 accumulation can be added per op without changing layers.
#pragma once
#include <cstddef>
#include <string>

namespace cnnscale {

enum class DType { F32, F16, BF16, I32 };
enum class Layout { NCHW, NHWC };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

inline std::string dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
  }
  return "?";
}

inline std::string layout_name(Layout l) { return l == Layout::NCHW ? "NCHW" : "NHWC"; }

}  // namespace cnnscale
