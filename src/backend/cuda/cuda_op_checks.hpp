// Argument checks shared by the CUDA ops: every tensor an op touches must live on this backend's
// GPU with the dtype and layout the op supports; anything else is an Error naming op and backend
// (never a silent fallback or a wild device pointer).
#pragma once
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace cnnscale::cuda {

inline void expect_on_device(const char* op, const char* what, const Tensor& t, int device) {
  if (t.numel() > 0 && !t.defined()) throw_runtime("{} on cuda: {} {} has no storage", op, what, t.shape().to_string());
  Device d = t.device();
  if (t.numel() > 0 && (d.kind != Device::Kind::CUDA || d.index != device))
    throw_runtime("{} on cuda (gpu:{}): {} {} lives on {}", op, device, what, t.shape().to_string(), d.to_string());
}

inline void expect_f32(const char* op, const char* what, const Tensor& t, int device) {
  if (t.dtype() != DType::F32 || t.layout() != Layout::NCHW)
    throw_runtime("{} on cuda: {} {} is {} {}; this backend supports f32 NCHW only", op, what,
                  t.shape().to_string(), dtype_name(t.dtype()), layout_name(t.layout()));
  expect_on_device(op, what, t, device);
}

// f32, bf16 or f16, NCHW or channels-last NHWC: what the activation ops take (mixed precision).
inline void expect_float(const char* op, const char* what, const Tensor& t, int device) {
  const DType d = t.dtype();
  if (d != DType::F32 && d != DType::BF16 && d != DType::F16)
    throw_runtime("{} on cuda: {} {} is {}; expected f32, bf16 or f16", op, what, t.shape().to_string(),
                  dtype_name(d));
  expect_on_device(op, what, t, device);
}
// `t` has the memory order of the op's first operand (one layout per call). A 4-d tensor of one
// pixel per channel is the same bytes in both orders, so either tag is accepted there.
inline void expect_layout(const char* op, const char* what, const Tensor& t, Layout layout) {
  const Shape& s = t.shape();
  if (t.layout() != layout && !(s.rank() == 4 && s.h() * s.w() == 1))
    throw_runtime("{} on cuda: {} {} is {}, but the op runs in {}", op, what, t.shape().to_string(),
                  layout_name(t.layout()), layout_name(layout));
}
// `t` has the dtype of the op's first operand (one dtype per call).
inline void expect_dtype(const char* op, const char* what, const Tensor& t, DType dtype) {
  if (t.dtype() != dtype)
    throw_runtime("{} on cuda: {} {} is {}, but the op runs in {}", op, what, t.shape().to_string(),
                  dtype_name(t.dtype()), dtype_name(dtype));
}
inline void expect_i32(const char* op, const char* what, const Tensor& t, int device) {
  if (t.dtype() != DType::I32)
    throw_runtime("{} on cuda: {} {} is {}, expected i32", op, what, t.shape().to_string(), dtype_name(t.dtype()));
  expect_on_device(op, what, t, device);
}

inline void expect_i8(const char* op, const char* what, const Tensor& t, int device) {
  if (t.dtype() != DType::I8)
    throw_runtime("{} on cuda: {} {} is {}, expected i8", op, what, t.shape().to_string(), dtype_name(t.dtype()));
  expect_on_device(op, what, t, device);
}

inline void expect_shape(const char* op, const char* what, const Tensor& t, const Shape& expected) {
  if (t.shape() != expected)
    throw_runtime("{} on cuda: {} has shape {}, expected {}", op, what, t.shape().to_string(), expected.to_string());
}

inline void expect_numel(const char* op, const char* what, const Tensor& t, int64_t expected) {
  if (t.numel() != expected)
    throw_runtime("{} on cuda: {} {} has {} elements, expected {}", op, what, t.shape().to_string(), t.numel(),
                  expected);
}

}  // namespace cnnscale::cuda
