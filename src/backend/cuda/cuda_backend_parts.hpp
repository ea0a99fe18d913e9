// The parts of CudaBackend besides its convolutions (cuda_conv_engine.hpp), each with its own state:
// stream capture (cuda_graph.cpp), the fully connected layers (cuda_linear.cpp), LRN and batch norm
// (cuda_norm.cpp), pooling (cuda_pool.cpp). Each works on its backend's stream, handles, workspace,
// staging and scratch descriptors; the backend owns one of each and forwards its ops to them.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_linear_plans.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"

namespace cnnscale {

class CudaBackend;

namespace cuda {

struct CudaTimingEvent;  // cuda_timing_event.hpp

// CUDA graphs of backend work captured on the compute stream (cuda_graph.cpp says how the timing
// points are kept).
class GraphCapture {
 public:
  explicit GraphCapture(CudaBackend& backend) : b_(backend) {}
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work, const CaptureOptions& options);
  // A timing point on `stream`, which must be part of the capture in progress.
  size_t capture_timing_point(cudaStream_t on);
  bool capturing() const { return capture_mode_ != CaptureMode::None; }

 private:
  // Stream capture in progress. Segments: the graphs of the segments ended so far, each timing
  // point ending one. Nodes: the events of the points recorded so far.
  enum class CaptureMode { None, Segments, Nodes };
  void begin_capture_segment(CaptureMode mode);
  void end_capture_segment();

  CudaBackend& b_;
  CaptureMode capture_mode_ = CaptureMode::None;
  std::vector<cudaGraph_t> capture_segments_;
  std::vector<std::shared_ptr<CudaTimingEvent>> capture_points_;
};

// Fully connected layers: one cuBLASLt matmul with the bias, ReLU or bias gradient in its epilogue
// in the tensor-core precisions (strict fp32 keeps cuBLAS's SGEMM and the ops apart), GEMV at batch
// 1 where it measured faster, and the int8 layer.
class LinearOps {
 public:
  explicit LinearOps(CudaBackend& backend) : b_(backend) {}
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  void linear_backward_params(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& dbias);
  void linear_forward_int8(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias, bool relu,
                           const Tensor& y);

 private:
  // linear_plans_.run() on the backend's workspace and stream.
  void run_linear(LinearPlan& plan, const void* a, const void* b, void* c, void* bias);
  // linear_forward at batch 1 as GEMV (CudaBackendOptions::fc_gemv), once gemv_applies said it can.
  static bool gemv_applies(const Tensor& x, const Tensor& w, const Tensor& y);
  void linear_forward_gemv(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  // linear_forward as one cuBLASLt matmul with its epilogue (or the ops apart where it has none).
  void linear_forward_matmul(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  // FcGemv::Auto: whether GEMV measured faster than the matmul for this call's shape (timed once).
  bool gemv_measures_faster(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);

  CudaBackend& b_;
  LinearPlans linear_plans_;  // the fully connected layers' cuBLASLt plans (cuda_linear_plans.hpp)
  std::map<std::tuple<int64_t, int64_t, int, bool, bool>, bool> gemv_faster_;  // (K, D, dtype, bias, relu)
  Tensor int8_linear_acc_;                                                     // the int32 sums of linear_forward_int8
};

// LRN (cnnscale's kernels) and batch norm (cuDNN's, or cnnscale's channels-last kernels).
class Normalization {
 public:
  // Sets the ReLU descriptor of batch norm's fused epilogue.
  explicit Normalization(CudaBackend& backend);
  void lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y);
  void lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx);
  void batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                               const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                               const Tensor& save_mean, const Tensor& save_inv_std, const BatchNormFused& fused);
  void batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale, const Tensor& shift,
                                   const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                   const BatchNormFused& fused);
  void batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& scale,
                          const Tensor& save_mean, const Tensor& save_inv_std, const Tensor& dx, const Tensor& dscale,
                          const Tensor& dshift, const BatchNormFused& fused);

 private:
  // Whether cuDNN's persistent batch-norm kernels may run: not in a green context of fewer SMs than
  // the device. They size their grid for every SM of the device and fail there
  // (CUDNN_STATUS_EXECUTION_FAILED: docs/measurements/2026-11-25-cuda-kernel-choices.md), so a
  // partition runs channels-last batch norm through the non-persistent spatial kernels instead.
  bool bn_persistent() const;
  // Whether a training batch norm of x runs cnnscale's channels-last kernels (cuda_bn_kernels.cu)
  // rather than cuDNN's: channels-last 4-d x, as options().batchnorm says (Auto: on a partition).
  bool own_batchnorm(const Tensor& x) const;
  // What those kernels' launches over x need: its rows (pixels), the SMs the grid is sized to and
  // a workspace that large.
  struct OwnBatchNormLaunch {
    int64_t rows = 0;
    int sms = 0;
    void* workspace = nullptr;
  };
  OwnBatchNormLaunch own_batchnorm_launch(const Tensor& x);
  // Batch norm's epilogue where cuDNN has no fused op: y += z, then y = max(0, y).
  void batchnorm_epilogue(const BatchNormParams& p, const BatchNormFused& fused, const Tensor& y);

  CudaBackend& b_;
  // Reserve space of channels-last batch norm, from each training forward to its backward, by x.
  std::map<const void*, Tensor> bn_reserve_;
  TensorDesc desc_c_;  // the third scratch tensor descriptor (the backend's desc_a_ and desc_b_ beside it)
  LrnDesc lrn_desc_;
  ActDesc relu_desc_;  // ReLU for batch norm's fused epilogue (set in the constructor)
};

// Pooling: cuDNN's, or cnnscale's Caffe-rule kernels where cuDNN's floor output is too small.
class Pooling {
 public:
  explicit Pooling(CudaBackend& backend) : b_(backend) {}
  int64_t pool_saved_bytes(const PoolParams& p, const Shape& shape, DType dtype, Layout layout) const;
  void pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& saved);
  void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                     const Tensor& saved);
  static bool cudnn_can_pool(const PoolParams& p, const Shape& x);

 private:
  CudaBackend& b_;
  PoolDesc pool_desc_;
};

}  // namespace cuda
}  // namespace cnnscale
