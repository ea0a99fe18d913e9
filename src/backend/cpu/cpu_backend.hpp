// CpuBackend: the reference implementation of every Backend op. Plain C++ loops plus OpenBLAS
// (cblas_sgemm) for GEMM and for convolution via im2col/col2im. Every op runs immediately on the
// calling thread (BLAS may use its own threads); it is the ground truth the CUDA backend is tested against.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_conv.hpp"
#include "backend/cpu/cpu_memory.hpp"

namespace cnnscale {

class CpuBackend final : public Backend {
 public:
  CpuBackend() = default;

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device{}; }
  std::string description() const override;

  // ---- memory (cpu_memory.cpp; the rest in cpu_backend.cpp) ----
  Tensor alloc(const Shape& shape, DType dtype = DType::F32) override { return memory_.alloc(shape, dtype); }
  std::shared_ptr<Storage> alloc_host(size_t bytes) override { return memory_.alloc_host(bytes); }
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& t, float value) override;
  void fill_i32(const Tensor& t, int32_t value) override;
  void convert(const Tensor& src, const Tensor& dst, float scale = 1.0f) override;
  void synchronize() override {}

  // ---- BLAS-like (cpu_backend.cpp) ----
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
            float beta, float* c) override;
  void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) override;
  void bias_add(const Tensor& bias, const Tensor& y) override;
  void bias_backward(const Tensor& dy, const Tensor& dbias) override;

  // ---- convolution (cpu::Im2colConvolution, cpu_conv.cpp) ----
  void conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) override {
    conv_.forward(p, x, w, y);
  }
  // The int8 reference (cpu::Int8Reference, cpu_int8.cpp): NCHW, y and addend f32 or i8.
  void quantize_int8(const Tensor& x, float scale, const Tensor& q) override { int8_.quantize(x, scale, q); }
  void conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                         const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                         const Tensor& y) override {
    int8_.conv_forward(p, xq, wq, scale, bias, addend, addend_scale, relu, y);
  }
  void linear_forward_int8(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias, bool relu,
                           const Tensor& y) override {
    int8_.linear_forward(xq, wq, scale, bias, relu, y);
  }
  void conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) override {
    conv_.backward_data(p, w, dy, dx);
  }
  void conv_backward_data_add(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& /*scratch*/) override {
    conv_.backward_data(p, w, dy, dx, /*add=*/true);
  }
  bool adds_gradients_in_place() const override { return true; }
  void conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) override {
    conv_.backward_filter(p, x, dy, dw);
  }
  std::string conv_implementation(const ConvSignature& call) const override {
    return cpu::Im2colConvolution::implementation(call);
  }

  // ---- pooling and LRN (cpu_pool_lrn.cpp) ----
  void pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& saved = Tensor()) override;
  // The CPU saves nothing (pool_saved_bytes is 0): its backward finds each window's maximum again.
  void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                     const Tensor& saved = Tensor()) override;
  void lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y) override;
  void lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) override;

  // ---- element-wise: activation, dropout (cpu_backend.cpp) ----
  void relu_forward(const Tensor& x, const Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void dropout_forward(float ratio, uint64_t seed, uint64_t stream, const Tensor& x, const Tensor& y) override;
  void dropout_backward(float ratio, uint64_t seed, uint64_t stream, const Tensor& dy, const Tensor& dx) override;

  // ---- batch norm (cpu_norm.cpp) ----
  void batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                               const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                               const Tensor& save_mean, const Tensor& save_inv_std,
                               const BatchNormFused& fused = {}) override;
  void batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                                   const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                   const BatchNormFused& fused = {}) override;
  void batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& scale,
                          const Tensor& save_mean, const Tensor& save_inv_std, const Tensor& dx, const Tensor& dscale,
                          const Tensor& dshift, const BatchNormFused& fused = {}) override;

  // ---- softmax, loss, accuracy, concat, solver (cpu_loss.cpp) ----
  void softmax_forward(const Tensor& x, const Tensor& prob) override;
  void cross_entropy_loss(const Tensor& prob, const Tensor& labels, const Tensor& loss) override;
  void softmax_cross_entropy_backward(const Tensor& prob, const Tensor& labels, float scale, const Tensor& dx) override;
  void accuracy_topk(const Tensor& scores, const Tensor& labels, const std::vector<int>& ks,
                     const Tensor& out) override;
  void copy_channels(const Tensor& src, int64_t src_c, const Tensor& dst, int64_t dst_c, int64_t channels) override;
  void decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out) override;
  void sgd_update(const Tensor& w, const Tensor& dw, const Tensor& history, float lr, float momentum,
                  float weight_decay) override;
  void flag_nonfinite(const Tensor& x, int32_t tag, const Tensor& flag) override;

  // ---- memory accounting: the tensors from alloc(). The im2col scratch (one sample and group of
  // one convolution at a time) is host scratch, not counted.
  MemoryStats memory_stats() const override { return memory_.stats(); }
  void reset_peak_memory() override { memory_.reset_peak(); }

 private:
  cpu::HostMemory memory_;
  cpu::Im2colConvolution conv_;
  cpu::Int8Reference int8_{memory_, conv_};
};

}  // namespace cnnscale
