// CUDA kernel benchmark cases. GEMM: cublasGemmEx with the default algorithm, and cuBLASLt's
// heuristic list (its first entry is cuBLASLt's own choice; the rest let the harness find the best
// it returned). Convolution: every legacy cuDNN algorithm of the pass, its workspace asked of cuDNN
// and each refused algorithm kept with cuDNN's status. Sparse: cuSPARSE's CSR algorithms against the
// dense GEMM. The library handles are made once per benchmark (LibraryHandles).
#include "backend/cuda/cuda_kernel_bench.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_check_sparse.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "core/half.hpp"

namespace cnnscale {

namespace {

// Room for cuBLASLt's algorithms: what its heuristics may ask, as PyTorch and cuBLAS' own docs use.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
// cuBLASLt's heuristic order puts its choice first; the next three show how close its choice comes
// to the best it knows for the shape (more add little but each costs an energy window).
constexpr int kLtAlgorithms = 4;

// Host floats (logical order) -> device bytes of `t`, in `order`: `perm` maps a storage index to its
// logical index (identity when empty).
std::vector<char> encode(const std::vector<float>& v, DType t, const std::vector<int64_t>& perm) {
  std::vector<char> bytes(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = v[perm.empty() ? i : static_cast<size_t>(perm[i])];
    if (t == DType::I8) {
      reinterpret_cast<int8_t*>(bytes.data())[i] = static_cast<int8_t>(x);
    } else if (t == DType::I32) {
      reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(x);
    } else {
      store_float(t, x, bytes.data(), static_cast<int64_t>(i));
    }
  }
  return bytes;
}

std::vector<float> decode(const std::vector<char>& bytes, DType t, const std::vector<int64_t>& perm) {
  const size_t n = bytes.size() / dtype_size(t);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    float x = 0;
    if (t == DType::I32) {
      x = static_cast<float>(reinterpret_cast<const int32_t*>(bytes.data())[i]);
    } else if (t == DType::I8) {
      x = reinterpret_cast<const int8_t*>(bytes.data())[i];
    } else {
      x = load_float(t, bytes.data(), static_cast<int64_t>(i));
    }
    v[perm.empty() ? i : static_cast<size_t>(perm[i])] = x;
  }
  return v;
}

// Storage index -> NCHW logical index for an (n, c, h, w) tensor stored channels-last.
std::vector<int64_t> nhwc_permutation(const Shape& s) {
  std::vector<int64_t> perm(static_cast<size_t>(s.numel()));
  size_t i = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t h = 0; h < s[2]; ++h)
      for (int64_t w = 0; w < s[3]; ++w)
        for (int64_t c = 0; c < s[1]; ++c) perm[i++] = ((n * s[1] + c) * s[2] + h) * s[3] + w;
  return perm;
}

// A device buffer of the backend's allocator holding `bytes`.
Tensor device_bytes(Backend& b, const std::vector<char>& bytes) {
  Tensor t = b.alloc(Shape({static_cast<int64_t>(bytes.size())}), DType::I8);
  b.upload(bytes.data(), t);
  return t;
}

// cuBLAS, cuBLASLt and cuSPARSE handles, made once per benchmark and bound to the backend's stream
// (cuDNN's is the backend's own: its math type lives on each convolution descriptor). A case sets the
// cuBLAS math mode of its format before each call, so the backend's TF32 choice never leaks in.
struct LibraryHandles {
  explicit LibraryHandles(CudaBackend& b) {
    b.context()->make_current();
    try {
      CUBLAS_CHECK(cublasCreate(&blas));
      CUBLAS_CHECK(cublasSetStream(blas, b.stream()));
      CUBLAS_CHECK(cublasLtCreate(&lt));
      CUSPARSE_CHECK(cusparseCreate(&sparse));
      CUSPARSE_CHECK(cusparseSetStream(sparse, b.stream()));
    } catch (...) {
      release();
      throw;
    }
  }
  ~LibraryHandles() { release(); }
  LibraryHandles(const LibraryHandles&) = delete;
  LibraryHandles& operator=(const LibraryHandles&) = delete;
  void release() noexcept {
    if (sparse) cusparseDestroy(sparse);
    if (lt) cublasLtDestroy(lt);
    if (blas) cublasDestroy(blas);
    sparse = nullptr, lt = nullptr, blas = nullptr;
  }
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  cusparseHandle_t sparse = nullptr;
};

