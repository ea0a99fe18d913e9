// int8 inference ops on the CPU: the reference the GPU's int8 kernels are checked against.
// quantize_int8 rounds each value with core/int8.hpp's rule; conv_forward_int8 widens the int8
// operands to f32 (exact) and convolves them with the f32 convolution, whose sums of integer
// products are exact while they stay below 2^24 (a fan-in C*R*S of at most 1040 at |q| <= 127, and
// in practice far more, since few products reach 127^2); beyond that each partial sum rounds to
// fp32's 24 bits, a relative 2^-24, against the GPU's exact int32 sums. The epilogue is in fp32.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_checks.hpp"
#include "core/error.hpp"
#include "core/int8.hpp"

namespace cnnscale {

using cpu::check_f32;
using cpu::check_same_numel;

namespace {

void check_i8(const char* op, const Tensor& t, const char* what) {
  if (t.dtype() != DType::I8) throw_runtime("{}: {} is {}, not i8", op, what, dtype_name(t.dtype()));
}

// (rows, channels, pixels) of an (N, C) or (N, C, H, W) NCHW tensor.
struct Rows {
  int64_t n, c, pixels;
};
Rows rows_of(const Tensor& t) {
  const Shape& s = t.shape();
  return {s[0], s.rank() > 1 ? s[1] : 1, s.rank() > 2 ? s.numel() / (s[0] * s[1]) : 1};
}

Tensor widened(CpuBackend& b, const Tensor& q) {
  Tensor f = b.alloc(q.shape());
  const auto* src = static_cast<const int8_t*>(q.raw());
  float* dst = f.f32();
  for (int64_t i = 0; i < q.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  return f;
}

}  // namespace

void CpuBackend::quantize_int8(const Tensor& x, float scale, const Tensor& q) {
  check_f32("quantize_int8", x, "x");
  check_i8("quantize_int8", q, "q");
  const Rows rx = rows_of(x), rq = rows_of(q);
  if (rx.n != rq.n || rx.pixels != rq.pixels || rq.c < rx.c || x.shape().rank() != q.shape().rank())
    throw_runtime("quantize_int8: q {} does not hold x {} (more channels only)", q.shape().to_string(),
                  x.shape().to_string());
  if (!(scale > 0.0f)) throw_runtime("quantize_int8: scale {} is not positive", scale);
  const float* px = x.f32();
  auto* pq = static_cast<int8_t*>(q.raw());
  for (int64_t n = 0; n < rq.n; ++n)
    for (int64_t c = 0; c < rq.c; ++c)
      for (int64_t i = 0; i < rq.pixels; ++i)
        pq[(n * rq.c + c) * rq.pixels + i] =
            c < rx.c ? quantize_int8_value(px[(n * rx.c + c) * rx.pixels + i], scale) : int8_t{0};
}

void CpuBackend::conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                                   const Tensor& bias, const Tensor& addend, bool relu, const Tensor& y) {
  check_i8("conv_forward_int8", xq, "x");
  check_i8("conv_forward_int8", wq, "w");
  check_f32("conv_forward_int8", scale, "scale");
  check_f32("conv_forward_int8", bias, "bias");
  check_f32("conv_forward_int8", y, "y");
  const int64_t k = y.shape().c();
  if (scale.numel() != k || bias.numel() != k)
    throw_runtime("conv_forward_int8: scale ({}) and bias ({}) need one value per output channel ({})", scale.numel(),
                  bias.numel(), k);
  if (addend.defined()) {
    check_f32("conv_forward_int8", addend, "addend");
    check_same_numel("conv_forward_int8", addend, y);
  }
  conv_forward(p, widened(*this, xq), widened(*this, wq), y);
  const int64_t n = y.shape().n(), pixels = y.numel() / (n * k);
  float* py = y.f32();
  const float* ps = scale.f32();
  const float* pb = bias.f32();
  const float* pz = addend.defined() ? addend.f32() : nullptr;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < k; ++c)
      for (int64_t j = 0; j < pixels; ++j) {
        const int64_t at = (i * k + c) * pixels + j;
        float v = py[at] * ps[c] + pb[c];
        if (pz) v += pz[at];
        py[at] = relu ? std::max(v, 0.0f) : v;
      }
}

}  // namespace cnnscale
