// CudaBackend: the Backend on one GPU, or on a partition of its SMs (a green context). One
// non-blocking compute stream owned by the backend, cuDNN and cuBLAS handles bound to it, a growable
// device workspace, and per-shape convolution plans (descriptors + measured algorithms). Accessors
// at the bottom are for the multi-GPU code.
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
#include "backend/cuda/cuda_conv_forms.hpp"
#include "backend/cuda/cuda_conv_plan.hpp"
#include "backend/cuda/cuda_linear_plans.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "backend/cuda/cudnn_graph.hpp"
#include "backend/cuda/device_context.hpp"
#include "backend/memory_counter.hpp"
#include "core/log.hpp"

namespace cnnscale {

namespace cuda {
struct CudaTimingEvent;  // cuda_timing_event.hpp
struct Im2colShape;      // cuda_kernels.hpp
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
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work, const CaptureOptions& options = {}) override;
  size_t capture_timing_point() override { return capture_timing_point(stream()); }
  // A timing point on `stream`, which must be part of the capture in progress (the compute stream,
  // or one forked from it); another stream than the compute stream needs Points::Nodes.
  size_t capture_timing_point(cudaStream_t stream);
  bool capturing() const { return capture_mode_ != CaptureMode::None; }

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
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y) override;
  void linear_backward_params(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& dbias) override;

  void conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) override;
  void conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Tensor& y) override;
  // One cuDNN graph plan (convolution, bias, addend, ReLU) where one measured faster than
  // conv_forward followed by the three element-wise ops; otherwise those. Strict fp32 and
  // deterministic runs keep the ops apart, as conv_forward_bias_relu does.
  void conv_forward_residual(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Tensor& addend, const Tensor& y) override;
  // The same with the bias alone (convolution and bias in one graph plan, or the two ops).
  void conv_forward_bias(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y) override;
  // int8 (cuda_int8.cpp): one kernel; one cuDNN graph plan per convolution shape, the fastest offered.
  void quantize_int8(const Tensor& x, float scale, const Tensor& q) override;
  void conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                         const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                         const Tensor& y) override;
  void linear_forward_int8(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias, bool relu,
                           const Tensor& y) override;
  void conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) override;
  void conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) override;

  // Saves each window's argmax (a byte per element of y) where the backward's gather runs on it:
  // channels-last max pooling with overlapping windows (ResNet's 3x3 stride-2 pool).
  int64_t pool_saved_bytes(const PoolParams& p, const Shape& shape, DType dtype, Layout layout) const override;
  void pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& saved = Tensor()) override;
  void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                     const Tensor& saved = Tensor()) override;

  void relu_forward(const Tensor& x, const Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;

  void dropout_forward(float ratio, uint64_t seed, uint64_t stream, const Tensor& x, const Tensor& y) override;
  void dropout_backward(float ratio, uint64_t seed, uint64_t stream, const Tensor& dy, const Tensor& dx) override;
  void dropout_forward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& x,
                          const Tensor& y) override;
  void dropout_backward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& dy,
                           const Tensor& dx) override;

  void lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y) override;
  void lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx) override;

  void batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                               const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                               const Tensor& save_mean, const Tensor& save_inv_std,
                               const BatchNormFused& fused = {}) override;
  void batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                   const Tensor& shift, const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& y, const BatchNormFused& fused = {}) override;
  void batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& scale,
                          const Tensor& save_mean, const Tensor& save_inv_std, const Tensor& dx,
                          const Tensor& dscale, const Tensor& dshift,
                          const BatchNormFused& fused = {}) override;

  void softmax_forward(const Tensor& x, const Tensor& prob) override;
  void cross_entropy_loss(const Tensor& prob, const Tensor& labels, const Tensor& loss) override;
  void softmax_cross_entropy_backward(const Tensor& prob, const Tensor& labels, float scale,
                                      const Tensor& dx) override;
  void accuracy_topk(const Tensor& scores, const Tensor& labels, const std::vector<int>& ks,
                     const Tensor& out) override;

  void decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out) override;
  void copy_channels(const Tensor& src, int64_t src_c, const Tensor& dst, int64_t dst_c,
                     int64_t channels) override;

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
  std::string conv_implementation(const ConvSignature& call) const override;
  // The plan (with measured algorithms) for a convolution shape and dtype, or nullptr if not yet used.
  const ConvPlan* find_conv_plan(const ConvParams& p, const Shape& x, const Shape& w, DType dtype = DType::F32,
                                 Layout layout = Layout::NCHW) const;
  // How many inputs the lowered and width-lowered forms have lowered (im2col passes) so far: a
  // filter gradient after its forward adds none where it reads the forward's lowering.
  int64_t input_lowerings() const { return forms_.input_lowerings; }
  // Whether pool_forward/backward hand this shape to cuDNN (true) or to cnnscale's Caffe-rule
  // kernels (false: ceil-mode output larger than cuDNN's floor output).
  static bool cudnn_can_pool(const PoolParams& p, const Shape& x);

 private:
  using ConvKey = std::array<int64_t, 16>;
  using KeptForm = ConvFormState::KeptForm;  // cuda_conv_forms.hpp
  void run_dropout(const char* op, const char* in_name, const char* out_name, float ratio, uint64_t seed,
                   uint64_t rng_stream, const Tensor* iteration, uint64_t layer, const Tensor& in, const Tensor& out);
  void launch_segments(const char* op, const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                       const Tensor& mults, float lr, const float* lr_at, float momentum, float weight_decay,
                       const int32_t* skip_at, const SgdMirrors& mirrors, const GradCheck& check = GradCheck());
  // Called wherever a buffer the backend keeps for itself (workspace, staging, batch-norm reserve)
  // is replaced: captured work that used the old one is no longer valid.
  void buffers_moved() { ++*buffer_generation_; }
  // linear_plans_.run() on this backend's workspace and stream.
  void run_linear(cuda::LinearPlan& plan, const void* a, const void* b, void* c, void* bias);
  // convert() and convert_scaled_at(): the scale is `scale`, or read at scale_at on the device.
  void convert_with(const Tensor& src, const Tensor& dst, float scale, const float* scale_at);
  static ConvKey conv_key(const ConvParams& p, const Shape& x, const Shape& w, DType dtype, Layout layout);
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
  ConvPlan& conv_plan(const char* op, const ConvParams& p, const Shape& x, const Shape& w, DType dtype, Layout layout);
  // Staging `slot` shaped as channels-last `t` with `channels` channels (contents undefined).
  Tensor channels_staging(size_t slot, const Tensor& t, int64_t channels);
  // `t` (channels-last, C innermost) copied into staging `slot` with `channels` channels: zero-padded
  // when channels > C, cut back when channels < C.
  Tensor with_channels(size_t slot, const Tensor& t, int64_t channels);
  // Copies the first dst.c() channels of every pixel of `padded` into dst (channels-last).
  void unpad_channels(const Tensor& padded, const Tensor& dst);
  // Whether the direction `algo` of `plan` (&ConvPlan::fwd, ...) runs on plan.padded, as recorded in
  // plan.*on_padded. Its first call runs the searches that decide it: find_plain() on the plan as
  // given (unless padding is always on), find_padded() on the padded plan where there is one.
  template <typename FindPlain, typename FindPadded>
  bool runs_padded(const char* op, ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, bool ConvPlan::*on_padded,
                   FindPlain&& find_plain, FindPadded&& find_padded);
  void find_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y);
  // One direction on `plan` with its chosen algorithm (searched before).
  void run_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y);
  // The plan conv_forward runs for these operands and the operands it takes (ForwardOperands).
  // `lowered`, `first`, `width`: the caller's lowered, channels-first and width-lowered decisions;
  // where any is Yes the operands are returned as given. Both forwards begin here (forward_begins).
  ForwardOperands forward_operands(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y,
                                   ConvPlan::Choice ConvPlan::*lowered, ConvPlan::Choice ConvPlan::*first,
                                   ConvPlan::Choice ConvPlan::*width);
  // A convolution direction's search or run on `plan`, its operands in the direction's order:
  // (x, w, y) forward, (w, dy, dx) backward data, (x, dy, dw) backward filter.
  using ConvCall = void (CudaBackend::*)(ConvPlan&, const Tensor&, const Tensor&, const Tensor&);
  // One direction of `plan` in its channels-first form (CudaBackendOptions::channels_first).
  void run_channels_first(ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, ConvCall find, ConvCall run,
                          const ChannelsFirstOperand& a, const ChannelsFirstOperand& b,
                          const ChannelsFirstOperand& out);
  // Runs run_b() where `decision` of `plan` is Yes, run_a() where No; at the first call (Unsearched)
  // b_wins() decides it. run_faster_order and run_faster_form are its two uses.
  template <typename Decide, typename RunA, typename RunB>
  void run_chosen(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, Decide&& b_wins, RunA&& run_a, RunB&& run_b);
  // Runs run_first() (the channels-first form) or run_given() (the op on its channels-last operands)
  // as `decision` says; decided at the first call, by timing both where measured
  // (form_measures_faster, its copies in transient staging: forms_.trial_staging).
  template <typename RunGiven, typename RunFirst>
  void run_faster_order(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, RunGiven&& run_given,
                        RunFirst&& run_first);
  // Whether a form (run_form) measures faster than the op as it runs otherwise (run_other), timed
  // with `slots` transient (TrialStaging). No memory for them, or a form that fails in its trial
  // (e.g. no usable algorithm for its shape, logged at `failure`), loses.
  template <typename RunOther, typename RunForm>
  bool form_measures_faster(const char* op, const ConvPlan& plan, const StagingSlots& slots, const char* other_name,
                            RunOther&& run_other, const char* form_name, RunForm&& run_form, log::Level failure);
  // Whether run_b() measures faster than run_a() (each run once untimed, then the median of timed
  // runs), logged under the two names; it takes the notes of the trial (forms_.trial_notes) first.
  template <typename RunA, typename RunB>
  bool second_measures_faster(const char* op, const ConvPlan& plan, const char* a_name, RunA&& run_a,
                              const char* b_name, RunB&& run_b);
  void prime_switched_forward(const Tensor& x);
  // Runs trial(), a form's measured trial for `decision` of `plan`, with its notes; whether the form runs.
  template <typename Lower, typename Trial>
  bool noted_trial(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, ConvPlan::FormTrial ConvPlan::*forward_trial,
                   Lower&& lower, Trial&& trial);
  // `t` reordered into staging `slot` in memory order `to` (cudnnTransformTensor); reorder() into
  // a given tensor.
  Tensor reordered(size_t slot, const Tensor& t, Layout to);
  void reorder(const Tensor& src, const Tensor& dst);
  // The lowered convolution (conv_lowering, cuda_conv_lowered.cpp).
  bool lowerable(const ConvPlan& plan) const;
  static Shape lowered_shape(const ConvPlan& plan);  // (n*oh*ow, the field padded to whole 16-byte rows)
  // Likewise for the lowered form, slot 4 (forms_.kept).
  Tensor lowered_input(const ConvPlan& plan, const Tensor& x, bool forward);
  Tensor lowered_filter(const ConvPlan& plan, const Tensor& w, size_t slot);
  void run_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                           const Tensor& y);
  void run_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  // Runs run_lowered() or run_cudnn() (the op as it runs otherwise), as `decision` of `plan` says;
  // decided at the first call, where measured, by timing both on the op's buffers
  // (lowered_measures_faster).
  template <typename RunCudnn, typename RunLowered>
  bool lowered_measures_faster(const char* op, const ConvPlan& plan, RunCudnn&& run_cudnn, RunLowered&& run_lowered);
  // `lower`, for the filter gradient only: x's lowering alone (noted_trial).
  template <typename RunCudnn, typename RunLowered, typename Lower = std::nullptr_t>
  void run_faster_form(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, RunCudnn&& run_cudnn,
                       RunLowered&& run_lowered, Lower&& lower = nullptr);
  // Whether a width-lowered input of `lowered_x` for x (in `dtype`) is within the form's bounds.
  static bool width_lowering_fits(const Shape& lowered_x, const Shape& x, DType dtype);
  // The width-lowered form (width_lowering, cuda_conv_lowered.cpp); `forward`: which direction asks.
  Tensor width_lowered_input(const ConvPlan& plan, const Tensor& x, bool forward);
  void run_width_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor* bias,
                                 const Tensor& y);
  void run_width_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  // Runs run_width() or run_other() (the op as it runs otherwise) as `decision` of `plan` says;
  // decided at the first call, where measured, by timing both (form_measures_faster, the copies of
  // both forms in transient staging).
  template <typename RunOther, typename RunWidth, typename Lower = std::nullptr_t>
  void run_faster_width(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, RunOther&& run_other,
                        RunWidth&& run_width, Lower&& lower = nullptr);
  // linear_forward at batch 1 as GEMV (CudaBackendOptions::fc_gemv), once gemv_applies said it can.
  static bool gemv_applies(const Tensor& x, const Tensor& w, const Tensor& y);
  void linear_forward_gemv(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  // linear_forward as one cuBLASLt matmul with its epilogue (or the ops apart where it has none).
  void linear_forward_matmul(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  // FcGemv::Auto: whether GEMV measured faster than the matmul for this call's shape (timed once).
  bool gemv_measures_faster(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  std::map<std::tuple<int64_t, int64_t, int, bool, bool>, bool> gemv_faster_;  // (K, D, dtype, bias, relu)
  // Times the fused bias+ReLU graph plans for `plan` against its forward, bias and ReLU apart.
  void search_bias_relu(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
  // The same for the residual graph plans, against conv_forward (whatever form it runs) and the ops.
  void search_residual(ConvPlan& plan, const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Tensor& addend, const Tensor& y);
  ConvPlan& fused_forward_plan(const char* op, const ConvParams& p, const Tensor& x, const Tensor& w,
                               const Tensor& bias, const Tensor* addend, const Tensor& y);
  bool run_fused_plan(const char* op, const std::shared_ptr<cuda::ConvGraphPlan>& fused, const Tensor& x,
                      const Tensor& w, const Tensor& bias, const Tensor* addend, const Tensor& y);
  // The EngineCache key of a search on this backend: `what` after what decides what was measured.
  std::string engine_cache_key(const std::string& what) const;
  // `op` and a convolution plan's dtype, layout, shapes and parameters: the part of its searches'
  // keys that names the problem.
  static std::string conv_cache_text(const char* op, const ConvPlan& plan);
  // A direction's search result read back from the engine cache; nullopt: search anew (the definition says when).
  std::optional<ConvAlgoChoice> cached_conv_choice(const std::string& text, const ConvPlan& plan,
                                                   cuda::ConvDirection direction, int count,
                                                   const std::array<void*, 3>& operands, size_t limit,
                                                   const std::function<cudnnStatus_t(int, size_t*)>& workspace_size,
                                                   bool (*amplifies)(int));
  // An EngineCache hit: only `engine` is compiled for `spec`, and kept where it runs once (`runs`,
  // on a workspace of its size); null where this GPU does not offer it or it fails here.
  std::unique_ptr<cuda::ConvGraphPlan> cached_graph_plan(
      const std::string& engine, const cuda::ConvGraphSpec& spec,
      const std::function<bool(const cuda::ConvGraphPlan&, void*)>& runs);
  // `key`: the plan map's key (shapes, parameters, y and epilogue), also the engine cache's.
  std::shared_ptr<cuda::ConvGraphPlan> search_int8_conv(const std::string& key, const ConvParams& p, const Tensor& xq,
                                                        const Tensor& wq, const Tensor& scale, const Tensor& bias,
                                                        const Tensor& addend, const Tensor& addend_scale, bool relu,
                                                        const Tensor& y);
  std::map<std::string, std::shared_ptr<cuda::ConvGraphPlan>> int8_conv_plans_;  // by shapes, params, y, epilogue
  Tensor int8_linear_acc_;  // the int32 sums of linear_forward_int8 (cuda_linear.cpp)
  void search_bias(ConvPlan& plan, const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Tensor& y);
  // The fastest graph plan for `spec` where it measures faster than `apart` (the ops apart); else null.
  std::shared_ptr<cuda::ConvGraphPlan> faster_fused_plan(
      const char* op, const ConvPlan& plan, const cuda::ConvGraphSpec& spec, const std::function<void()>& apart,
      const std::function<cudnnStatus_t(const cuda::ConvGraphPlan&, void*)>& execute);
  void run_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx);
  void run_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  void find_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx);
  void find_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  // The search of one direction that the three find_conv_* share (cuda_conv.cpp says how).
  template <typename Perf, typename Heuristic, typename Find, typename WorkspaceSize>
  ConvAlgoChoice search_direction(const char* op, ConvPlan& plan, cuda::ConvDirection direction, int count,
                                  const std::array<void*, 3>& operands, const Shape& x, const Shape& w,
                                  Heuristic&& heuristic, Find&& find, WorkspaceSize&& workspace_size);
  // Makes the fastest graph-API plan of one direction `choice.graph` where it beats the legacy algorithm.
  void search_graph_plans(const char* op, const ConvPlan& plan, cuda::ConvDirection direction, ConvAlgoChoice& choice,
                          void* x, void* w, void* y, void* workspace, size_t workspace_bytes);
  // Runs the chosen graph plan; false when there is none or it cannot take these operands.
  bool run_graph_plan(const ConvAlgoChoice& choice, void* x, void* w, void* y);
  size_t search_workspace_limit() const;
  // 16-bit convolutions use tensor cores, which cuDNN's legacy API only offers them under
  // CUDNN_TENSOR_OP_MATH (under DEFAULT_MATH cudnnFind returned only FMA kernels, 30x slower for
  // bf16 backward data on an H100); f32 ones use TF32 tensor cores only with TF32 allowed.
  cudnnMathType_t conv_math(DType dtype) const {
    if (dtype != DType::F32) return CUDNN_TENSOR_OP_MATH;
    return options_.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
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
  std::map<ConvKey, std::unique_ptr<ConvPlan>> conv_plans_;
  cuda::LinearPlans linear_plans_;  // the fully connected layers' cuBLASLt plans (cuda_linear_plans.hpp)
  // Whether cuDNN's persistent batch-norm kernels may run: not in a green context of fewer SMs than
  // the device. They size their grid for every SM of the device and fail there
  // (CUDNN_STATUS_EXECUTION_FAILED: ResNet-34 bf16 on 66- and 33-SM partitions of an H200), so a
  // partition runs channels-last batch norm through the non-persistent spatial kernels instead.
  bool bn_persistent() const { return ctx_->granted_sms() == 0 || ctx_->granted_sms() >= sm_count_; }
  // Whether a training batch norm of x runs cnnscale's channels-last kernels (cuda_bn_kernels.cu)
  // rather than cuDNN's: channels-last 4-d x, as options_.batchnorm says (Auto: on a partition).
  bool own_batchnorm(const Tensor& x) const {
    if (x.layout() != Layout::NHWC || x.shape().rank() != 4) return false;
    return options_.batchnorm == BatchNormKernels::Cnnscale ||
           (options_.batchnorm == BatchNormKernels::Auto && !bn_persistent());
  }
  // What those kernels' launches over x need: its rows (pixels), the SMs the grid is sized to and
  // a workspace that large (cuda_norm.cpp).
  struct OwnBatchNormLaunch {
    int64_t rows = 0;
    int sms = 0;
    void* workspace = nullptr;
  };
  OwnBatchNormLaunch own_batchnorm_launch(const Tensor& x);
  // Reserve space of channels-last batch norm, from each training forward to its backward, by x.
  std::map<const void*, Tensor> bn_reserve_;
  std::array<Tensor, 10> staging_;  // see staging()
  // The input of `form` for plan: for a filter gradient the kept lowering of x where there is one,
  // else x lowered by `g` into `into`, which is the form's kept slot outside a trial (recorded there
  // for a forward) and a transient buffer in one.
  Tensor lowered_or_kept(KeptForm form, const ConvPlan& plan, const Tensor& x, bool forward,
                         const cuda::Im2colShape& g, const Tensor& into);
  // A forward of `plan` is about to run: what it left in either slot may not be refreshed; the
  // plan's stamps and forward count are taken.
  void forward_begins(ConvPlan& plan);
  struct TrialStaging;  // installs and clears forms_'s trial buffers (cuda_conv_trials.hpp)
  // The convolution forms' kept lowerings and the state of their timed trials (cuda_conv_forms.hpp).
  ConvFormState forms_;
  // buffers_moved() count, shared with captured work (which may outlive the backend's last use).
  std::shared_ptr<uint64_t> buffer_generation_ = std::make_shared<uint64_t>(0);
  // Stream capture in progress (cuda_graph.cpp). Segments: the graphs of the segments ended so far,
  // each timing point ending one. Nodes: the events of the points recorded so far.
  enum class CaptureMode { None, Segments, Nodes };
  void begin_capture_segment(CaptureMode mode);
  void end_capture_segment();
  CaptureMode capture_mode_ = CaptureMode::None;
  std::vector<cudaGraph_t> capture_segments_;
  std::vector<std::shared_ptr<cuda::CudaTimingEvent>> capture_points_;

  // Scratch descriptors for the non-convolution ops, re-set on each call.
  cuda::TensorDesc desc_a_, desc_b_, desc_c_;
  cuda::PoolDesc pool_desc_;
  cuda::LrnDesc lrn_desc_;
  cuda::ActDesc relu_desc_;  // ReLU for batch norm's fused epilogue (set in the constructor)
  // Batch norm's epilogue where cuDNN has no fused op: y += z, then y = max(0, y).
  void batchnorm_epilogue(const BatchNormParams& p, const BatchNormFused& fused, const Tensor& y);
};

}  // namespace cnnscale