class CudaGemmCase final : public KernelCase {
 public:
  CudaGemmCase(CudaBackend& b, const LibraryHandles& h, const GemmProblem& p, KernelPrecision precision,
               const KernelInputs& in)
      : b_(b),
        blas_(h.blas),
        lt_(h.lt),
        p_(p),
        precision_(precision),
        in_type_(kernel_input_dtype(precision)),
        out_type_(kernel_output_dtype(precision)) {
    // A throw part-way (an allocation, a cuBLASLt call) runs no destructor: release what was made.
    try {
      b.context()->make_current();
      a_ = device_bytes(b, encode(in.first, in_type_, {}));
      bm_ = device_bytes(b, encode(in.second, in_type_, {}));
      c_ = b.alloc(Shape({p.m * p.n * static_cast<int64_t>(dtype_size(out_type_))}), DType::I8);
      ws_ = b.alloc(Shape({static_cast<int64_t>(kLtWorkspaceBytes)}), DType::I8);
      variants_.push_back({"cuBLAS", "cublasGemmEx default", true, "", 0, {}});
      // A trial call decides whether cuBLAS takes the shape in this format (int8 wants multiples of 4).
      const cublasStatus_t st = blas_call();
      if (st != CUBLAS_STATUS_SUCCESS) {
        variants_[0].supported = false;
        variants_[0].status = cublasGetStatusString(st);
      }
      plan_lt();
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaGemmCase() override { release(); }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t v) override {
    if (v == 0) {
      CUBLAS_CHECK(blas_call());
    } else {
      CUBLAS_CHECK(lt_call(algos_[v - 1]));
    }
  }
  std::vector<float> output(size_t v) override {
    CUDA_CHECK(cudaMemsetAsync(c_.raw(), 0, c_.bytes(), b_.stream()));
    run(v);
    std::vector<char> host(c_.bytes());
    b_.download(c_, host.data());
    return decode(host, out_type_, {});
  }
  int64_t operand_bytes() const override { return static_cast<int64_t>(a_.bytes() + bm_.bytes() + c_.bytes()); }

 private:
  void release() noexcept {
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
    for (cublasLtMatrixLayout_t l : {la_, lb_, lc_})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op_) cublasLtMatmulDescDestroy(op_);
    pref_ = nullptr, la_ = lb_ = lc_ = nullptr, op_ = nullptr;
  }
  cudaDataType_t data_type(DType t) const {
    switch (t) {
      case DType::BF16:
        return CUDA_R_16BF;
      case DType::F16:
        return CUDA_R_16F;
      case DType::I8:
        return CUDA_R_8I;
      case DType::I32:
        return CUDA_R_32I;
      default:
        return CUDA_R_32F;
    }
  }
  cublasComputeType_t compute_type() const {
    switch (precision_) {
      case KernelPrecision::TF32:
        return CUBLAS_COMPUTE_32F_FAST_TF32;
      case KernelPrecision::INT8:
        return CUBLAS_COMPUTE_32I;
      default:
        return CUBLAS_COMPUTE_32F;
    }
  }
  // int8 scales are int32 (alpha 1, beta 0: the exact int32 sums); every other format's are float.
  const void* alpha() const { return precision_ == KernelPrecision::INT8 ? static_cast<const void*>(&ione_) : &fone_; }
  const void* beta() const { return precision_ == KernelPrecision::INT8 ? static_cast<const void*>(&izero_) : &fzero_; }
  int64_t lda() const { return p_.trans_a ? p_.k : p_.m; }
  int64_t ldb() const { return p_.trans_b ? p_.n : p_.k; }

