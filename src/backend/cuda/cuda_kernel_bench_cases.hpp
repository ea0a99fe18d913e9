// What the CUDA kernel benchmark's cases share (cuda_kernel_bench*.cpp): host floats to and from
// device bytes in a format and memory order, the library handles made once per benchmark, and the
// factories of the cases: GEMM (cuda_kernel_bench.cpp), convolution, sparse and RNN (each in
// cuda_kernel_bench_<kind>.cpp).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <functional>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_check_sparse.hpp"
#include "backend/kernel_bench.hpp"

namespace cnnscale::cuda_bench {

// Host floats (logical order) -> device bytes of `t`, in `order`: `perm` maps a storage index to its
// logical index (identity when empty).
std::vector<char> encode(const std::vector<float>& v, DType t, const std::vector<int64_t>& perm);
std::vector<float> decode(const std::vector<char>& bytes, DType t, const std::vector<int64_t>& perm);

// Storage index -> NCHW logical index for an (n, c, h, w) tensor stored channels-last.
std::vector<int64_t> nhwc_permutation(const Shape& s);

// A device buffer of the backend's allocator holding `bytes`.
Tensor device_bytes(Backend& b, const std::vector<char>& bytes);


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

// The cases, one per problem and pass; each variant one library algorithm.
std::unique_ptr<KernelCase> make_gemm_case(CudaBackend& b, const LibraryHandles& h, const GemmProblem& p,
                                           KernelPrecision precision, const KernelInputs& in);
std::unique_ptr<KernelCase> make_conv_case(CudaBackend& b, const ConvProblem& p, ConvPass pass,
                                           KernelPrecision precision, Layout layout, const KernelInputs& in);
std::unique_ptr<KernelCase> make_spmm_case(CudaBackend& b, const LibraryHandles& h, const SparseProblem& p,
                                           const SparseInputs& in);
std::unique_ptr<KernelCase> make_rnn_case(CudaBackend& b, const RnnProblem& p, RnnPass pass, KernelPrecision precision,
                                          const RnnInputs& in, const std::function<bool()>& stop_requested);

}  // namespace cnnscale::cuda_bench
