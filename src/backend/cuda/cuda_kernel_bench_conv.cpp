// The CUDA kernel benchmark's convolution case: every legacy cuDNN algorithm of the pass, its
// workspace asked of cuDNN and each refused algorithm kept with cuDNN's status.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_check_sparse.hpp"
#include "backend/cuda/cuda_kernel_bench_cases.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "core/half.hpp"

namespace cnnscale::cuda_bench {
namespace {

const char* fwd_algo_name(int a) {
  static const char* const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 8 ? names[a] : "?";
}
const char* bwd_data_algo_name(int a) {
  static const char* const names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 6 ? names[a] : "?";
}
const char* bwd_filter_algo_name(int a) {
  static const char* const names[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                      "FFT_TILING"};
  return a >= 0 && a < 7 ? names[a] : "?";
}

class CudaConvCase final : public KernelCase {
 public:
  CudaConvCase(CudaBackend& b, const ConvProblem& p, ConvPass pass, KernelPrecision precision, Layout layout,
               const KernelInputs& in)
      : b_(b), dnn_(b.cudnn_handle()), p_(p), pass_(pass), dtype_(kernel_input_dtype(precision)), layout_(layout) {
    b.context()->make_current();
    const char* op = "bench conv";
    const cudnnTensorFormat_t fmt = cuda::cudnn_format(layout);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd_, fmt, cuda::cudnn_type(dtype_), cuda::to_int_dim(p.n, op),
                                           cuda::to_int_dim(p.c, op), cuda::to_int_dim(p.h, op),
                                           cuda::to_int_dim(p.w, op)));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(yd_, fmt, cuda::cudnn_type(dtype_), cuda::to_int_dim(p.n, op),
                                           cuda::to_int_dim(p.k, op), cuda::to_int_dim(p.out_h(), op),
                                           cuda::to_int_dim(p.out_w(), op)));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(wd_, cuda::cudnn_type(dtype_), fmt, cuda::to_int_dim(p.k, op),
                                           cuda::to_int_dim(p.c, op), cuda::to_int_dim(p.r, op),
                                           cuda::to_int_dim(p.s, op)));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd_, static_cast<int>(p.pad_h), static_cast<int>(p.pad_w),
                                                static_cast<int>(p.stride_h), static_cast<int>(p.stride_w), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // fp32: FMA math only, so no algorithm runs TF32 behind the name; tf32: cuDNN's default, which
    // lets float convolutions use TF32 tensor cores; 16-bit: tensor cores, fp32 accumulation.
    CUDNN_CHECK(cudnnSetConvolutionMathType(cd_, precision == KernelPrecision::FP32   ? CUDNN_FMA_MATH
                                                 : precision == KernelPrecision::TF32 ? CUDNN_DEFAULT_MATH
                                                                                      : CUDNN_TENSOR_OP_MATH));
    auto upload = [&](const Shape& s, const std::vector<float>& v) {
      return device_bytes(b, encode(v, dtype_, layout == Layout::NHWC ? nhwc_permutation(s) : std::vector<int64_t>{}));
    };
    auto empty = [&](const Shape& s) {
      return b.alloc(Shape({s.numel() * static_cast<int64_t>(dtype_size(dtype_))}), DType::I8);
    };
    switch (pass) {
      case ConvPass::Forward:
        x_ = upload(p.x_shape(), in.first);
        w_ = upload(p.w_shape(), in.second);
        y_ = empty(p.y_shape());
        break;
      case ConvPass::BackwardData:
        y_ = upload(p.y_shape(), in.first);
        w_ = upload(p.w_shape(), in.second);
        x_ = empty(p.x_shape());
        break;
      case ConvPass::BackwardFilter:
        x_ = upload(p.x_shape(), in.first);
        y_ = upload(p.y_shape(), in.second);
        w_ = empty(p.w_shape());
        break;
    }
    list_algorithms();
  }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t v) override { CUDNN_CHECK(call(algos_[v])); }
  std::vector<float> output(size_t v) override {
    const Tensor& out = this->out();
    CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.bytes(), b_.stream()));
    run(v);
    std::vector<char> host(out.bytes());
    b_.download(out, host.data());
    const Shape s = pass_ == ConvPass::Forward        ? p_.y_shape()
                    : pass_ == ConvPass::BackwardData ? p_.x_shape()
                                                      : p_.w_shape();
    return decode(host, dtype_, layout_ == Layout::NHWC ? nhwc_permutation(s) : std::vector<int64_t>{});
  }
  int64_t operand_bytes() const override { return static_cast<int64_t>(x_.bytes() + w_.bytes() + y_.bytes()); }

 private:
  const Tensor& out() const { return pass_ == ConvPass::Forward ? y_ : pass_ == ConvPass::BackwardData ? x_ : w_; }
  cudnnStatus_t workspace_size(int algo, size_t* bytes) const {
    switch (pass_) {
      case ConvPass::Forward:
        return cudnnGetConvolutionForwardWorkspaceSize(dnn_, xd_, wd_, cd_, yd_,
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      case ConvPass::BackwardData:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(dnn_, wd_, yd_, cd_, xd_,
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      case ConvPass::BackwardFilter:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            dnn_, xd_, yd_, cd_, wd_, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t call(int algo) {
    const float one = 1.0f, zero = 0.0f;
    switch (pass_) {
      case ConvPass::Forward:
        return cudnnConvolutionForward(dnn_, &one, xd_, x_.raw(), wd_, w_.raw(), cd_,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws_.raw(), ws_bytes_, &zero, yd_,
                                       y_.raw());
      case ConvPass::BackwardData:
        return cudnnConvolutionBackwardData(dnn_, &one, wd_, w_.raw(), yd_, y_.raw(), cd_,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws_.raw(), ws_bytes_,
                                            &zero, xd_, x_.raw());
      case ConvPass::BackwardFilter:
        return cudnnConvolutionBackwardFilter(dnn_, &one, xd_, x_.raw(), yd_, y_.raw(), cd_,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws_.raw(), ws_bytes_,
                                              &zero, wd_, w_.raw());
    }
    return CUDNN_STATUS_BAD_PARAM;
  }
  // Every algorithm of the pass, in cuDNN's numbering. One workspace serves all: the largest any
  // supported algorithm asks, up to half the free memory (an algorithm asking more is reported so).
  void list_algorithms() {
    const int count = pass_ == ConvPass::Forward        ? static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
                      : pass_ == ConvPass::BackwardData ? static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                                                        : static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    // Free memory as the driver counts it, plus what the backend's pool holds unused from earlier
    // cases (it keeps freed blocks): otherwise the limit would shrink with every problem run before.
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, b_.device_index()));
    uint64_t reserved = 0, used = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    const size_t limit = (free_b + static_cast<size_t>(reserved > used ? reserved - used : 0)) / 2;
    std::vector<size_t> sizes(static_cast<size_t>(count), 0);
    for (int a = 0; a < count; ++a) {
      const char* name = pass_ == ConvPass::Forward        ? fwd_algo_name(a)
                         : pass_ == ConvPass::BackwardData ? bwd_data_algo_name(a)
                                                           : bwd_filter_algo_name(a);
      KernelVariant v{"cuDNN", name, true, "", 0, {}};
      const cudnnStatus_t st = workspace_size(a, &sizes[a]);
      if (st != CUDNN_STATUS_SUCCESS) {
        v.supported = false;
        v.status = cudnnGetErrorString(st);
      } else if (sizes[a] > limit) {
        v.supported = false;
        v.status = fmt::format("workspace {:.1f} GiB exceeds half the free device memory", sizes[a] / 1073741824.0);
      } else {
        v.workspace_bytes = static_cast<int64_t>(sizes[a]);
        ws_bytes_ = std::max(ws_bytes_, sizes[a]);
      }
      variants_.push_back(v);
      algos_.push_back(a);
    }
    ws_ = b_.alloc(Shape({static_cast<int64_t>(std::max<size_t>(ws_bytes_, 1))}), DType::I8);
    // A trial call of each: some refusals only come at the call (a shape an algorithm's kernels lack).
    for (size_t i = 0; i < variants_.size(); ++i) {
      if (!variants_[i].supported) continue;
      const cudnnStatus_t st = call(algos_[i]);
      if (st != CUDNN_STATUS_SUCCESS) {
        variants_[i].supported = false;
        variants_[i].status = cudnnGetErrorString(st);
      }
    }
    CUDA_CHECK(cudaStreamSynchronize(b_.stream()));
  }

  CudaBackend& b_;
  cudnnHandle_t dnn_;  // the backend's, on its stream
  ConvProblem p_;
  ConvPass pass_;
  DType dtype_;
  Layout layout_;
  cuda::TensorDesc xd_, yd_;
  cuda::FilterDesc wd_;
  cuda::ConvDesc cd_;
  Tensor x_, w_, y_, ws_;
  size_t ws_bytes_ = 0;
  std::vector<int> algos_;
  std::vector<KernelVariant> variants_;
};


}  // namespace

std::unique_ptr<KernelCase> make_conv_case(CudaBackend& b, const ConvProblem& p, ConvPass pass,
                                           KernelPrecision precision, Layout layout, const KernelInputs& in) {
  return std::make_unique<CudaConvCase>(b, p, pass, precision, layout, in);
}

}  // namespace cnnscale::cuda_bench
