// The CUDA kernel benchmark's sparse case: cuSPARSE's CSR algorithms against cuBLAS' dense GEMM.
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


}  // namespace

std::unique_ptr<KernelCase> make_spmm_case(CudaBackend& b, const LibraryHandles& h, const SparseProblem& p,
                                           const SparseInputs& in) {
  return std::make_unique<CudaSpmmCase>(b, h, p, in);
}

}  // namespace cnnscale::cuda_bench
