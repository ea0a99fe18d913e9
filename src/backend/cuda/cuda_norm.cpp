// Normalisation ops on CUDA: cross-channel LRN (cuDNN, or cnnscale's kernels channels-last) and
// spatial batch norm (cuDNN, or cnnscale's channels-last kernels where own_batchnorm() says).
// Activations and their gradients may be f32, bf16 or f16 (one dtype per call); batch-norm scale,
// shift and statistics are f32 in every precision (cuDNN's derived BN descriptor is float for
// 16-bit x).
#include <utility>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"

namespace cnnscale {
namespace {

void check_lrn_params(const char* op, const LrnParams& p) {
  // cuDNN's limits (cudnn_ops.h); outside them cudnnSetLRNDescriptor would fail with BAD_PARAM.
  if (p.local_size < CUDNN_LRN_MIN_N || p.local_size > CUDNN_LRN_MAX_N || p.k < CUDNN_LRN_MIN_K ||
      p.beta < CUDNN_LRN_MIN_BETA)
    throw_runtime("{} on cuda: local_size {} (cuDNN: {}..{}), k {} (>= {}), beta {} (>= {}) not supported by cuDNN",
                  op, p.local_size, CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N, p.k, CUDNN_LRN_MIN_K, p.beta,
                  CUDNN_LRN_MIN_BETA);
}

}  // namespace

// cuDNN divides lrnAlpha by the window width inside the library (cuDNN API reference,
// cudnnSetLRNDescriptor: "this value is divided by the window width for LRN"), so Caffe's alpha is
// passed unchanged: y = x / (k + alpha / n * sum x^2)^beta, as in backend.hpp and in Caffe's own
// CuDNNLRNLayer. The window, channels [c - (n-1)/2, c + n/2], is Caffe's pre_pad rule.
// cuDNN has LRN in f32 and f16 but not in bf16 (CUDNN_STATUS_NOT_SUPPORTED), and only over NCHW:
// channels-last tensors (every 16-bit net's) run cnnscale's row kernels (cuda_lrn_kernels.cu), and
// NCHW bf16 ones are widened to f32 around cuDNN's f32 op; both compute in fp32.
void cuda::Normalization::lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y) {
  cuda::expect_float("lrn_forward", "x", x, b_.device_);
  cuda::expect_float("lrn_forward", "y", y, b_.device_);
  cuda::expect_dtype("lrn_forward", "y", y, x.dtype());
  cuda::expect_shape("lrn_forward", "y", y, x.shape());
  check_lrn_params("lrn_forward", p);
  if (x.numel() == 0) return;
  b_.activate();
  if (x.layout() == Layout::NHWC) {
    cuda::expect_layout("lrn_forward", "y", y, Layout::NHWC);
    cuda::launch_lrn_rows_forward(x.dtype(), x.numel() / x.shape().c(), x.shape().c(), p.local_size, p.alpha, p.beta,
                                  p.k, x.raw(), y.raw(), b_.stream());
    return;
  }
  if (x.dtype() == DType::BF16) {
    Tensor xw = b_.staged(0, x, DType::F32), yw = b_.staging(1, x.shape());
    lrn_forward(p, xw, yw);
    b_.convert(yw, y);
    return;
  }
  CUDNN_CHECK(cudnnSetLRNDescriptor(lrn_desc_, static_cast<unsigned>(p.local_size), p.alpha, p.beta, p.k));
  cuda::set_nchw(b_.desc_a_, x.shape(), "lrn_forward", x.dtype());
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnLRNCrossChannelForward(b_.cudnn_, lrn_desc_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, b_.desc_a_, x.raw(),
                                          &zero, b_.desc_a_, y.raw()));
}

