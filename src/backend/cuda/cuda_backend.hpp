// CudaBackend: the Backend on one GPU, or on a partition of its SMs (a green context). One
// non-blocking compute stream owned by the backend, cuDNN and cuBLAS handles bound to it, a growable
// device workspace and staging buffers; the convolutions (per-shape plans, measured algorithms and
// forms) are a cuda::ConvEngine of its own. Accessors at the bottom are for the multi-GPU code.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_backend_options.hpp"
#include "backend/cuda/cuda_backend_parts.hpp"
#include "backend/cuda/cuda_conv_engine.hpp"
#include "backend/cuda/cuda_conv_forms.hpp"
#include "backend/cuda/cuda_conv_plan.hpp"
#include "backend/cuda/cuda_linear_plans.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "backend/cuda/cudnn_graph.hpp"
#include "backend/cuda/cupti_metrics.hpp"
#include "backend/cuda/cupti_trace.hpp"
#include "backend/cuda/device_context.hpp"
#include "backend/memory_counter.hpp"
#include "core/log.hpp"

namespace cnnscale {

namespace cuda {
struct CudaTimingEvent;  // cuda_timing_event.hpp
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  // Throws RuntimeError if the device does not exist or cannot be initialised.
  explicit CudaBackend(int device_index, CudaBackendOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device{Device::Kind::CUDA, device_}; }
  std::string description() const override;
  int granted_sms() const override { return ctx_->granted_sms(); }
  // Channels-last wherever tensor cores compute: 16-bit, and f32 with TF32 allowed (cuDNN's tensor-op
  // convolutions run NHWC natively and transpose NCHW operands around the kernel; its persistent
  // batch-norm kernels are NHWC only). Strict fp32 keeps NCHW, where its FMA algorithms are.
  Layout activation_layout_for(DType compute) const override {
    if (options_.layout != LayoutChoice::Auto)
      return options_.layout == LayoutChoice::NHWC ? Layout::NHWC : Layout::NCHW;
    return compute == DType::BF16 || compute == DType::F16 || (compute == DType::F32 && options_.allow_tf32)
               ? Layout::NHWC
               : Layout::NCHW;
  }

