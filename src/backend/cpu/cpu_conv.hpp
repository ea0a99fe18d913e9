// The CPU backend's convolution (Caffe's approach: im2col/col2im per sample and group, then one
// sgemm each) and the int8 inference reference built on it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/cpu_memory.hpp"
#include "backend/op_params.hpp"
#include "core/tensor.hpp"

namespace cnnscale::cpu {

// Row-major C = alpha * op(A) * op(B) + beta * C through cblas_sgemm (the backend's gemm too).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
           float beta, float* c);

// f32 convolution by im2col + sgemm; owns the column buffer, reused across calls: (C / groups * R * S,
// P * Q) for one sample and group. The buffer is host scratch, not counted in the memory stats.
class Im2colConvolution {
 public:
  void forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y);
  // add: dx += the gradient (the sgemm's beta 1, or col2im onto dx as it is) instead of dx = it.
  void backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx, bool add = false);
  void backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw);
  static std::string implementation(const ConvSignature& call);

 private:
  std::vector<float> col_;
};

// The int8 inference ops (cpu_int8.cpp), the reference the GPU's int8 kernels are checked against:
// NCHW, y and addend f32 or i8. The convolution widens its operands into tensors of the backend's
// memory (counted as the backend's other tensors are) and runs the f32 convolution on them.
class Int8Reference {
 public:
  Int8Reference(HostMemory& memory, Im2colConvolution& conv) : memory_(memory), conv_(conv) {}
  void quantize(const Tensor& x, float scale, const Tensor& q);
  void conv_forward(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias,
                    const Tensor& addend, const Tensor& addend_scale, bool relu, const Tensor& y);
  void linear_forward(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias, bool relu,
                      const Tensor& y);

 private:
  Tensor widened(const Tensor& q);
  HostMemory& memory_;
  Im2colConvolution& conv_;
};

}  // namespace cnnscale::cpu
