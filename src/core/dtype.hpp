// Element types and memory layouts a tensor can carry: f32, the 16-bit types of mixed precision
// (bf16/f16 storage, fp32 accumulation), i32 labels, i8 (int8 inference's quantised operands) and u8
// (image bytes as stored, moved to the device before they are normalised there); NCHW or channels-last
// NHWC. A tensor's shape is always (N, C, H, W); the layout only says in which order its elements lie in memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace cnnscale {

enum class DType { F32, F16, BF16, I32, I8, U8 };
enum class Layout { NCHW, NHWC };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I8:
    case DType::U8:
      return 1;
  }
  return 0;
}

inline std::string dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I8:
      return "i8";
    case DType::U8:
      return "u8";
  }
  return "?";
}

inline std::string layout_name(Layout l) { return l == Layout::NCHW ? "NCHW" : "NHWC"; }

// Activations are stored channels-last (NHWC) only where that order differs from NCHW: 4-d tensors
// with more than one pixel. (N, C, 1, 1) and 2-d tensors are the same bytes either way and stay
// NCHW, so fully-connected layers and losses never see a channels-last tensor.
inline Layout activation_layout(Layout preferred, int rank, int64_t pixels) {
  return preferred == Layout::NHWC && rank == 4 && pixels > 1 ? Layout::NHWC : Layout::NCHW;
}

}  // namespace cnnscale