  // Stream-ordered (cudaMallocAsync on the compute stream, zeroed there); freed in the same stream
  // order when the last view dies. Work on another stream must be ordered before the compute
  // stream (an event) before such a tensor is released.
  Tensor alloc(const Shape& shape, DType dtype = DType::F32) override;
  // Tensors from alloc() and the convolution workspace (cuDNN's own scratch during an algorithm
  // search is not counted).
  MemoryStats memory_stats() const override { return memory_->stats(); }
  void reset_peak_memory() override { memory_->reset_peak(); }
  std::shared_ptr<Storage> alloc_host(size_t bytes) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& t, float value) override;
  void fill_i32(const Tensor& t, int32_t value) override;
  void convert(const Tensor& src, const Tensor& dst, float scale = 1.0f) override;
  void convert_scaled_at(const Tensor& src, const Tensor& dst, const Tensor& scale) override;
  void convert_segments(const Tensor& src, const Tensor& dst, const Tensor& ranges) override;
  void synchronize() override;
  // Timing events: timing-enabled CUDA events recorded on the compute stream (no host sync).
  std::shared_ptr<TimingEvent> record_timing_event() override;
  bool timing_event_done(const TimingEvent& e) override;
  double elapsed_ms(const TimingEvent& a, const TimingEvent& b) override;
  // A CUDA graph of `work`, captured on the compute stream (thread-local capture mode: any call in
  // `work` that would synchronise fails the capture with an error naming it). Other streams may join
  // the capture through events (the communication stream does): with Points::Nodes they need only
  // have joined it again by its end.
  bool can_capture() const override { return true; }
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work,
                                        const CaptureOptions& options = {}) override {
    return capture_->capture(work, options);
  }
  size_t capture_timing_point() override { return capture_timing_point(stream()); }
  // A timing point on `stream`, which must be part of the capture in progress (the compute stream,
  // or one forked from it); another stream than the compute stream needs Points::Nodes.
  size_t capture_timing_point(cudaStream_t stream) { return capture_->capture_timing_point(stream); }
  bool capturing() const { return capture_->capturing(); }
  // CUPTI's activity records (cupti_trace.cpp); ConfigError in a build without CUPTI.
  std::unique_ptr<KernelTracer> trace_kernels() override { return cuda::make_cupti_tracer(*this); }
  // Hardware counters per kernel from CUPTI's range profiler (cupti_metrics.cpp); ConfigError in a
  // build without CUPTI, or where the device, driver or permissions give no counters.
  std::unique_ptr<KernelMetricProfiler> kernel_metric_profiler() override {
    return cuda::make_cupti_metric_profiler(*this);
  }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
            float beta, float* c) override;
  // cublasGemmEx: bf16/f16 operands with fp32 accumulation (CUBLAS_COMPUTE_32F), f32 as gemm().
  void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
              const Tensor& b, float beta, const Tensor& c) override;
  void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) override;
  void bias_add(const Tensor& bias, const Tensor& y) override;
  void bias_backward(const Tensor& dy, const Tensor& dbias) override;
  // One cuBLASLt matmul with the bias, ReLU or bias gradient in its epilogue (cuda_linear.cpp) in
  // the tensor-core precisions; strict fp32 keeps cuBLAS's SGEMM and the ops apart, as convolutions.
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y) override {
    linear_->linear_forward(x, w, bias, relu, y);
  }
  void linear_backward_params(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& dbias) override {
    linear_->linear_backward_params(x, dy, dw, dbias);
  }

  // The convolutions run in cuda::ConvEngine (cuda_conv_engine.hpp).
  void conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) override {
    conv_->conv_forward(p, x, w, y);
  }
  void conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Tensor& y) override {
    conv_->conv_forward_bias_relu(p, x, w, bias, y);
  }
  // One cuDNN graph plan (convolution, bias, addend, ReLU) where one measured faster than
  // conv_forward followed by the three element-wise ops; otherwise those. Strict fp32 and
  // deterministic runs keep the ops apart, as conv_forward_bias_relu does.
  void conv_forward_residual(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Tensor& addend, const Tensor& y) override {
    conv_->conv_forward_residual(p, x, w, bias, addend, y);
  }
  // The same with the bias alone (convolution and bias in one graph plan, or the two ops).
  void conv_forward_bias(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y) override {
    conv_->conv_forward_bias(p, x, w, bias, y);
  }
  // int8: quantize_int8 one kernel (cuda_activation.cpp); the convolution one cuDNN graph plan per
  // shape, the fastest offered (cuda_int8.cpp); the fully connected layer cuBLASLt (cuda_linear.cpp).
  void quantize_int8(const Tensor& x, float scale, const Tensor& q) override;
  void conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                         const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                         const Tensor& y) override {
    conv_->conv_forward_int8(p, xq, wq, scale, bias, addend, addend_scale, relu, y);
  }
  void linear_forward_int8(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias, bool relu,
                           const Tensor& y) override {
    linear_->linear_forward_int8(xq, wq, scale, bias, relu, y);
  }
  void conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) override {
    conv_->conv_backward_data(p, w, dy, dx);
  }
  void conv_backward_data_add(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& scratch) override {
    conv_->conv_backward_data_add(p, w, dy, dx, scratch);
  }
  void conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) override {
    conv_->conv_backward_filter(p, x, dy, dw);
  }

  // Saves each window's argmax (a byte per element of y) where the backward's gather runs on it:
  // channels-last max pooling with overlapping windows (ResNet's 3x3 stride-2 pool).
  int64_t pool_saved_bytes(const PoolParams& p, const Shape& shape, DType dtype, Layout layout) const override {
    return pool_->pool_saved_bytes(p, shape, dtype, layout);
  }
  void pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& saved = Tensor()) override {
    pool_->pool_forward(p, x, y, saved);
  }
  void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                     const Tensor& saved = Tensor()) override {
    pool_->pool_backward(p, x, y, dy, dx, saved);
  }

  void relu_forward(const Tensor& x, const Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;

  void dropout_forward(float ratio, uint64_t seed, uint64_t stream, const Tensor& x, const Tensor& y) override;
  void dropout_backward(float ratio, uint64_t seed, uint64_t stream, const Tensor& dy, const Tensor& dx) override;
  void dropout_forward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& x,
                          const Tensor& y) override;
  void dropout_backward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& dy,
                           const Tensor& dx) override;

  void lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y) override { norm_->lrn_forward(p, x, y); }
  void lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) override {
    norm_->lrn_backward(p, x, y, dy, dx);
  }

  void batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                               const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                               const Tensor& save_mean, const Tensor& save_inv_std,
                               const BatchNormFused& fused = {}) override {
    norm_->batchnorm_forward_train(p, x, scale, shift, running_mean, running_var, y, save_mean, save_inv_std, fused);
  }
  void batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                                   const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                   const BatchNormFused& fused = {}) override {
    norm_->batchnorm_forward_inference(p, x, scale, shift, running_mean, running_var, y, fused);
  }
  void batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& scale,
                          const Tensor& save_mean, const Tensor& save_inv_std, const Tensor& dx, const Tensor& dscale,
                          const Tensor& dshift, const BatchNormFused& fused = {}) override {
    norm_->batchnorm_backward(p, x, dy, scale, save_mean, save_inv_std, dx, dscale, dshift, fused);
  }

  void softmax_forward(const Tensor& x, const Tensor& prob) override;
  void cross_entropy_loss(const Tensor& prob, const Tensor& labels, const Tensor& loss) override;
  void softmax_cross_entropy_backward(const Tensor& prob, const Tensor& labels, float scale, const Tensor& dx) override;
  void accuracy_topk(const Tensor& scores, const Tensor& labels, const std::vector<int>& ks,
                     const Tensor& out) override;

  void decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out) override;
  void copy_channels(const Tensor& src, int64_t src_c, const Tensor& dst, int64_t dst_c, int64_t channels) override;

  void sgd_update(const Tensor& w, const Tensor& dw, const Tensor& history, float lr, float momentum,
                  float weight_decay) override;
  void sgd_update_segments(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                           const Tensor& mults, float lr, float momentum, float weight_decay,
                           const SgdMirrors& mirrors = SgdMirrors()) override;
  void flag_nonfinite(const Tensor& x, int32_t tag, const Tensor& flag) override;
  void sgd_update_segments_at(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                              const Tensor& mults, const Tensor& lr, float momentum, float weight_decay,
                              const Tensor& skip = Tensor(), const SgdMirrors& mirrors = SgdMirrors(),
                              const GradCheck& check = GradCheck()) override;
  bool sgd_reads_mirror_grads() const override { return true; }
  void update_loss_scale(const Tensor& found_inf, const Tensor& scale, const Tensor& state, const Tensor& tag,
                         const Tensor& nonfinite, int64_t growth_interval, float max_scale) override;
  void axpby_unless(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& skip) override;
  void flag_nonfinite_at(const Tensor& x, const Tensor& tag, const Tensor& flag) override;

  // ---- for multi-GPU code, benchmarks and tests (not part of the Backend interface) -----------
  cudaStream_t stream() const;
  // While a LaneScope lives, convert() (and its scaled forms) and the segmented SGD updates queue
  // on `lane`, a stream of this backend's context, instead of the compute stream: the NCCL
  // communicator runs a reduced bucket's widening and update there (after_collectives). Every
  // other op is an error meanwhile: they share library handles, workspaces, staging buffers and
  // the allocator's stream order with the compute stream, which the lane must not touch.
  class LaneScope {
   public:
    LaneScope(CudaBackend& backend, cudaStream_t lane);
    ~LaneScope();
    LaneScope(const LaneScope&) = delete;
    LaneScope& operator=(const LaneScope&) = delete;

   private:
    CudaBackend& backend_;
  };
  int device_index() const { return device_; }
  cudnnHandle_t cudnn_handle() const { return cudnn_; }
  cublasHandle_t cublas_handle() const { return cublas_; }
  const CudaBackendOptions& options() const { return options_; }
  const std::string& device_name() const { return device_name_; }
  int sm_count() const { return sm_count_; }  // the device's, whatever the partition
  // The context every call of this backend runs in; shared by its allocations, timing events and
  // the NCCL communicator, so it is destroyed after everything that lives in it.
  const std::shared_ptr<cuda::DeviceContext>& context() const { return ctx_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Per direction run: its form (lowered, width-lowered, channels-first, channel-padded) and the
  // cuDNN algorithm or graph-API plan chosen for it.
  std::string conv_implementation(const ConvSignature& call) const override { return conv_->conv_implementation(call); }
  // The plan (with measured algorithms) for a convolution shape and dtype, or nullptr if not yet used.
  const ConvPlan* find_conv_plan(const ConvParams& p, const Shape& x, const Shape& w, DType dtype = DType::F32,
                                 Layout layout = Layout::NCHW) const {
    return conv_->find_conv_plan(p, x, w, dtype, layout);
  }
  // How many inputs the lowered and width-lowered forms have lowered (im2col passes) so far: a
  // filter gradient after its forward adds none where it reads the forward's lowering.
  int64_t input_lowerings() const { return conv_->input_lowerings(); }
  // Whether pool_forward/backward hand this shape to cuDNN (true) or to cnnscale's Caffe-rule
  // kernels (false: ceil-mode output larger than cuDNN's floor output).
  static bool cudnn_can_pool(const PoolParams& p, const Shape& x) { return cuda::Pooling::cudnn_can_pool(p, x); }

 private:
  // The parts work on this backend's stream, handles, workspace, staging and scratch descriptors.
  friend class cuda::ConvEngine;
  friend class cuda::ConvAlgorithms;
  friend class cuda::GraphCapture;
  friend class cuda::LinearOps;
  friend class cuda::Normalization;
  friend class cuda::Pooling;
  void run_dropout(const char* op, const char* in_name, const char* out_name, float ratio, uint64_t seed,
                   uint64_t rng_stream, const Tensor* iteration, uint64_t layer, const Tensor& in, const Tensor& out);
  void launch_segments(const char* op, const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                       const Tensor& mults, float lr, const float* lr_at, float momentum, float weight_decay,
                       const int32_t* skip_at, const SgdMirrors& mirrors, const GradCheck& check = GradCheck());
  // Called wherever a buffer the backend keeps for itself (workspace, staging, batch-norm reserve)
  // is replaced: captured work that used the old one is no longer valid.
  void buffers_moved() { ++*buffer_generation_; }
  // convert() and convert_scaled_at(): the scale is `scale`, or read at scale_at on the device.
  void convert_with(const Tensor& src, const Tensor& dst, float scale, const float* scale_at);
  struct DeviceStream;  // context + stream, shared with every allocation's deleter

  // Make this backend's context current: its device's primary context, or its green context (ops
  // may interleave with other backends). An error inside a LaneScope: the op calling it may not
  // run on a lane.
  void activate() const;
  // The same for the ops that may run on a lane, and the stream they queue on.
  void activate_lane_op() const;
  cudaStream_t op_stream() const;
  cudaStream_t lane_ = nullptr;  // set by a LaneScope
  // A device workspace of at least `bytes`, valid in stream order until the next call.
  void* workspace(size_t bytes);
  // Staging tensor `slot` (0..9; 4 holds lowered convolution inputs, 5..7 channels-first convolution
  // operands, 8 and 9 the width-lowered input and filter or filter gradient) of `shape` and `dtype`
  // for ops that run a kernel on reordered, widened or lowered copies (LRN, Caffe-rule pooling,
  // convolution forms): kept and grown across calls, not zeroed (each use overwrites it), valid in
  // stream order until the next use of that slot.
  Tensor staging(size_t slot, const Shape& shape, DType dtype = DType::F32);
  // Staging tensor `slot` holding `src` converted to `dtype` (NCHW): an op's input on its way in.
  Tensor staged(size_t slot, const Tensor& src, DType dtype) {
    Tensor t = staging(slot, src.shape(), dtype);
    convert(src, t);
    return t;
  }

  int device_ = 0;
  CudaBackendOptions options_;
  std::shared_ptr<cuda::DeviceContext> ctx_;  // before every other CUDA object: created first
  std::shared_ptr<DeviceStream> ds_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::string device_name_;
  int sm_count_ = 0;
  size_t total_memory_ = 0;
  int cc_major_ = 0, cc_minor_ = 0;

  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // Shared with every allocation's deleter, like ds_: a tensor may be freed after the backend.
  std::shared_ptr<MemoryCounter> memory_ = std::make_shared<MemoryCounter>();
  std::array<Tensor, 10> staging_;  // see staging()
  // What staging() and workspace() hand out instead during a convolution form's timed trial
  // (cuda_conv_forms.hpp, installed by cuda::ConvEngine's TrialStaging).
  TrialBuffers trial_;
  // buffers_moved() count, shared with captured work (which may outlive the backend's last use).
  std::shared_ptr<uint64_t> buffer_generation_ = std::make_shared<uint64_t>(0);

  // Scratch descriptors for the non-convolution ops, re-set on each call.
  cuda::TensorDesc desc_a_, desc_b_;

  // The parts, on the resources above (destroyed before them; ~CudaBackend destroys the convolutions'
  // and the fully connected layers' plans before the handles).
  std::unique_ptr<cuda::ConvEngine> conv_ = std::make_unique<cuda::ConvEngine>(*this);
  std::unique_ptr<cuda::GraphCapture> capture_ = std::make_unique<cuda::GraphCapture>(*this);
  std::unique_ptr<cuda::LinearOps> linear_ = std::make_unique<cuda::LinearOps>(*this);
  std::unique_ptr<cuda::Normalization> norm_;  // made in the constructor, once the handles are
  std::unique_ptr<cuda::Pooling> pool_ = std::make_unique<cuda::Pooling>(*this);
};

}  // namespace cnnscale
