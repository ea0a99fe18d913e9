// Fully connected layers through cuBLASLt. A layer's forward is one matmul whose epilogue adds the
// bias and applies the ReLU (CUBLASLT_EPILOGUE_RELU_BIAS): the output is written once instead of
// three times (matmul, bias, ReLU), and the step has two kernels fewer per layer. Its parameter
// gradients are one matmul too: dw with the bias gradient, the column sums of dy, formed in the
// epilogue (CUBLASLT_EPILOGUE_BGRADB) while dy is read for dw anyway.
//
// The layouts follow gemm() in cuda_blas.cpp: a row-major matrix is the column-major view of its
// transpose. Forward, y (N, K) = x (N, D) w^T is column-major y^T (K, N) = op(w^T as stored: D x K)
// op(x^T: D x N) with op(A) = A^T: the bias runs along y^T's rows (K of them), as the epilogue
// wants. Backward, dw (K, D) = dy^T x is column-major dw^T (D, K) = x^T (D x N) op(dy^T: K x N)
// with op(B) = B^T, whose inner dimension is N: BGRADB sums B over it, giving one value per column
// of dw^T, per output. The algorithm is cuBLASLt's first heuristic answer for the shape; where it
// has none (an epilogue not offered for a dtype or alignment), the plan says so and the ops run
// apart, as the Backend's defaults do. An int8 layer (linear_forward_int8) is the same plan in int8
// with int32 sums, its scale, bias and ReLU one kernel after it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_conv_timing.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"
#include "core/log.hpp"