  cublasStatus_t blas_call() {
    const cublasStatus_t mode = cublasSetMathMode(
        blas_, precision_ == KernelPrecision::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (mode != CUBLAS_STATUS_SUCCESS) return mode;
    return cublasGemmEx(blas_, p_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, p_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        static_cast<int>(p_.m), static_cast<int>(p_.n), static_cast<int>(p_.k), alpha(), a_.raw(),
                        data_type(in_type_), static_cast<int>(lda()), bm_.raw(), data_type(in_type_),
                        static_cast<int>(ldb()), beta(), c_.raw(), data_type(out_type_), static_cast<int>(p_.m),
                        compute_type(), CUBLAS_GEMM_DEFAULT);
  }
  cublasStatus_t lt_call(const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(lt_, op_, alpha(), a_.raw(), la_, bm_.raw(), lb_, beta(), c_.raw(), lc_, c_.raw(), lc_, &algo,
                          ws_.raw(), kLtWorkspaceBytes, b_.stream());
  }
  void plan_lt() {
    const cudaDataType_t scale = precision_ == KernelPrecision::INT8 ? CUDA_R_32I : CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, compute_type(), scale));
    const cublasOperation_t ta = p_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la_, data_type(in_type_), p_.trans_a ? p_.k : p_.m,
                                            p_.trans_a ? p_.m : p_.k, lda()));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb_, data_type(in_type_), p_.trans_b ? p_.n : p_.k,
                                            p_.trans_b ? p_.k : p_.n, ldb()));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc_, data_type(out_type_), p_.m, p_.n, p_.m));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
    const size_t ws = kLtWorkspaceBytes;
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t res[kLtAlgorithms] = {};
    int got = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, lc_, lc_, pref_, kLtAlgorithms, res, &got);
    if (st != CUBLAS_STATUS_SUCCESS || got == 0) {
      variants_.push_back({"cuBLASLt",
                           "heuristic",
                           false,
                           st != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(st) : "no algorithm for this shape",
                           0,
                           {}});
      algos_.push_back({});
      return;
    }
    for (int i = 0; i < got; ++i) {
      int id = -1, tile = -1, stages = -1;
      size_t written = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages),
                                           &written);
      KernelVariant v{"cuBLASLt",
                      fmt::format("{} (algo {}, tile {}, stages {})",
                                  i == 0 ? "heuristic" : fmt::format("returned #{}", i), id, tile, stages),
                      true,
                      "",
                      static_cast<int64_t>(res[i].workspaceSize),
                      {}};
      algos_.push_back(res[i].algo);
      const cublasStatus_t rs = lt_call(res[i].algo);
      if (rs != CUBLAS_STATUS_SUCCESS) {
        v.supported = false;
        v.status = cublasGetStatusString(rs);
      }
      variants_.push_back(v);
    }
  }

  CudaBackend& b_;
  cublasHandle_t blas_;  // LibraryHandles'
  cublasLtHandle_t lt_;
  GemmProblem p_;
  KernelPrecision precision_;
  DType in_type_, out_type_;
  Tensor a_, bm_, c_, ws_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos_;
  std::vector<KernelVariant> variants_;
  float fone_ = 1.0f, fzero_ = 0.0f;
  int32_t ione_ = 1, izero_ = 0;
};

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

const char* cusparse_status(cusparseStatus_t s) {
  return cusparseGetErrorString(s);
}