void cuda::Normalization::lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                                       const Tensor& dx) {
  cuda::expect_float("lrn_backward", "x", x, b_.device_);
  cuda::expect_float("lrn_backward", "y", y, b_.device_);
  cuda::expect_dtype("lrn_backward", "y", y, x.dtype());
  cuda::expect_float("lrn_backward", "dy", dy, b_.device_);
  cuda::expect_dtype("lrn_backward", "dy", dy, x.dtype());
  cuda::expect_float("lrn_backward", "dx", dx, b_.device_);
  cuda::expect_dtype("lrn_backward", "dx", dx, x.dtype());
  cuda::expect_shape("lrn_backward", "y", y, x.shape());
  cuda::expect_shape("lrn_backward", "dy", dy, x.shape());
  cuda::expect_shape("lrn_backward", "dx", dx, x.shape());
  check_lrn_params("lrn_backward", p);
  if (x.numel() == 0) return;
  b_.activate();
  if (x.layout() == Layout::NHWC) {
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"y", &y}, {"dy", &dy}, {"dx", &dx}})
      cuda::expect_layout("lrn_backward", name, *t, Layout::NHWC);
    cuda::launch_lrn_rows_backward(x.dtype(), x.numel() / x.shape().c(), x.shape().c(), p.local_size, p.alpha, p.beta,
                                   p.k, x.raw(), y.raw(), dy.raw(), dx.raw(), b_.stream());
    return;
  }
  if (x.dtype() == DType::BF16) {  // widened to f32, as in lrn_forward
    Tensor xw = b_.staged(0, x, DType::F32), yw = b_.staged(1, y, DType::F32), dyw = b_.staged(2, dy, DType::F32),
           dxw = b_.staging(3, x.shape());
    lrn_backward(p, xw, yw, dyw, dxw);
    b_.convert(dxw, dx);
    return;
  }
  CUDNN_CHECK(cudnnSetLRNDescriptor(lrn_desc_, static_cast<unsigned>(p.local_size), p.alpha, p.beta, p.k));
  cuda::set_nchw(b_.desc_a_, x.shape(), "lrn_backward", x.dtype());
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnLRNCrossChannelBackward(b_.cudnn_, lrn_desc_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, b_.desc_a_,
                                           y.raw(), b_.desc_a_, dy.raw(), b_.desc_a_, x.raw(), &zero, b_.desc_a_,
                                           dx.raw()));
}

// ---- batch norm ------------------------------------------------------------------------------
// cuDNN's spatial mode is backend.hpp's contract as it stands:
//  - running = (1 - factor) * running + factor * batch with exponentialAverageFactor = momentum;
//  - the running variance it stores is the unbiased batch variance (N*H*W - 1 denominator);
//  - resultSaveInvVariance is 1 / sqrt(biased batch variance + eps) = save_inv_std.
// (N, C) inputs are (N, C, 1, 1): statistics per channel over the batch.

