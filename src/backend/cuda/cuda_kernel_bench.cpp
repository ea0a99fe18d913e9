// CUDA kernel benchmark cases. GEMM: cublasGemmEx with the default algorithm, and cuBLASLt's
// heuristic list (its first entry is cuBLASLt's own choice; the rest let the harness find the best
// it returned). Convolution (cuda_kernel_bench_conv.cpp): every legacy cuDNN algorithm of the pass,
// its workspace asked of cuDNN and each refused algorithm kept with cuDNN's status. Sparse
// (cuda_kernel_bench_sparse.cpp): cuSPARSE's CSR algorithms against the dense GEMM. RNN
// (cuda_kernel_bench_rnn.cpp): cuDNN's RNN algorithms. The library handles are made once per
// benchmark (LibraryHandles). Here: the GEMM case, the helpers the cases share, and the benchmark.
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
#include "backend/cuda/cuda_kernel_bench_cases.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "core/half.hpp"

namespace cnnscale::cuda_bench {

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

namespace {

// Room for cuBLASLt's algorithms: what its heuristics may ask, as PyTorch and cuBLAS' own docs use.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
// cuBLASLt's heuristic order puts its choice first; the next three show how close its choice comes
// to the best it knows for the shape (more add little but each costs an energy window).
constexpr int kLtAlgorithms = 4;

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

}  // namespace

std::unique_ptr<KernelCase> make_gemm_case(CudaBackend& b, const LibraryHandles& h, const GemmProblem& p,
                                           KernelPrecision precision, const KernelInputs& in) {
  return std::make_unique<CudaGemmCase>(b, h, p, precision, in);
}

}  // namespace cnnscale::cuda_bench

namespace cnnscale {

namespace {

using namespace cuda_bench;

class CudaKernelBench final : public KernelBench {
 public:
  explicit CudaKernelBench(CudaBackend& b) : b_(b), handles_(b) {}
  std::unique_ptr<KernelCase> gemm(const GemmProblem& p, KernelPrecision precision,
                                   const KernelInputs& inputs) override {
    return make_gemm_case(b_, handles_, p, precision, inputs);
  }
  std::unique_ptr<KernelCase> conv(const ConvProblem& p, ConvPass pass, KernelPrecision precision, Layout layout,
                                   const KernelInputs& inputs) override {
    if (precision == KernelPrecision::INT8)
      throw_config(
          "bench conv --precision int8: cuDNN's int8 convolutions take a fused graph (int8 inference "
          "runs them; see cnnscale infer), not the legacy algorithms this benchmark compares");
    return make_conv_case(b_, p, pass, precision, layout, inputs);
  }
  std::unique_ptr<KernelCase> spmm(const SparseProblem& p, const SparseInputs& inputs) override {
    return make_spmm_case(b_, handles_, p, inputs);
  }
  std::unique_ptr<KernelCase> rnn(const RnnProblem& p, RnnPass pass, KernelPrecision precision,
                                  const RnnInputs& inputs) override {
    if (precision == KernelPrecision::INT8) throw_config("bench rnn: cuDNN's RNNs have no int8 format");
    return make_rnn_case(b_, p, pass, precision, inputs, stop_requested);
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
