// BLAS-like ops on CUDA: GEMM (cuBLAS; cublasGemmEx for bf16/f16), bias add/reduce (cuDNN in f32,
// own kernels in 16 bits), axpby and the SGD update (own element-wise kernels: cuBLAS has no fused
// form of either).
#include <algorithm>
#include <climits>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"

namespace cnnscale {

// Row-major C (m, n) = alpha op(A) op(B) + beta C. cuBLAS is column-major, and a row-major matrix
// is the column-major view of its transpose, so compute C^T (n, m) = op(B)^T op(A)^T: swap the
// operands and the extents, keep each operand's own transpose flag and leading dimension.
// TF32 stays off unless options_.allow_tf32 (math mode set in the constructor).
void CudaBackend::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       const float* b, float beta, float* c) {
  if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
    throw_runtime("gemm on cuda: extents m={} n={} k={} outside cuBLAS's int range", m, n, k);
  if (m == 0 || n == 0) return;
  if (!c || (k > 0 && (!a || !b))) throw_runtime("gemm on cuda: null operand (m={} n={} k={})", m, n, k);
  activate();
  int lda = static_cast<int>(std::max<int64_t>(1, trans_a ? m : k));  // row length of A as stored
  int ldb = static_cast<int>(std::max<int64_t>(1, trans_b ? k : n));
  int ldc = static_cast<int>(n);
  CUBLAS_CHECK(cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb, a, lda, &beta,
                           c, ldc));
}

namespace {
cudaDataType_t blas_type(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : t == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
}
}  // namespace