namespace {

void check_bn_param(const char* op, const char* what, const Tensor& t, int64_t channels, int device) {
  cuda::expect_f32(op, what, t, device);
  cuda::expect_numel(op, what, t, channels);
}

void check_bn_input(const char* op, const Tensor& x) {
  if (x.shape().rank() != 2 && x.shape().rank() != 4)
    throw_runtime("{} on cuda: x {} must be (N, C) or (N, C, H, W)", op, x.shape().to_string());
}

// A fused operand: x's shape, dtype and memory order.
void check_fused(const char* op, const char* what, const Tensor& x, const Tensor& t, int device) {
  if (!t.defined()) return;
  cuda::expect_float(op, what, t, device);
  cuda::expect_dtype(op, what, t, x.dtype());
  cuda::expect_layout(op, what, t, x.layout());
  cuda::expect_shape(op, what, t, x.shape());
}

// Whether cuDNN's persistent channels-last kernels (`persistent`: Normalization::bn_persistent) apply
// the epilogue (BN + ReLU, BN + add + ReLU; an addend without a ReLU has no fused op). Only for C a
// multiple of 4, the vector width of those kernels: other channel counts run the epilogue op by op.
bool cudnn_fuses(const BatchNormParams& p, const Tensor& x, bool persistent) {
  return persistent && p.relu && x.layout() == Layout::NHWC && x.shape().c() % 4 == 0;
}

cudnnBatchNormOps_t fused_ops(bool in_op, bool addend) {
  if (!in_op) return CUDNN_BATCHNORM_OPS_BN;
  return addend ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

}  // namespace

cuda::Normalization::Normalization(CudaBackend& backend) : b_(backend) {
  CUDNN_CHECK(cudnnSetActivationDescriptor(relu_desc_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
}

bool cuda::Normalization::bn_persistent() const {
  return b_.ctx_->granted_sms() == 0 || b_.ctx_->granted_sms() >= b_.sm_count_;
}

bool cuda::Normalization::own_batchnorm(const Tensor& x) const {
  if (x.layout() != Layout::NHWC || x.shape().rank() != 4) return false;
  return b_.options_.batchnorm == BatchNormKernels::Cnnscale ||
         (b_.options_.batchnorm == BatchNormKernels::Auto && !bn_persistent());
}

cuda::Normalization::OwnBatchNormLaunch cuda::Normalization::own_batchnorm_launch(const Tensor& x) {
  OwnBatchNormLaunch l;
  l.rows = x.numel() / x.shape().c();
  l.sms = b_.granted_sms() > 0 ? b_.granted_sms() : b_.sm_count_;  // the grid fills the SMs this backend has
  l.workspace = b_.workspace(static_cast<size_t>(cuda::bn_rows_workspace_bytes(l.rows, x.shape().c(), l.sms)));
  return l;
}

void cuda::Normalization::batchnorm_epilogue(const BatchNormParams& p, const BatchNormFused& fused, const Tensor& y) {
  if (fused.z.defined()) b_.axpby(1.0f, fused.z, 1.0f, y);
  if (p.relu) b_.relu_forward(y, y);
}

void cuda::Normalization::batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                                  const Tensor& shift, const Tensor& running_mean,
                                                  const Tensor& running_var, const Tensor& y, const Tensor& save_mean,
                                                  const Tensor& save_inv_std, const BatchNormFused& fused) {
  const char* op = "batchnorm_forward_train";
  check_fused(op, "z", x, fused.z, b_.device_);
  check_bn_input(op, x);
  const int64_t c = x.shape().c();
  cuda::expect_float(op, "x", x, b_.device_);
  cuda::expect_float(op, "y", y, b_.device_);
  cuda::expect_dtype(op, "y", y, x.dtype());
  cuda::expect_layout(op, "y", y, x.layout());
  cuda::expect_shape(op, "y", y, x.shape());
  check_bn_param(op, "scale", scale, c, b_.device_);
  check_bn_param(op, "shift", shift, c, b_.device_);
  check_bn_param(op, "running_mean", running_mean, c, b_.device_);
  check_bn_param(op, "running_var", running_var, c, b_.device_);
  check_bn_param(op, "save_mean", save_mean, c, b_.device_);
  check_bn_param(op, "save_inv_std", save_inv_std, c, b_.device_);
  if (x.numel() == 0) return;
  if (x.numel() / c < 2)
    throw_runtime("{} on cuda: x {} has one value per channel; batch statistics need at least two", op,
                  x.shape().to_string());
  b_.activate();
  if (own_batchnorm(x)) {
    const OwnBatchNormLaunch l = own_batchnorm_launch(x);
    cuda::launch_bn_rows_forward_train(x.dtype(), l.rows, c, l.sms, x.raw(),
                                       fused.z.defined() ? fused.z.raw() : nullptr, scale.f32(), shift.f32(),
                                       p.momentum, p.eps, running_mean.f32(), running_var.f32(), save_mean.f32(),
                                       save_inv_std.f32(), p.relu, y.raw(), l.workspace, b_.stream());
    return;
  }
  cuda::set_desc(b_.desc_a_, x, op);
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(desc_c_, b_.desc_a_, CUDNN_BATCHNORM_SPATIAL));
  const float one = 1.0f, zero = 0.0f;
  if (x.layout() == Layout::NHWC && bn_persistent()) {
    // Channels-last: the Ex entry point's persistent kernels (the legacy call ran NHWC bf16 some
    // 50x below memory bandwidth). Its reserve space is kept, keyed by x, for the backward pass.
    // The ReLU, and an addend with it, run inside cuDNN's kernel, for little more than batch norm
    // alone costs, where separate passes cost more (docs/measurements/2026-11-25-cuda-kernel-choices.md).
    const bool in_op = cudnn_fuses(p, x, true);
    const cudnnBatchNormOps_t ops = fused_ops(in_op, fused.z.defined());
    const bool add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    cudnnActivationDescriptor_t act = in_op ? relu_desc_.get() : nullptr;
    size_t ws = 0, rs = 0;
    CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        b_.cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, b_.desc_a_, add ? b_.desc_a_.get() : nullptr, b_.desc_a_,
        desc_c_, act, &ws));
    CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(b_.cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops,
                                                                     act, b_.desc_a_, &rs));
    Tensor& reserve = bn_reserve_[x.raw()];
    if (rs > 0 && (!reserve.defined() || reserve.bytes() < rs)) {
      if (reserve.defined()) b_.buffers_moved();
      reserve = b_.alloc(Shape{static_cast<int64_t>((rs + 3) / 4)}, DType::I32);
    }
    CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
        b_.cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &one, &zero, b_.desc_a_, x.raw(),
        add ? b_.desc_a_.get() : nullptr, add ? fused.z.raw() : nullptr, b_.desc_a_, y.raw(), desc_c_, scale.f32(),
        shift.f32(), p.momentum, running_mean.f32(), running_var.f32(), p.eps, save_mean.f32(), save_inv_std.f32(), act,
        b_.workspace(ws), ws, rs > 0 ? reserve.raw() : nullptr, rs));
    if (!in_op) batchnorm_epilogue(p, fused, y);
    return;
  }
  // Channels-first, or channels-last on a partition (bn_persistent): the spatial kernels, whose
  // descriptors carry the memory order, and the epilogue op by op.
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      b_.cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, b_.desc_a_, x.raw(), b_.desc_a_, y.raw(), desc_c_, scale.f32(),
      shift.f32(), p.momentum, running_mean.f32(), running_var.f32(), p.eps, save_mean.f32(), save_inv_std.f32()));
  batchnorm_epilogue(p, fused, y);
}