namespace cnnscale {

namespace {
// The largest power of two up to 256 dividing every pointer: the alignment the algorithm may assume
// (cuBLASLt's preferences default to 256 bytes, which views into our flat buffers need not have).
int common_alignment(std::initializer_list<const void*> pointers) {
  int alignment = 256;
  for (const void* p : pointers)
    while (alignment > 1 && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}
}  // namespace

void cuda::LinearOps::run_linear(cuda::LinearPlan& plan, const void* a, const void* b, void* c, void* bias) {
  linear_plans_.run(plan, a, b, c, bias, plan.workspace > 0 ? b_.workspace(plan.workspace) : nullptr, b_.stream());
}

// An int8 fully connected layer: cuBLASLt's int8 matmul into int32 sums, column-major acc (K' x N) =
// wq^T (K' x C) xq (C x N) -- wq and xq both stored with C contiguous, as the layer's row-major
// (K', C) weights and (N, C) inputs are -- then one kernel applies scale, bias and ReLU into y.
void cuda::LinearOps::linear_forward_int8(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias,
                                          bool relu, const Tensor& y) {
  const char* op = "linear_forward_int8";
  cuda::expect_i8(op, "x", xq, b_.device_);
  cuda::expect_i8(op, "w", wq, b_.device_);
  cuda::expect_float(op, "y", y, b_.device_);
  cuda::expect_dtype(op, "scale", scale, DType::F32);
  cuda::expect_dtype(op, "bias", bias, DType::F32);
  if (xq.shape().rank() != 2 || wq.shape().rank() != 2 || y.shape().rank() != 2)
    throw_runtime("{}: x {}, w {} and y {} are matrices", op, xq.shape().to_string(), wq.shape().to_string(),
                  y.shape().to_string());
  const int64_t n = xq.shape()[0], c = xq.shape()[1], kp = wq.shape()[0], k = y.shape()[1];
  if (wq.shape()[1] != c || y.shape()[0] != n || kp < k)
    throw_runtime("{}: x {}, w {} and y {} do not match", op, xq.shape().to_string(), wq.shape().to_string(),
                  y.shape().to_string());
  cuda::expect_numel(op, "scale", scale, k);
  cuda::expect_numel(op, "bias", bias, k);
  if (c % 4 != 0 || kp % 4 != 0)
    throw_runtime("{}: cuBLASLt's int8 matmuls want inputs ({}) and outputs ({}) in multiples of 4", op, c, kp);
  b_.activate();
  // The int32 sums live in a buffer of the backend's own, grown as needed.
  if (!int8_linear_acc_.defined() || int8_linear_acc_.numel() < n * kp) {
    int8_linear_acc_ = b_.alloc(Shape{n * kp}, DType::I32);
    b_.buffers_moved();
  }
  void* acc = int8_linear_acc_.raw();
  cuda::LinearPlan& plan = linear_plans_.plan(true, false, kp, n, c, DType::I8, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                                              common_alignment({xq.raw(), wq.raw(), acc}));
  if (!plan.usable)
    throw_runtime("{}: cuBLASLt has no int8 matmul for x ({}, {}) and w ({}, {}) on this GPU", op, n, c, kp, c);
  run_linear(plan, wq.raw(), xq.raw(), acc, nullptr);
  cuda::launch_int8_linear_epilogue(y.dtype(), n, k, kp, static_cast<const int32_t*>(acc), scale.f32(), bias.f32(),
                                    relu, y.raw(), b_.stream());
}

namespace {
// Whether `x`, `w` and `y` go through cuBLASLt: tensor-core precisions (16-bit, or f32 with TF32),
// operands of one dtype in plain row-major order.
bool lt_eligible(const Tensor& x, const Tensor& w, const Tensor& y, bool allow_tf32) {
  if (x.dtype() != w.dtype() || y.dtype() != w.dtype()) return false;
  if (w.dtype() == DType::F32 && !allow_tf32) return false;
  for (const Tensor* t : {&x, &w, &y})
    if (t->layout() != Layout::NCHW) return false;
  return true;
}
}  // namespace

// Batch 1 (one row of x, as inference at batch 1 runs every fully connected layer): y (K) = w (K, D)
// x (D), a matrix-vector product, the weights read once and nothing to reuse, so the time is w's
// bytes over the memory bandwidth. cuBLAS's GEMV kernels are written for that; a GEMM kernel tiles
// for a wide N and leaves most of its tile idle. In column-major terms w as stored is (D x K), and
// y = op(it) x with op = transpose. fp32 sums in fp32 (no TF32: GEMV has no tensor-core form), the
// 16-bit types through cuBLAS's mixed GEMVs (16-bit operands, fp32 compute). Bias and ReLU follow.
bool cuda::LinearOps::gemv_applies(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (w.shape().rank() != 2 || y.shape().n() != 1 || x.dtype() != w.dtype() || y.dtype() != w.dtype()) return false;
  const int64_t k = w.shape()[0], d = w.shape()[1];
  return x.numel() == d && y.numel() == k && k <= INT32_MAX && d <= INT32_MAX &&
         (w.dtype() == DType::F32 || w.dtype() == DType::BF16 || w.dtype() == DType::F16);
}

void cuda::LinearOps::linear_forward_gemv(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                                          const Tensor& y) {
  b_.activate();
  const float one = 1.0f, zero = 0.0f;
  const int m = static_cast<int>(w.shape()[1]), n = static_cast<int>(w.shape()[0]);
  if (w.dtype() == DType::F32) {
    CUBLAS_CHECK(cublasSgemv(b_.cublas_, CUBLAS_OP_T, m, n, &one, w.f32(), m, x.f32(), 1, &zero, y.f32(), 1));
  } else if (w.dtype() == DType::BF16) {
    CUBLAS_CHECK(cublasTSTgemvStridedBatched(
        b_.cublas_, CUBLAS_OP_T, m, n, &one, static_cast<const __nv_bfloat16*>(w.raw()), m, 0,
        static_cast<const __nv_bfloat16*>(x.raw()), 1, 0, &zero, static_cast<__nv_bfloat16*>(y.raw()), 1, 0, 1));
  } else {
    CUBLAS_CHECK(cublasHSHgemvStridedBatched(b_.cublas_, CUBLAS_OP_T, m, n, &one, static_cast<const __half*>(w.raw()),
                                             m, 0, static_cast<const __half*>(x.raw()), 1, 0, &zero,
                                             static_cast<__half*>(y.raw()), 1, 0, 1));
  }
  if (bias.defined()) b_.bias_add(bias, y);
  if (relu) b_.relu_forward(y, y);
}

// Timed like a convolution's forms (the median of runs after an untimed one), on the call's own
// buffers: both write y, nothing else.
bool cuda::LinearOps::gemv_measures_faster(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                                           const Tensor& y) {
  const auto key = std::make_tuple(w.shape()[0], w.shape()[1], static_cast<int>(w.dtype()), bias.defined(), relu);
  if (auto it = gemv_faster_.find(key); it != gemv_faster_.end()) return it->second;
  // Deterministic runs choose without timing: the matmul, as at every other batch size.
  bool faster = false;
  if (!b_.options_.deterministic) {
    cuda::EventPair ev;
    auto time = [&](auto&& forward) {
      forward();
      return cuda::median_run_ms(ev, b_.stream(), [&] {
        forward();
        return true;
      });
    };
    const float gemv_ms = time([&] { linear_forward_gemv(x, w, bias, relu, y); });
    const float matmul_ms = time([&] { linear_forward_matmul(x, w, bias, relu, y); });
    faster = gemv_ms < matmul_ms;
    log::debug("batch-1 fully connected {}x{} {}: GEMV {:.4f} ms, matmul {:.4f} ms: {} runs", w.shape()[0],
               w.shape()[1], dtype_name(w.dtype()), gemv_ms, matmul_ms, faster ? "GEMV" : "the matmul");
  }
  gemv_faster_.emplace(key, faster);
  return faster;
}

void cuda::LinearOps::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y) {
  for (const auto& [name, t] : {std::pair{"x", &x}, {"w", &w}, {"y", &y}})
    cuda::expect_float("linear_forward", name, *t, b_.device_);
  if (bias.defined()) {
    cuda::expect_dtype("linear_forward", "bias", bias, w.dtype());
    if (w.shape().rank() == 2) cuda::expect_numel("linear_forward", "bias", bias, w.shape()[0]);
  }
  if (b_.options_.fc_gemv != FcGemv::Off && gemv_applies(x, w, y) &&
      (b_.options_.fc_gemv == FcGemv::On || gemv_measures_faster(x, w, bias, relu, y)))
    return linear_forward_gemv(x, w, bias, relu, y);
  linear_forward_matmul(x, w, bias, relu, y);
}

void cuda::LinearOps::linear_forward_matmul(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                                            const Tensor& y) {
  const bool fusable = lt_eligible(x, w, y, b_.options_.allow_tf32) && w.shape().rank() == 2;
  if (!fusable || y.numel() == 0) return b_.Backend::linear_forward(x, w, bias, relu, y);
  const int64_t n = y.shape().n(), k = w.shape()[0], d = w.shape()[1];
  if (x.numel() != n * d || y.numel() != n * k)
    return b_.Backend::linear_forward(x, w, bias, relu, y);  // names the error
  b_.activate();
  const cublasLtEpilogue_t epilogue = bias.defined() ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                                     : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  void* b = bias.defined() ? bias.raw() : nullptr;
  const int alignment = common_alignment({x.raw(), w.raw(), y.raw(), b ? b : y.raw()});
  // y^T (K, N) = op(w as stored: D x K, transposed) * x as stored (D x N).
  cuda::LinearPlan& plan = linear_plans_.plan(true, false, k, n, d, w.dtype(), epilogue, b, alignment);
  if (!plan.usable) return b_.Backend::linear_forward(x, w, bias, relu, y);
  run_linear(plan, w.raw(), x.raw(), y.raw(), b);
}

void cuda::LinearOps::linear_backward_params(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& dbias) {
  for (const auto& [name, t] : {std::pair{"x", &x}, {"dy", &dy}, {"dw", &dw}})
    cuda::expect_float("linear_backward_params", name, *t, b_.device_);
  if (dbias.defined()) {
    cuda::expect_dtype("linear_backward_params", "dbias", dbias, dw.dtype());
    if (dw.shape().rank() == 2) cuda::expect_numel("linear_backward_params", "dbias", dbias, dw.shape()[0]);
  }
  const bool fusable = dbias.defined() && lt_eligible(x, dw, dy, b_.options_.allow_tf32) && dw.shape().rank() == 2;
  if (!fusable || dy.numel() == 0) return b_.Backend::linear_backward_params(x, dy, dw, dbias);
  const int64_t n = dy.shape().n(), k = dw.shape()[0], d = dw.shape()[1];
  if (x.numel() != n * d || dy.numel() != n * k) return b_.Backend::linear_backward_params(x, dy, dw, dbias);
  b_.activate();
  const int alignment = common_alignment({x.raw(), dy.raw(), dw.raw(), dbias.raw()});
  // dw^T (D, K) = x as stored (D x N) * op(dy as stored: K x N, transposed); BGRADB sums dy over N.
  cuda::LinearPlan& plan =
      linear_plans_.plan(false, true, d, k, n, dw.dtype(), CUBLASLT_EPILOGUE_BGRADB, dbias.raw(), alignment);
  if (!plan.usable) return b_.Backend::linear_backward_params(x, dy, dw, dbias);
  run_linear(plan, x.raw(), dy.raw(), dw.raw(), dbias.raw());
}

}  // namespace cnnscale