void CudaBackend::matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
                         const Tensor& b, float beta, const Tensor& c) {
  cuda::expect_float("matmul", "a", a, device_);
  cuda::expect_float("matmul", "b", b, device_);
  cuda::expect_float("matmul", "c", c, device_);
  cuda::expect_dtype("matmul", "b", b, a.dtype());
  cuda::expect_dtype("matmul", "c", c, a.dtype());
  for (const auto* t : {&a, &b, &c}) cuda::expect_layout("matmul", "operand", *t, Layout::NCHW);
  if (a.numel() != m * k || b.numel() != k * n || c.numel() != m * n)
    throw_runtime("matmul on cuda: a {} b {} c {} do not hold m={} n={} k={}", a.shape().to_string(),
                  b.shape().to_string(), c.shape().to_string(), m, n, k);
  if (a.dtype() == DType::F32) {
    gemm(trans_a, trans_b, m, n, k, alpha, a.f32(), b.f32(), beta, c.f32());
    return;
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    throw_runtime("matmul on cuda: extents m={} n={} k={} outside cuBLAS's int range", m, n, k);
  if (m == 0 || n == 0) return;
  activate();
  // The same operand swap as gemm() (row-major through column-major cuBLAS); 16-bit operands and
  // output, fp32 accumulation and fp32 alpha/beta (CUBLAS_COMPUTE_32F), tensor cores by default.
  const int lda = static_cast<int>(std::max<int64_t>(1, trans_a ? m : k));
  const int ldb = static_cast<int>(std::max<int64_t>(1, trans_b ? k : n));
  const cudaDataType_t t = blas_type(a.dtype());
  CUBLAS_CHECK(cublasGemmEx(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b.raw(), t, ldb,
                            a.raw(), t, lda, &beta, c.raw(), t, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::axpby(float alpha, const Tensor& x, float beta, const Tensor& y) {
  cuda::expect_float("axpby", "x", x, device_);
  cuda::expect_float("axpby", "y", y, device_);
  cuda::expect_dtype("axpby", "y", y, x.dtype());
  cuda::expect_layout("axpby", "y", y, x.layout());
  cuda::expect_numel("axpby", "y", y, x.numel());
  activate();
  cuda::launch_axpby(x.dtype(), x.numel(), alpha, x.raw(), beta, y.raw(), stream());
}

// The (N, C, inner) view of an (N, C, ...) tensor, for the 16-bit bias kernels.
static int64_t inner_extent(const Shape& s) { return s.numel() / std::max<int64_t>(1, s.n() * s.c()); }

void CudaBackend::bias_add(const Tensor& bias, const Tensor& y) {
  cuda::expect_float("bias_add", "bias", bias, device_);
  cuda::expect_float("bias_add", "y", y, device_);
  cuda::expect_dtype("bias_add", "bias", bias, y.dtype());
  if (y.shape().rank() < 2) throw_runtime("bias_add on cuda: y {} must be (N, C, ...)", y.shape().to_string());
  cuda::expect_numel("bias_add", "bias", bias, y.shape().c());
  if (y.numel() == 0) return;
  activate();
  if (y.dtype() != DType::F32 || y.layout() != Layout::NCHW) {
    cuda::launch_bias_add(y.dtype(), y.shape().n(), y.shape().c(), inner_extent(y.shape()),
                          y.layout() == Layout::NHWC, bias.raw(), y.raw(), stream());
    return;
  }
  const float one = 1.0f;
  cuda::set_nchw(desc_a_, 1, y.shape().c(), 1, 1, "bias_add");
  cuda::set_nchw(desc_b_, y.shape(), "bias_add");
  CUDNN_CHECK(cudnnAddTensor(cudnn_, &one, desc_a_, bias.f32(), &one, desc_b_, y.f32()));
}

void CudaBackend::bias_backward(const Tensor& dy, const Tensor& dbias) {
  cuda::expect_float("bias_backward", "dy", dy, device_);
  cuda::expect_float("bias_backward", "dbias", dbias, device_);
  cuda::expect_dtype("bias_backward", "dbias", dbias, dy.dtype());
  if (dy.shape().rank() < 2) throw_runtime("bias_backward on cuda: dy {} must be (N, C, ...)", dy.shape().to_string());
  cuda::expect_numel("bias_backward", "dbias", dbias, dy.shape().c());
  activate();
  if (dy.numel() == 0) {
    fill(dbias, 0.0f);
    return;
  }
  if (dy.dtype() != DType::F32 || dy.layout() != Layout::NCHW) {
    const bool nhwc = dy.layout() == Layout::NHWC;
    const int64_t rows = dy.shape().n() * inner_extent(dy.shape());
    float* partial =
        nhwc ? staging(3, Shape{cuda::bias_backward_partials(rows) * dy.shape().c()}, DType::F32).f32() : nullptr;
    cuda::launch_bias_backward(dy.dtype(), dy.shape().n(), dy.shape().c(), inner_extent(dy.shape()), nhwc, dy.raw(),
                               dbias.raw(), partial, stream());
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  cuda::set_nchw(desc_a_, dy.shape(), "bias_backward");
  cuda::set_nchw(desc_b_, 1, dy.shape().c(), 1, 1, "bias_backward");
  CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &one, desc_a_, dy.f32(), &zero, desc_b_, dbias.f32()));
}

void CudaBackend::sgd_update(const Tensor& w, const Tensor& dw, const Tensor& history, float lr, float momentum,
                             float weight_decay) {
  cuda::expect_f32("sgd_update", "w", w, device_);
  cuda::expect_f32("sgd_update", "dw", dw, device_);
  cuda::expect_f32("sgd_update", "history", history, device_);
  cuda::expect_numel("sgd_update", "dw", dw, w.numel());
  cuda::expect_numel("sgd_update", "history", history, w.numel());
  activate();
  cuda::launch_sgd_update(w.numel(), w.f32(), dw.f32(), history.f32(), lr, momentum, weight_decay, stream());
}

void CudaBackend::sgd_update_segments(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                                      const Tensor& mults, float lr, float momentum, float weight_decay,
                                      const SgdMirrors& mirrors) {
  launch_segments("sgd_update_segments", w, dw, history, ranges, mults, lr, nullptr, momentum, weight_decay, nullptr,
                  mirrors);
}

void CudaBackend::sgd_update_segments_at(const Tensor& w, const Tensor& dw, const Tensor& history,
                                         const Tensor& ranges, const Tensor& mults, const Tensor& lr, float momentum,
                                         float weight_decay, const Tensor& skip, const SgdMirrors& mirrors,
                                         const GradCheck& check) {
  cuda::expect_f32("sgd_update_segments_at", "lr", lr, device_);
  cuda::expect_numel("sgd_update_segments_at", "lr", lr, 1);
  CNNSCALE_CHECK(!(check.defined() && skip.defined()), "sgd_update_segments_at on cuda: a gradient check with a skip");
  if (skip.defined()) {
    cuda::expect_i32("sgd_update_segments_at", "skip", skip, device_);
    cuda::expect_numel("sgd_update_segments_at", "skip", skip, 1);
  }
  launch_segments("sgd_update_segments_at", w, dw, history, ranges, mults, 0.0f, lr.f32(), momentum, weight_decay,
                  skip.defined() ? skip.i32() : nullptr, mirrors, check);
}

void CudaBackend::axpby_unless(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& skip) {
  const char* op = "axpby_unless";
  for (const auto& [name, t] : {std::pair{"x", &x}, {"y", &y}}) {
    cuda::expect_f32(op, name, *t, device_);
    cuda::expect_numel(op, name, *t, 1);
  }
  if (skip.defined()) {
    cuda::expect_i32(op, "skip", skip, device_);
    cuda::expect_numel(op, "skip", skip, 1);
  }
  activate();
  cuda::launch_axpby_unless(alpha, x.f32(), beta, y.f32(), skip.defined() ? skip.i32() : nullptr, stream());
}

void CudaBackend::update_loss_scale(const Tensor& found_inf, const Tensor& scale, const Tensor& state,
                                    const Tensor& tag, const Tensor& nonfinite, int64_t growth_interval,
                                    float max_scale) {
  const char* op = "update_loss_scale";
  cuda::expect_f32(op, "scale", scale, device_);
  cuda::expect_numel(op, "scale", scale, 2);
  cuda::expect_i32(op, "state", state, device_);
  cuda::expect_numel(op, "state", state, 3);
  for (const auto& [name, t] : {std::pair{"found_inf", &found_inf}, {"tag", &tag}, {"nonfinite", &nonfinite}}) {
    cuda::expect_i32(op, name, *t, device_);
    cuda::expect_numel(op, name, *t, 1);
  }
  activate();
  cuda::launch_update_loss_scale(found_inf.i32(), scale.f32(), state.i32(), tag.i32(), nonfinite.i32(), growth_interval,
                                 max_scale, stream());
}

void CudaBackend::launch_segments(const char* op, const Tensor& w, const Tensor& dw, const Tensor& history,
                                  const Tensor& ranges, const Tensor& mults, float lr, const float* lr_at,
                                  float momentum, float weight_decay, const int32_t* skip_at,
                                  const SgdMirrors& mirrors, const GradCheck& check) {
  cuda::expect_f32(op, "w", w, device_);
  cuda::expect_f32(op, "dw", dw, device_);
  cuda::expect_f32(op, "history", history, device_);
  cuda::expect_i32(op, "ranges", ranges, device_);
  cuda::expect_f32(op, "mults", mults, device_);
  cuda::expect_numel(op, "dw", dw, w.numel());
  cuda::expect_numel(op, "history", history, w.numel());
  if (ranges.numel() != mults.numel() || ranges.numel() % 2 != 0)
    throw_runtime("{} on cuda: ranges {} and mults {} must both be (2S)", op, ranges.shape().to_string(),
                  mults.shape().to_string());
  check_sgd_mirrors(mirrors, ranges, fmt::format("{} on cuda", op));
  cuda::SegmentMirror mirror;
  if (mirrors.defined()) {
    cuda::expect_float(op, "mirror", mirrors.mirror, device_);
    cuda::expect_i32(op, "mirror map", mirrors.map, device_);
    // The map's offsets are trusted on the device; the host checks what it can without reading them.
    mirror = {mirrors.mirror.raw(), mirrors.mirror.dtype(), mirrors.map.i32(), nullptr};
    if (mirrors.grads.defined()) {
      cuda::expect_float(op, "mirror gradients", mirrors.grads, device_);
      mirror.grads = mirrors.grads.raw();
    }
  }
  if (check.defined()) {
    for (const auto& [name, t] : {std::pair{"check flag", &check.flag}, {"check tag", &check.tag}}) {
      cuda::expect_i32(op, name, *t, device_);
      cuda::expect_numel(op, name, *t, 1);
    }
  }
  activate_lane_op();
  cuda::launch_sgd_segments(w.numel(), w.f32(), dw.f32(), history.f32(), ranges.i32(), mults.f32(),
                            static_cast<int>(ranges.numel() / 2), lr, lr_at, momentum, weight_decay, op_stream(),
                            skip_at, mirror, check.defined() ? check.flag.i32() : nullptr,
                            check.defined() ? check.tag.i32() : nullptr);
}

void CudaBackend::flag_nonfinite(const Tensor& x, int32_t tag, const Tensor& flag) {
  cuda::expect_f32("flag_nonfinite", "x", x, device_);
  cuda::expect_i32("flag_nonfinite", "flag", flag, device_);
  cuda::expect_numel("flag_nonfinite", "flag", flag, 1);
  CNNSCALE_CHECK(tag > 0, "flag_nonfinite: tag {} must be > 0", tag);
  activate();
  cuda::launch_flag_nonfinite(x.numel(), x.f32(), tag, nullptr, flag.i32(), stream());
}

// The tag's > 0 is the caller's to keep: it is only on the device.
void CudaBackend::flag_nonfinite_at(const Tensor& x, const Tensor& tag, const Tensor& flag) {
  cuda::expect_f32("flag_nonfinite_at", "x", x, device_);
  cuda::expect_i32("flag_nonfinite_at", "flag", flag, device_);
  cuda::expect_numel("flag_nonfinite_at", "flag", flag, 1);
  cuda::expect_i32("flag_nonfinite_at", "tag", tag, device_);
  cuda::expect_numel("flag_nonfinite_at", "tag", tag, 1);
  activate();
  cuda::launch_flag_nonfinite(x.numel(), x.f32(), 0, tag.i32(), flag.i32(), stream());
}

}  // namespace cnnscale