void cuda::Normalization::batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                                      const Tensor& shift, const Tensor& running_mean,
                                                      const Tensor& running_var, const Tensor& y,
                                                      const BatchNormFused& fused) {
  const char* op = "batchnorm_forward_inference";
  check_fused(op, "z", x, fused.z, b_.device_);
  check_bn_input(op, x);
  const int64_t c = x.shape().c();
  cuda::expect_float(op, "x", x, b_.device_);
  cuda::expect_float(op, "y", y, b_.device_);
  cuda::expect_dtype(op, "y", y, x.dtype());
  cuda::expect_layout(op, "y", y, x.layout());
  cuda::expect_shape(op, "y", y, x.shape());
  check_bn_param(op, "scale", scale, c, b_.device_);
  check_bn_param(op, "shift", shift, c, b_.device_);
  check_bn_param(op, "running_mean", running_mean, c, b_.device_);
  check_bn_param(op, "running_var", running_var, c, b_.device_);
  if (x.numel() == 0) return;
  b_.activate();
  cuda::set_desc(b_.desc_a_, x, op);
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(desc_c_, b_.desc_a_, CUDNN_BATCHNORM_SPATIAL));
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(b_.cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, b_.desc_a_,
                                                      x.raw(), b_.desc_a_, y.raw(), desc_c_, scale.f32(), shift.f32(),
                                                      running_mean.f32(), running_var.f32(), p.eps));
  batchnorm_epilogue(p, fused, y);
}