// cuSPARSE's generic SpMM (SpMV for one column) over A in CSR, each of its CSR algorithms a variant,
// then cuBLAS' fp32 GEMM over A densified. Status of a refused algorithm kept; workspaces per variant.
class CudaSpmmCase final : public KernelCase {
 public:
  CudaSpmmCase(CudaBackend& b, const LibraryHandles& h, const SparseProblem& p, const SparseInputs& in)
      : b_(b), p_(p), sp_(h.sparse), blas_(h.blas) {
    b.context()->make_current();
    try {
      auto bytes_of = [](const auto& v) {
        std::vector<char> out(v.size() * sizeof(v[0]));
        std::memcpy(out.data(), v.data(), out.size());
        return out;
      };
      row_ptr_ = device_bytes(b, bytes_of(in.row_ptr));
      col_idx_ = device_bytes(b, bytes_of(in.col_idx.empty() ? std::vector<int32_t>{0} : in.col_idx));
      values_ = device_bytes(b, bytes_of(in.values.empty() ? std::vector<float>{0.0f} : in.values));
      bmat_ = device_bytes(b, bytes_of(in.b));
      c_ = b.alloc(Shape({p.m * p.n}), DType::F32);
      // A densified (column-major m x k) for the dense baseline.
      std::vector<float> dense(static_cast<size_t>(p.m * p.k), 0.0f);
      for (int64_t i = 0; i < p.m; ++i)
        for (int32_t e = in.row_ptr[static_cast<size_t>(i)]; e < in.row_ptr[static_cast<size_t>(i) + 1]; ++e)
          dense[static_cast<size_t>(in.col_idx[static_cast<size_t>(e)] * p.m + i)] = in.values[static_cast<size_t>(e)];
      dense_ = device_bytes(b, bytes_of(dense));
      CUSPARSE_CHECK(cusparseCreateCsr(&a_, p.m, p.k, in.nnz(), row_ptr_.raw(), col_idx_.raw(), values_.raw(),
                                       CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
      if (p.n == 1) {
        CUSPARSE_CHECK(cusparseCreateDnVec(&bx_, p.k, bmat_.raw(), CUDA_R_32F));
        CUSPARSE_CHECK(cusparseCreateDnVec(&cy_, p.m, c_.raw(), CUDA_R_32F));
        for (auto [alg, name] : {std::pair{CUSPARSE_SPMV_ALG_DEFAULT, "SpMV ALG_DEFAULT"},
                                 {CUSPARSE_SPMV_CSR_ALG1, "SpMV CSR_ALG1"},
                                 {CUSPARSE_SPMV_CSR_ALG2, "SpMV CSR_ALG2"}})
          add_variant(name, static_cast<int>(alg));
      } else {
        CUSPARSE_CHECK(cusparseCreateDnMat(&bm_, p.k, p.n, p.k, bmat_.raw(), CUDA_R_32F, CUSPARSE_ORDER_COL));
        CUSPARSE_CHECK(cusparseCreateDnMat(&cm_, p.m, p.n, p.m, c_.raw(), CUDA_R_32F, CUSPARSE_ORDER_COL));
        for (auto [alg, name] : {std::pair{CUSPARSE_SPMM_ALG_DEFAULT, "SpMM ALG_DEFAULT"},
                                 {CUSPARSE_SPMM_CSR_ALG1, "SpMM CSR_ALG1"},
                                 {CUSPARSE_SPMM_CSR_ALG2, "SpMM CSR_ALG2"},
                                 {CUSPARSE_SPMM_CSR_ALG3, "SpMM CSR_ALG3"}})
          add_variant(name, static_cast<int>(alg));
      }
      variants_.push_back({"cuBLAS", "dense cublasGemmEx fp32 (A densified)", true, "", 0, {}});
      algos_.push_back(-1);
      ws_.emplace_back();
      CUDA_CHECK(cudaStreamSynchronize(b.stream()));
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaSpmmCase() override { release(); }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t v) override {
    if (algos_[v] < 0) {
      CUBLAS_CHECK(dense_call());
      return;
    }
    CUSPARSE_CHECK(sparse_call(algos_[v], ws_[v].raw()));
  }
  std::vector<float> output(size_t v) override {
    CUDA_CHECK(cudaMemsetAsync(c_.raw(), 0, c_.bytes(), b_.stream()));
    run(v);
    std::vector<float> host(static_cast<size_t>(c_.numel()));
    b_.download(c_, host.data());
    return host;
  }
  int64_t operand_bytes() const override {
    return static_cast<int64_t>(row_ptr_.bytes() + col_idx_.bytes() + values_.bytes() + bmat_.bytes() + c_.bytes());
  }

 private:
  cublasStatus_t dense_call() {
    // fp32 without TF32: the sparse kernels' format.
    const cublasStatus_t mode = cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH);
    if (mode != CUBLAS_STATUS_SUCCESS) return mode;
    return cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(p_.m), static_cast<int>(p_.n),
                        static_cast<int>(p_.k), &one_, dense_.raw(), CUDA_R_32F, static_cast<int>(p_.m), bmat_.raw(),
                        CUDA_R_32F, static_cast<int>(p_.k), &zero_, c_.raw(), CUDA_R_32F, static_cast<int>(p_.m),
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  cusparseStatus_t sparse_call(int alg, void* ws) {
    if (p_.n == 1)
      return cusparseSpMV(sp_, CUSPARSE_OPERATION_NON_TRANSPOSE, &one_, a_, bx_, &zero_, cy_, CUDA_R_32F,
                          static_cast<cusparseSpMVAlg_t>(alg), ws);
    return cusparseSpMM(sp_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one_, a_, bm_, &zero_,
                        cm_, CUDA_R_32F, static_cast<cusparseSpMMAlg_t>(alg), ws);
  }
  // Asks the variant's workspace, allocates it and makes a trial call: a refusal is the row's status.
  void add_variant(const char* name, int alg) {
    KernelVariant v{"cuSPARSE", name, true, "", 0, {}};
    size_t bytes = 0;
    cusparseStatus_t st =
        p_.n == 1
            ? cusparseSpMV_bufferSize(sp_, CUSPARSE_OPERATION_NON_TRANSPOSE, &one_, a_, bx_, &zero_, cy_, CUDA_R_32F,
                                      static_cast<cusparseSpMVAlg_t>(alg), &bytes)
            : cusparseSpMM_bufferSize(sp_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one_,
                                      a_, bm_, &zero_, cm_, CUDA_R_32F, static_cast<cusparseSpMMAlg_t>(alg), &bytes);
    Tensor ws;
    if (st == CUSPARSE_STATUS_SUCCESS) {
      ws = b_.alloc(Shape({static_cast<int64_t>(std::max<size_t>(bytes, 1))}), DType::I8);
      v.workspace_bytes = static_cast<int64_t>(bytes);
      st = sparse_call(alg, ws.raw());
    }
    if (st != CUSPARSE_STATUS_SUCCESS) {
      v.supported = false;
      v.status = cusparseGetErrorString(st);
    }
    variants_.push_back(v);
    algos_.push_back(alg);
    ws_.push_back(ws);
  }
  void release() noexcept {
    if (a_) cusparseDestroySpMat(a_);
    if (bm_) cusparseDestroyDnMat(bm_);
    if (cm_) cusparseDestroyDnMat(cm_);
    if (bx_) cusparseDestroyDnVec(bx_);
    if (cy_) cusparseDestroyDnVec(cy_);
    a_ = nullptr, bm_ = cm_ = nullptr, bx_ = cy_ = nullptr;
  }

  CudaBackend& b_;
  SparseProblem p_;
  Tensor row_ptr_, col_idx_, values_, bmat_, c_, dense_;
  std::vector<Tensor> ws_;  // per variant (the dense one has none)
  cusparseHandle_t sp_;
  cublasHandle_t blas_;
  cusparseSpMatDescr_t a_ = nullptr;
  cusparseDnMatDescr_t bm_ = nullptr, cm_ = nullptr;
  cusparseDnVecDescr_t bx_ = nullptr, cy_ = nullptr;
  std::vector<int> algos_;
  std::vector<KernelVariant> variants_;
  float one_ = 1.0f, zero_ = 0.0f;
};

// ---- RNN: one layer through cuDNN's RNN API (v8 descriptors), each algorithm a variant ----

using RnnDesc = cuda::CudnnDescriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDesc =
    cuda::CudnnDescriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using DropoutDesc =
    cuda::CudnnDescriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;

const char* rnn_algo_name(int a) {
  switch (a) {
    case CUDNN_RNN_ALGO_STANDARD:
      return "STANDARD";
    case CUDNN_RNN_ALGO_PERSIST_STATIC:
      return "PERSIST_STATIC";
    case CUDNN_RNN_ALGO_PERSIST_DYNAMIC:
      return "PERSIST_DYNAMIC";
    case CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H:
      return "PERSIST_STATIC_SMALL_H";
  }
  return "?";
}

class CudaRnnCase final : public KernelCase {
 public:
  CudaRnnCase(CudaBackend& b, const RnnProblem& p, RnnPass pass, KernelPrecision precision, const RnnInputs& in,
              const std::function<bool()>& stop_requested)
      : b_(b), dnn_(b.cudnn_handle()), p_(p), pass_(pass), dtype_(kernel_input_dtype(precision)) {
    b.context()->make_current();
    const char* op = "bench rnn";
    const int h = cuda::to_int_dim(p.hidden, op), n = cuda::to_int_dim(p.batch, op);
    const int t = cuda::to_int_dim(p.time_steps, op);
    const cudnnDataType_t type = cuda::cudnn_type(dtype_);
    // No dropout (one layer: cuDNN applies it between layers only), but the descriptor must exist.
    size_t state_bytes = 0;
    CUDNN_CHECK(cudnnDropoutGetStatesSize(dnn_, &state_bytes));
    dropout_states_ = b.alloc(Shape({static_cast<int64_t>(std::max<size_t>(state_bytes, 1))}), DType::I8);
    CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout_, dnn_, 0.0f, dropout_states_.raw(), state_bytes, 1));
    const std::vector<int32_t> lengths(static_cast<size_t>(n), t);
    std::vector<char> length_bytes(lengths.size() * sizeof(int32_t));
    std::memcpy(length_bytes.data(), lengths.data(), length_bytes.size());
    lengths_ = device_bytes(b, length_bytes);
    for (cudnnRNNDataDescriptor_t d : {xd_.get(), yd_.get()})
      CUDNN_CHECK(cudnnSetRNNDataDescriptor(d, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, t, n, h, lengths.data(),
                                            nullptr));
    const int dims[3] = {1, n, h}, strides[3] = {n * h, h, 1};
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(hd_, type, 3, dims, strides));
    const std::vector<char> x_bytes = encode(in.x, dtype_, {});
    x_ = device_bytes(b, x_bytes);
    dy_ = device_bytes(b, x_bytes);  // any gradient of y's shape: x's values serve
    y_ = b.alloc(Shape({static_cast<int64_t>(in.x.size() * dtype_size(dtype_))}), DType::I8);
    dx_ = b.alloc(Shape({static_cast<int64_t>(in.x.size() * dtype_size(dtype_))}), DType::I8);
    // fp32: FMA math only (no TF32 behind the name); tf32: cuDNN's default math, which lets float
    // RNNs use TF32 tensor cores (ALLOW_CONVERSION would let them down-convert to fp16); 16-bit:
    // tensor cores, fp32 arithmetic inside the cell.
    const cudnnMathType_t math = precision == KernelPrecision::FP32   ? CUDNN_FMA_MATH
                                 : precision == KernelPrecision::TF32 ? CUDNN_DEFAULT_MATH
                                                                      : CUDNN_TENSOR_OP_MATH;
    // Linear layer g is gate g's input matrix, gates + g its recurrent one (cuDNN's order: lstm input,
    // forget, cell, output; gru reset, update, new): encoded once, copied into every algorithm's
    // weight space; the copies are stream-ordered and the bytes live until the synchronise below.
    const size_t gates = static_cast<size_t>(p.gates());
    std::vector<std::vector<char>> matrices, biases;
    for (size_t id = 0; id < 2 * gates; ++id) {
      matrices.push_back(encode(id < gates ? in.w[id] : in.r[id - gates], dtype_, {}));
      biases.push_back(encode(id < gates ? in.bw[id] : in.br[id - gates], dtype_, {}));
    }
    for (int a = 0; a < static_cast<int>(CUDNN_RNN_ALGO_COUNT); ++a) {
      if (stop_requested && stop_requested()) {
        CUDA_CHECK(cudaStreamSynchronize(b_.stream()));  // the weight copies read host bytes
        throw BenchStopped{};
      }
      const auto t0 = std::chrono::steady_clock::now();
      add_algorithm(a, type, math, matrices, biases);
      // The trial call included: a first call may load or tune kernels.
      CUDA_CHECK(cudaStreamSynchronize(b_.stream()));
      variants_.back().setup_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t v) override { CUDNN_CHECK(call(*algos_[v])); }
  std::vector<float> output(size_t v) override {
    CUDA_CHECK(cudaMemsetAsync(y_.raw(), 0, y_.bytes(), b_.stream()));
    run(v);
    std::vector<char> host(y_.bytes());
    b_.download(y_, host.data());
    return decode(host, dtype_, {});
  }
  // x, y and the weights (training: and their gradients); each algorithm's work and reserve space
  // is its workspace.
  int64_t operand_bytes() const override {
    const size_t io = x_.bytes() + y_.bytes(), weights = weight_bytes_;
    return static_cast<int64_t>(pass_ == RnnPass::Training ? 2 * (io + weights) : io + weights);
  }

 private:
  struct Algorithm {
    RnnDesc desc;
    Tensor weights, dweights, work, reserve;
    size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
  };

  const int32_t* lengths() const { return static_cast<const int32_t*>(lengths_.raw()); }
  cudnnStatus_t call(Algorithm& a) {
    if (pass_ == RnnPass::Inference)
      return cudnnRNNForward(dnn_, a.desc, CUDNN_FWD_MODE_INFERENCE, lengths(), xd_, x_.raw(), yd_, y_.raw(), hd_,
                             nullptr, nullptr, hd_, nullptr, nullptr, a.weight_bytes, a.weights.raw(), a.work_bytes,
                             a.work.raw(), 0, nullptr);
    cudnnStatus_t st = cudnnRNNForward(dnn_, a.desc, CUDNN_FWD_MODE_TRAINING, lengths(), xd_, x_.raw(), yd_, y_.raw(),
                                       hd_, nullptr, nullptr, hd_, nullptr, nullptr, a.weight_bytes, a.weights.raw(),
                                       a.work_bytes, a.work.raw(), a.reserve_bytes, a.reserve.raw());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    st = cudnnRNNBackwardData_v8(dnn_, a.desc, lengths(), yd_, y_.raw(), dy_.raw(), xd_, dx_.raw(), hd_, nullptr,
                                 nullptr, nullptr, hd_, nullptr, nullptr, nullptr, a.weight_bytes, a.weights.raw(),
                                 a.work_bytes, a.work.raw(), a.reserve_bytes, a.reserve.raw());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    // cuDNN accumulates weight gradients (its only mode): the sums grow over calls, the work does not.
    return cudnnRNNBackwardWeights_v8(dnn_, a.desc, CUDNN_WGRAD_MODE_ADD, lengths(), xd_, x_.raw(), hd_, nullptr, yd_,
                                      y_.raw(), a.weight_bytes, a.dweights.raw(), a.work_bytes, a.work.raw(),
                                      a.reserve_bytes, a.reserve.raw());
  }

  // One algorithm: its descriptor, weight space filled with the inputs' matrices, work and reserve
  // space, and a trial call. Whatever cuDNN refuses on the way makes the variant unsupported with
  // cuDNN's status (the persistent algorithms take only some sizes, formats and batches).
  void add_algorithm(int algo, cudnnDataType_t type, cudnnMathType_t math,
                     const std::vector<std::vector<char>>& matrices, const std::vector<std::vector<char>>& biases) {
    KernelVariant v{"cuDNN", rnn_algo_name(algo), true, "", 0, {}};
    auto a = std::make_unique<Algorithm>();
    const int h = static_cast<int>(p_.hidden);
    const cudnnRNNMode_t mode = p_.cell == RnnCell::Vanilla ? CUDNN_RNN_RELU
                                : p_.cell == RnnCell::Lstm  ? CUDNN_LSTM
                                                            : CUDNN_GRU;
    auto refuse = [&](cudnnStatus_t st, const char* step) {
      v.supported = false;
      v.status = fmt::format("{} ({})", cudnnGetErrorString(st), step);
      variants_.push_back(v);
      algos_.push_back(nullptr);
    };
    cudnnStatus_t st = cudnnSetRNNDescriptor_v8(a->desc, static_cast<cudnnRNNAlgo_t>(algo), mode, CUDNN_RNN_DOUBLE_BIAS,
                                                CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type, CUDNN_DATA_FLOAT, math,
                                                h, h, h, 1, dropout_, CUDNN_RNN_PADDED_IO_DISABLED);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "descriptor");
    if (algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC) {
      st = cudnnBuildRNNDynamic(dnn_, a->desc, static_cast<int>(p_.batch));
      if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "build");
    }
    st = cudnnGetRNNWeightSpaceSize(dnn_, a->desc, &a->weight_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "weight space");
    st = cudnnGetRNNTempSpaceSizes(dnn_, a->desc,
                                   pass_ == RnnPass::Inference ? CUDNN_FWD_MODE_INFERENCE : CUDNN_FWD_MODE_TRAINING,
                                   xd_, &a->work_bytes, &a->reserve_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "work space");
    auto bytes = [](size_t n) { return Shape({static_cast<int64_t>(std::max<size_t>(n, 1))}); };
    a->weights = b_.alloc(bytes(a->weight_bytes), DType::I8);
    a->work = b_.alloc(bytes(a->work_bytes), DType::I8);
    if (pass_ == RnnPass::Training) {
      a->reserve = b_.alloc(bytes(a->reserve_bytes), DType::I8);
      a->dweights = b_.alloc(bytes(a->weight_bytes), DType::I8);
      CUDA_CHECK(cudaMemsetAsync(a->dweights.raw(), 0, a->dweights.bytes(), b_.stream()));
    }
    // The matrices and biases where cuDNN keeps them in this algorithm's weight space.
    cuda::TensorDesc md, bd;
    for (size_t id = 0; id < matrices.size(); ++id) {
      void *m = nullptr, *bias = nullptr;
      st = cudnnGetRNNWeightParams(dnn_, a->desc, 0, a->weight_bytes, a->weights.raw(), static_cast<int32_t>(id), md,
                                   &m, bd, &bias);
      if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "weight layout");
      CUDA_CHECK(cudaMemcpyAsync(m, matrices[id].data(), matrices[id].size(), cudaMemcpyHostToDevice, b_.stream()));
      CUDA_CHECK(cudaMemcpyAsync(bias, biases[id].data(), biases[id].size(), cudaMemcpyHostToDevice, b_.stream()));
    }
    weight_bytes_ = std::max(weight_bytes_, a->weight_bytes);
    v.workspace_bytes = static_cast<int64_t>(a->work_bytes + a->reserve_bytes);
    st = call(*a);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "call");
    variants_.push_back(v);
    algos_.push_back(std::move(a));
  }

  CudaBackend& b_;
  cudnnHandle_t dnn_;
  RnnProblem p_;
  RnnPass pass_;
  DType dtype_;
  DropoutDesc dropout_;
  RnnDataDesc xd_, yd_;
  cuda::TensorDesc hd_;
  Tensor dropout_states_, lengths_, x_, y_, dx_, dy_;
  size_t weight_bytes_ = 0;
  std::vector<std::unique_ptr<Algorithm>> algos_;  // null where the variant is unsupported
  std::vector<KernelVariant> variants_;
};

