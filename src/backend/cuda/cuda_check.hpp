// Error checks for CUDA runtime, cuDNN, cuBLAS and NCCL calls: a failing call throws
// cnnscale::RuntimeError naming the library, the status, the statement, file:line, host and rank.
// Usable from .cpp and .cu files (no fmt here; formatting lives in cuda_check.cpp).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace cnnscale::cuda {

[[noreturn]] void fail(cudaError_t status, const char* statement, const char* file, int line);
[[noreturn]] void fail(cudnnStatus_t status, const char* statement, const char* file, int line);
[[noreturn]] void fail(cublasStatus_t status, const char* statement, const char* file, int line);
[[noreturn]] void fail(ncclResult_t status, const char* statement, const char* file, int line);

}  // namespace cnnscale::cuda

#define CNNSCALE_CUDA_CHECK_STATUS(ok, stmt)                                   \
  do {                                                                         \
    auto cnnscale_status_ = (stmt);                                            \
    if (cnnscale_status_ != (ok))                                              \
      ::cnnscale::cuda::fail(cnnscale_status_, #stmt, __FILE__, __LINE__);     \
  } while (0)

#define CUDA_CHECK(stmt) CNNSCALE_CUDA_CHECK_STATUS(cudaSuccess, stmt)
#define CUDNN_CHECK(stmt) CNNSCALE_CUDA_CHECK_STATUS(CUDNN_STATUS_SUCCESS, stmt)
#define CUBLAS_CHECK(stmt) CNNSCALE_CUDA_CHECK_STATUS(CUBLAS_STATUS_SUCCESS, stmt)
#define NCCL_CHECK(stmt) CNNSCALE_CUDA_CHECK_STATUS(ncclSuccess, stmt)

// After every kernel launch: catches bad launch configurations at the call site (asynchronous
// faults inside the kernel surface at the next synchronising call, as always with CUDA).
#define CUDA_CHECK_LAUNCH(kernel_name)                                                     \
  do {                                                                                     \
    cudaError_t cnnscale_status_ = cudaGetLastError();                                     \
    if (cnnscale_status_ != cudaSuccess)                                                   \
      ::cnnscale::cuda::fail(cnnscale_status_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)