void cuda::Normalization::batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy,
                                             const Tensor& scale, const Tensor& save_mean, const Tensor& save_inv_std,
                                             const Tensor& dx, const Tensor& dscale, const Tensor& dshift,
                                             const BatchNormFused& fused) {
  const char* op = "batchnorm_backward";
  check_fused(op, "y", x, fused.y, b_.device_);
  check_fused(op, "dz", x, fused.dz, b_.device_);
  if (p.relu && (!fused.y.defined() || !fused.shift.defined()))
    throw_runtime("{} on cuda: a fused ReLU needs the forward's output y and shift", op);
  if (fused.shift.defined()) check_bn_param(op, "shift", fused.shift, x.shape().c(), b_.device_);
  check_bn_input(op, x);
  const int64_t c = x.shape().c();
  cuda::expect_float(op, "x", x, b_.device_);
  cuda::expect_float(op, "dy", dy, b_.device_);
  cuda::expect_dtype(op, "dy", dy, x.dtype());
  cuda::expect_layout(op, "dy", dy, x.layout());
  cuda::expect_float(op, "dx", dx, b_.device_);
  cuda::expect_dtype(op, "dx", dx, x.dtype());
  cuda::expect_layout(op, "dx", dx, x.layout());
  cuda::expect_shape(op, "dy", dy, x.shape());
  cuda::expect_shape(op, "dx", dx, x.shape());
  check_bn_param(op, "scale", scale, c, b_.device_);
  check_bn_param(op, "save_mean", save_mean, c, b_.device_);
  check_bn_param(op, "save_inv_std", save_inv_std, c, b_.device_);
  check_bn_param(op, "dscale", dscale, c, b_.device_);
  check_bn_param(op, "dshift", dshift, c, b_.device_);
  if (x.numel() == 0) return;
  b_.activate();
  if (own_batchnorm(x)) {  // the gate and the addend's gradient inside its kernels
    const OwnBatchNormLaunch l = own_batchnorm_launch(x);
    cuda::launch_bn_rows_backward(x.dtype(), l.rows, c, l.sms, x.raw(), dy.raw(), p.relu ? fused.y.raw() : nullptr,
                                  scale.f32(), save_mean.f32(), save_inv_std.f32(), dx.raw(), dscale.f32(),
                                  dshift.f32(), fused.dz.defined() ? fused.dz.raw() : nullptr, l.workspace,
                                  b_.stream());
    return;
  }
  // Without cuDNN's fused backward, the gradient reaching bn(x) is dy gated by the ReLU's output,
  // staged, and is also the addend's gradient.
  const bool fused_in_cudnn = cudnn_fuses(p, x, bn_persistent());
  Tensor grad = dy;
  if (!fused_in_cudnn) {
    if (p.relu) {
      grad = b_.staging(0, dy.shape(), dy.dtype()).as_layout(dy.layout());
      b_.relu_backward(fused.y, dy, grad);
    }
    if (fused.dz.defined()) b_.copy(grad, fused.dz);
  }
  cuda::set_desc(b_.desc_a_, x, op);
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(desc_c_, b_.desc_a_, CUDNN_BATCHNORM_SPATIAL));
  const float one = 1.0f, zero = 0.0f;
  if (x.layout() == Layout::NHWC && bn_persistent()) {  // the forward's persistent kernels, with its reserve space
    auto it = bn_reserve_.find(x.raw());
    const cudnnBatchNormOps_t ops = fused_ops(fused_in_cudnn, fused.dz.defined());
    const bool act = fused_in_cudnn, add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    size_t ws = 0, rs = 0;
    CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        b_.cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, b_.desc_a_, act ? b_.desc_a_.get() : nullptr, b_.desc_a_,
        add ? b_.desc_a_.get() : nullptr, b_.desc_a_, desc_c_, act ? relu_desc_.get() : nullptr, &ws));
    CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
        b_.cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, act ? relu_desc_.get() : nullptr, b_.desc_a_, &rs));
    if (rs > 0 && (it == bn_reserve_.end() || !it->second.defined()))
      throw_runtime("{} on cuda: channels-last x {} has no training forward to go back through", op,
                    x.shape().to_string());
    CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
        b_.cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &one, &zero, &one, &zero, b_.desc_a_, x.raw(),
        act ? b_.desc_a_.get() : nullptr, act ? fused.y.raw() : nullptr, b_.desc_a_, grad.raw(),
        add ? b_.desc_a_.get() : nullptr, add ? fused.dz.raw() : nullptr, b_.desc_a_, dx.raw(), desc_c_, scale.f32(),
        act ? fused.shift.f32() : nullptr, dscale.f32(), dshift.f32(), p.eps, save_mean.f32(), save_inv_std.f32(),
        act ? relu_desc_.get() : nullptr, b_.workspace(ws), ws, rs > 0 ? it->second.raw() : nullptr, rs));
    return;
  }
  // dx, dscale and dshift are overwritten (beta = 0), as the Backend contract says.
  CUDNN_CHECK(cudnnBatchNormalizationBackward(b_.cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, b_.desc_a_,
                                              x.raw(), b_.desc_a_, grad.raw(), b_.desc_a_, dx.raw(), desc_c_,
                                              scale.f32(), dscale.f32(), dshift.f32(), p.eps, save_mean.f32(),
                                              save_inv_std.f32()));
}

}  // namespace cnnscale
