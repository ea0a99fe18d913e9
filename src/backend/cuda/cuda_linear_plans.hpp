// cuBLASLt matmul plans for CudaBackend's fully connected layers (cuda_linear.cpp): one per shape,
// dtype, epilogue and alignment, made once (cuBLASLt's first heuristic answer, no timing), and the
// cuBLASLt handle they run on, made at the first plan.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "core/dtype.hpp"

namespace cnnscale::cuda {

// A cuBLASLt matmul of one shape, dtype and epilogue with its algorithm.
struct LinearPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool usable = false;
  bool int32_scale = false;  // an int8 matmul: alpha and beta are int32
  LinearPlan() = default;
  LinearPlan(const LinearPlan&) = delete;
  LinearPlan& operator=(const LinearPlan&) = delete;
  ~LinearPlan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

class LinearPlans {
 public:
  LinearPlans() = default;
  LinearPlans(const LinearPlans&) = delete;
  LinearPlans& operator=(const LinearPlans&) = delete;
  ~LinearPlans() { clear(); }

  // Column-major C (m, n) = op(A) op(B) with the epilogue, A and B stored as op's transposes say,
  // every operand and the epilogue's vector in `dtype` and aligned to `alignment` bytes. Made once
  // per set of arguments (heuristic query, no timing); plan.usable is false where cuBLASLt has none.
  LinearPlan& plan(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, DType dtype,
                   cublasLtEpilogue_t epilogue, void* bias, int alignment);
  // Runs `plan` on the operands (pointers of the matrices as stored), `bias` the epilogue's vector,
  // on `stream` with `workspace` (plan.workspace bytes; null when 0).
  void run(LinearPlan& plan, const void* a, const void* b, void* c, void* bias, void* workspace, cudaStream_t stream);
  // Destroys the plans, then the handle (the backend's destructor, in its context).
  void clear() {
    plans_.clear();
    if (handle_) cublasLtDestroy(handle_);
    handle_ = nullptr;
  }

 private:
  using Key = std::array<int64_t, 8>;  // plan()'s arguments but the bias pointer
  std::map<Key, std::unique_ptr<LinearPlan>> plans_;
  cublasLtHandle_t handle_ = nullptr;  // made on first use (plan)
};

}  // namespace cnnscale::cuda
