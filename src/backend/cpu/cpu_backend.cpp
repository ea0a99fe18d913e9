// CpuBackend: copies and conversions, BLAS-like ops, bias, ReLU and dropout. Pooling/LRN, batch norm
// and the softmax/loss/solver ops live in the sibling cpu_*.cpp files; allocation, convolution and
// the int8 reference in classes of their own (cpu_memory.hpp, cpu_conv.hpp).
#include "backend/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_checks.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

namespace cnnscale {

using cpu::check_f32;
using cpu::check_same_numel;

std::string CpuBackend::description() const {
  // openblas_get_config() names the version, the build target and threading model.
  return fmt::format("cpu (OpenBLAS {}, {} threads)", openblas_get_config(), cpu_blas_threads());
}

// ---- copies -----------------------------------------------------------------------------------

void CpuBackend::upload(const void* host, const Tensor& dst) {
  CNNSCALE_CHECK(dst.defined() && dst.device().is_cpu(), "cpu upload: destination is not a cpu tensor");
  if (dst.bytes()) std::memcpy(dst.raw(), host, dst.bytes());
}

void CpuBackend::download(const Tensor& src, void* host) {
  CNNSCALE_CHECK(src.defined() && src.device().is_cpu(), "cpu download: source is not a cpu tensor");
  if (src.bytes()) std::memcpy(host, src.raw(), src.bytes());
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  CNNSCALE_CHECK(src.defined() && dst.defined(), "cpu copy: tensor not allocated");
  CNNSCALE_CHECK(src.dtype() == dst.dtype(), "cpu copy: dtypes differ ({} vs {})", dtype_name(src.dtype()),
                 dtype_name(dst.dtype()));
  check_same_numel("copy", src, dst);
  if (src.raw() != dst.raw() && src.bytes()) std::memmove(dst.raw(), src.raw(), src.bytes());
}

void CpuBackend::fill_i32(const Tensor& t, int32_t value) {
  CNNSCALE_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == DType::I32, "cpu fill_i32: not a cpu i32 tensor");
  std::fill(t.i32(), t.i32() + t.numel(), value);
}

void CpuBackend::fill(const Tensor& t, float value) {
  CNNSCALE_CHECK(t.defined() && t.device().is_cpu(), "cpu fill: not a cpu tensor");
  int64_t n = t.numel();
  if (t.dtype() == DType::I32) {
    int32_t* p = t.i32();
    auto v = static_cast<int32_t>(value);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  float* p = t.f32();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuBackend::convert(const Tensor& src, const Tensor& dst, float scale) {
  CNNSCALE_CHECK(src.defined() && dst.defined(), "cpu convert: tensor not allocated");
  check_same_numel("convert", src, dst);
  for (const Tensor* t : {&src, &dst})
    if (t->dtype() == DType::I32) throw_runtime("convert on cpu: i32 tensors are not converted");
  const int64_t n = src.numel();
  if (src.layout() == dst.layout()) {
    for (int64_t i = 0; i < n; ++i)
      store_float(dst.dtype(), scale * load_float(src.dtype(), src.raw(), i), dst.raw(), i);
    return;
  }
  // Between NCHW and NHWC (4-d): element (n, c, h, w) moves to its place in the other order.
  const Shape& s = src.shape();
  CNNSCALE_CHECK(s.rank() == 4 && dst.shape() == s, "cpu convert: layouts differ for {} -> {}", s.to_string(),
                 dst.shape().to_string());
  const int64_t C = s.c(), H = s.h(), W = s.w();
  for (int64_t b = 0; b < s.n(); ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const int64_t nchw = ((b * C + c) * H + h) * W + w, nhwc = ((b * H + h) * W + w) * C + c;
          const bool from_nchw = src.layout() == Layout::NCHW;
          store_float(dst.dtype(), scale * load_float(src.dtype(), src.raw(), from_nchw ? nchw : nhwc), dst.raw(),
                      from_nchw ? nhwc : nchw);
        }
}

// ---- BLAS-like ----------------------------------------------------------------------------------

void CpuBackend::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      const float* b, float beta, float* c) {
  cpu::sgemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

void CpuBackend::axpby(float alpha, const Tensor& x, float beta, const Tensor& y) {
  check_f32("axpby", x, "x");
  check_f32("axpby", y, "y");
  check_same_numel("axpby", x, y);
  const float* px = x.f32();
  float* py = y.f32();
  int64_t n = x.numel();
  // beta == 0 overwrites y without reading it, as BLAS does, so stale NaNs in y cannot leak through.
  if (beta == 0.0f) {
    for (int64_t i = 0; i < n; ++i) py[i] = alpha * px[i];
  } else {
    for (int64_t i = 0; i < n; ++i) py[i] = alpha * px[i] + beta * py[i];
  }
}

void CpuBackend::bias_add(const Tensor& bias, const Tensor& y) {
  check_f32("bias_add", bias, "bias");
  check_f32("bias_add", y, "y");
  int64_t batch = y.shape().n(), channels = y.shape().c();
  CNNSCALE_CHECK(bias.numel() == channels, "cpu bias_add: bias {} for output {}", bias.shape().to_string(),
                 y.shape().to_string());
  int64_t inner = batch > 0 && channels > 0 ? y.numel() / (batch * channels) : 0;
  const float* b = bias.f32();
  float* py = y.f32();
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c) {
      float* row = py + (n * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) row[i] += b[c];
    }
}

void CpuBackend::bias_backward(const Tensor& dy, const Tensor& dbias) {
  check_f32("bias_backward", dy, "dy");
  check_f32("bias_backward", dbias, "dbias");
  int64_t batch = dy.shape().n(), channels = dy.shape().c();
  CNNSCALE_CHECK(dbias.numel() == channels, "cpu bias_backward: dbias {} for dy {}", dbias.shape().to_string(),
                 dy.shape().to_string());
  int64_t inner = batch > 0 && channels > 0 ? dy.numel() / (batch * channels) : 0;
  const float* pdy = dy.f32();
  float* db = dbias.f32();
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;  // double: batch * H * W terms
    for (int64_t n = 0; n < batch; ++n) {
      const float* row = pdy + (n * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) sum += row[i];
    }
    db[c] = static_cast<float>(sum);
  }
}

