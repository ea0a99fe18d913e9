// Owning wrappers for cuDNN descriptors (created once, re-set per call: setting a descriptor is a
// cheap host-side operation) and the mapping of cnnscale shapes onto 4-d NCHW descriptors.
#pragma once
#include <cudnn.h>

#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "core/dtype.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "core/error.hpp"

namespace cnnscale::cuda {

// Whether a cuDNN math type runs on tensor cores.
inline bool is_tensor_op(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { CUDNN_CHECK(Create(&desc_)); }
  ~CudnnDescriptor() {
    if (desc_) Destroy(desc_);  // destructors must not throw; destroy only fails on a null descriptor
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  CudnnDescriptor(CudnnDescriptor&& o) noexcept : desc_(std::exchange(o.desc_, nullptr)) {}
  T get() const { return desc_; }
  operator T() const { return desc_; }

 private:
  T desc_ = nullptr;
};

using TensorDesc = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using LrnDesc = CudnnDescriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;
using ActDesc = CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                cudnnDestroyActivationDescriptor>;

// cuDNN's legacy API takes int extents; a tensor past that is refused with the op's name rather
// than truncated.
inline int to_int_dim(int64_t v, const char* op) {
  if (v < 0 || v > 0x7fffffff) throw_runtime("{} on cuda: extent {} does not fit cuDNN's int dimensions", op, v);
  return static_cast<int>(v);
}

inline cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::I32: return CUDNN_DATA_INT32;
    case DType::I8:
      return CUDNN_DATA_INT8;
    case DType::U8:
      return CUDNN_DATA_UINT8;
  }
  return CUDNN_DATA_FLOAT;
}

inline cudnnTensorFormat_t cudnn_format(Layout l) { return l == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

// Packed descriptor for (N, C, H, W) of storage `t` in memory order `l`; missing trailing dims of
// `s` count as 1, and dims past the fourth are folded into W (contiguous, so the layout is unchanged).
inline void set_nchw(cudnnTensorDescriptor_t d, const Shape& s, const char* op, DType t = DType::F32,
                     Layout l = Layout::NCHW) {
  int64_t w = s.w();
  for (int i = 4; i < s.rank(); ++i) w *= s[i];
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, cudnn_format(l), cudnn_type(t), to_int_dim(s.n(), op),
                                         to_int_dim(s.c(), op), to_int_dim(s.h(), op), to_int_dim(w, op)));
}
// The descriptor of tensor `x` as it is: its shape, dtype and layout.
inline void set_desc(cudnnTensorDescriptor_t d, const Tensor& x, const char* op) {
  set_nchw(d, x.shape(), op, x.dtype(), x.layout());
}
inline void set_nchw(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h, int64_t w, const char* op,
                     DType t = DType::F32) {
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(t), to_int_dim(n, op), to_int_dim(c, op),
                                         to_int_dim(h, op), to_int_dim(w, op)));
}

}  // namespace cnnscale::cuda