class CudaKernelBench final : public KernelBench {
 public:
  explicit CudaKernelBench(CudaBackend& b) : b_(b), handles_(b) {}
  std::unique_ptr<KernelCase> gemm(const GemmProblem& p, KernelPrecision precision,
                                   const KernelInputs& inputs) override {
    return std::make_unique<CudaGemmCase>(b_, handles_, p, precision, inputs);
  }
  std::unique_ptr<KernelCase> conv(const ConvProblem& p, ConvPass pass, KernelPrecision precision, Layout layout,
                                   const KernelInputs& inputs) override {
    if (precision == KernelPrecision::INT8)
      throw_config(
          "bench conv --precision int8: cuDNN's int8 convolutions take a fused graph (int8 inference "
          "runs them; see cnnscale infer), not the legacy algorithms this benchmark compares");
    return std::make_unique<CudaConvCase>(b_, p, pass, precision, layout, inputs);
  }
  std::unique_ptr<KernelCase> spmm(const SparseProblem& p, const SparseInputs& inputs) override {
    return std::make_unique<CudaSpmmCase>(b_, handles_, p, inputs);
  }
  std::unique_ptr<KernelCase> rnn(const RnnProblem& p, RnnPass pass, KernelPrecision precision,
                                  const RnnInputs& inputs) override {
    if (precision == KernelPrecision::INT8) throw_config("bench rnn: cuDNN's RNNs have no int8 format");
    return std::make_unique<CudaRnnCase>(b_, p, pass, precision, inputs, stop_requested);
  }

 private:
  CudaBackend& b_;
  LibraryHandles handles_;
};

}  // namespace

std::unique_ptr<KernelBench> make_cuda_kernel_bench(Backend& backend) {
  auto* cb = dynamic_cast<CudaBackend*>(&backend);
  if (!cb) throw_runtime("kernel benchmarks: backend {} is not the CUDA backend", backend.name());
  return std::make_unique<CudaKernelBench>(*cb);
}

}  // namespace cnnscale