// ---- activation and dropout ---------------------------------------------------------------------

void CpuBackend::relu_forward(const Tensor& x, const Tensor& y) {
  check_f32("relu_forward", x, "x");
  check_f32("relu_forward", y, "y");
  check_same_numel("relu_forward", x, y);
  const float* px = x.f32();
  float* py = y.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) py[i] = px[i] > 0.0f ? px[i] : 0.0f;
}

void CpuBackend::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_f32("relu_backward", y, "y");
  check_f32("relu_backward", dy, "dy");
  check_f32("relu_backward", dx, "dx");
  check_same_numel("relu_backward", y, dy);
  check_same_numel("relu_backward", y, dx);
  const float* py = y.f32();
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
  // The gradient at exactly 0 is taken as 0 (from y > 0), as Caffe and cuDNN do.
  for (int64_t i = 0, n = y.numel(); i < n; ++i) pdx[i] = py[i] > 0.0f ? pdy[i] : 0.0f;
}

namespace {
// The mask rule shared bit-for-bit with the CUDA kernel: keep when u >= ratio, scale kept values by
// the float 1 / (1 - ratio). Forward and backward recompute the same mask from (seed, stream, i).
void dropout_apply(float ratio, uint64_t seed, uint64_t stream, const float* in, float* out, int64_t n) {
  const float scale = 1.0f / (1.0f - ratio);
  for (int64_t i = 0; i < n; ++i) {
    bool keep = counter_uniform(seed, stream, static_cast<uint64_t>(i)) >= ratio;
    out[i] = keep ? in[i] * scale : 0.0f;
  }
}
}  // namespace

void CpuBackend::dropout_forward(float ratio, uint64_t seed, uint64_t stream, const Tensor& x, const Tensor& y) {
  check_f32("dropout_forward", x, "x");
  check_f32("dropout_forward", y, "y");
  check_same_numel("dropout_forward", x, y);
  CNNSCALE_CHECK(ratio >= 0.0f && ratio < 1.0f, "cpu dropout_forward: ratio {} outside [0, 1)", ratio);
  dropout_apply(ratio, seed, stream, x.f32(), y.f32(), x.numel());
}

void CpuBackend::dropout_backward(float ratio, uint64_t seed, uint64_t stream, const Tensor& dy, const Tensor& dx) {
  check_f32("dropout_backward", dy, "dy");
  check_f32("dropout_backward", dx, "dx");
  check_same_numel("dropout_backward", dy, dx);
  CNNSCALE_CHECK(ratio >= 0.0f && ratio < 1.0f, "cpu dropout_backward: ratio {} outside [0, 1)", ratio);
  dropout_apply(ratio, seed, stream, dy.f32(), dx.f32(), dy.numel());
}

int cpu_blas_threads() {
  return openblas_get_num_threads();
}

}  // namespace cnnscale
