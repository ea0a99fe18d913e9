// LinearPlans (cuda_linear_plans.hpp): cuBLASLt's descriptors, preferences and heuristic query for
// one plan, and its run. The layouts are cuda_linear.cpp's.
#include "backend/cuda/cuda_linear_plans.hpp"

#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "core/log.hpp"

namespace cnnscale::cuda {

namespace {
// What cuBLASLt may use as workspace: NVIDIA's advice for Hopper is 32 MiB.
constexpr size_t kLinearWorkspace = size_t{32} << 20;

cudaDataType_t lt_type(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : t == DType::F16 ? CUDA_R_16F : t == DType::I8 ? CUDA_R_8I : CUDA_R_32F;
}

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "bias+relu";
    case CUBLASLT_EPILOGUE_BIAS: return "bias";
    case CUBLASLT_EPILOGUE_RELU: return "relu";
    case CUBLASLT_EPILOGUE_BGRADB: return "bias gradient";
    default: return "none";
  }
}
}  // namespace

LinearPlan& LinearPlans::plan(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, DType dtype,
                              cublasLtEpilogue_t epilogue, void* bias, int alignment) {
  const Key key{trans_a, trans_b, m, n, k, static_cast<int64_t>(dtype), epilogue, alignment};
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  if (!handle_) CUBLAS_CHECK(cublasLtCreate(&handle_));
  auto plan = std::make_unique<LinearPlan>();
  const cudaDataType_t type = lt_type(dtype);
  // 16-bit operands accumulate in fp32; f32 ones reach this only with TF32 allowed (the callers);
  // int8 ones sum exactly in int32, into an int32 C (IMMA kernels, which want the "TN" layout).
  const bool int8 = dtype == DType::I8;
  const cublasComputeType_t compute = dtype == DType::F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : int8              ? CUBLAS_COMPUTE_32I
                                                          : CUBLAS_COMPUTE_32F;
  const cudaDataType_t c_type = int8 ? CUDA_R_32I : type;
  plan->int32_scale = int8;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, int8 ? CUDA_R_32I : CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_RELU) {
    // The bias (or its gradient) is a compute copy in the operands' dtype.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
    // The heuristic reads the bias pointer's alignment from the pointer itself: this one is as
    // aligned as every pointer the plan will run on (the alignment is part of the plan's key).
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  // Stored shapes (rows x cols, column-major, leading dimension = rows): op(A) is m x k, op(B) k x n.
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, type, trans_a ? u(k) : u(m), trans_a ? u(m) : u(k),
                                          trans_a ? k : m));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, type, trans_b ? u(n) : u(k), trans_b ? u(k) : u(n),
                                          trans_b ? n : k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, c_type, u(m), u(n), m));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t limit = kLinearWorkspace;
  const auto align = static_cast<uint32_t>(alignment);
  cublasStatus_t status =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof(limit));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (status == CUBLAS_STATUS_SUCCESS) status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c, plan->c, pref, 1,
                                            &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED (or no result): this epilogue, dtype or alignment has no kernel; anything else
  // is an error of ours or of the device.
  if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(status);
  plan->usable = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->usable) {
    plan->algo = result.algo;
    plan->workspace = result.workspaceSize;
  }
  log::debug("cuBLASLt {} matmul m={} n={} k={} {}{} epilogue {}, {}-byte aligned: {}", dtype_name(dtype), m, n, k,
             trans_a ? "T" : "N", trans_b ? "T" : "N", epilogue_name(epilogue), alignment,
             plan->usable ? "fused" : "no algorithm, the ops run apart");
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void LinearPlans::run(LinearPlan& plan, const void* a, const void* b, void* c, void* bias, void* workspace,
                      cudaStream_t stream) {
  if (bias) {
    const cublasLtMatmulDescAttributes_t attr = CUBLASLT_MATMUL_DESC_BIAS_POINTER;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, attr, &bias, sizeof(bias)));
  }
  const float one = 1.0f, zero = 0.0f;
  const int32_t one_i = 1, zero_i = 0;
  const void* alpha = plan.int32_scale ? static_cast<const void*>(&one_i) : &one;
  const void* beta = plan.int32_scale ? static_cast<const void*>(&zero_i) : &zero;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, alpha, a, plan.a, b, plan.b, beta, c, plan.c, c, plan.c, &plan.algo,
                              workspace, plan.workspace, stream));
}

}  // namespace cnnscale::cuda
