// The numeric precision of a run: what `--precision` and `matrix.precision` name. It decides the
// storage of activations and of the weights' compute copies, and whether fp32 math may use TF32.
// Master weights, optimizer state, batch-norm statistics, loss and softmax stay fp32 in every one.
#pragma once
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace cnnscale {

enum class Precision {
  FP32,  // fp32 storage and math, TF32 off: the reference every other precision is checked against
  TF32,  // fp32 storage; cuDNN/cuBLAS may round operands to TF32 (10-bit mantissa) on tensor cores
  BF16,  // bf16 activations and weight copies, fp32 accumulation and master weights
  FP16,  // fp16 likewise, with dynamic loss scaling (fp16's range ends at 65504)
};

inline std::string precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

// ConfigError naming the accepted values; `what` says where the value came from ("--precision").
inline Precision parse_precision(const std::string& s, const std::string& what = "--precision") {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16})
    if (s == precision_name(p)) return p;
  throw_config("{} '{}': expected fp32, tf32, bf16 or fp16", what, s);
}

// The precisions' spelling of a floating storage type, as flags and results write it: fp32, bf16,
// fp16 (the gradient exchange's --allreduce-dtype, bench allreduce's --dtype).
inline std::string float_type_name(DType t) {
  return t == DType::BF16 ? "bf16" : t == DType::F16 ? "fp16" : "fp32";
}
// ConfigError naming `what` unless `s` is one of those three.
inline DType parse_float_type(const std::string& s, const std::string& what) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (s == float_type_name(t)) return t;
  throw_config("{} '{}': expected fp32, bf16 or fp16", what, s);
}

// Storage of activations, their gradients and the weights' compute copies.
inline DType compute_dtype(Precision p) {
  return p == Precision::BF16 ? DType::BF16 : p == Precision::FP16 ? DType::F16 : DType::F32;
}
inline bool uses_tf32(Precision p) { return p == Precision::TF32; }
inline bool is_half(Precision p) { return compute_dtype(p) != DType::F32; }
// fp16 needs its gradients scaled up to stay out of the subnormals; bf16 has fp32's exponent range.
inline bool needs_loss_scaling(Precision p) { return p == Precision::FP16; }

}  // namespace cnnscale
