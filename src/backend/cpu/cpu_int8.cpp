// int8 inference ops on the CPU: the reference the GPU's int8 kernels are checked against.
// quantize_int8 rounds each value with core/int8.hpp's rule; conv_forward_int8 widens the int8
// operands to f32 (exact) and convolves them with the f32 convolution, whose sums of integer
// products are exact while they stay below 2^24 (a fan-in C*R*S of at most 1040 at |q| <= 127, and
// in practice far more, since few products reach 127^2); beyond that each partial sum rounds to
// fp32's 24 bits, a relative 2^-24, against the GPU's exact int32 sums. The epilogue is in fp32; an
// int8 y is the epilogue's value rounded as core/int8.hpp rounds (scale 1). The int8 fully
// connected layer sums its int8 products exactly in int64.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_checks.hpp"
#include "backend/cpu/cpu_conv.hpp"
#include "core/error.hpp"
#include "core/int8.hpp"

namespace cnnscale::cpu {

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

}  // namespace

Tensor Int8Reference::widened(const Tensor& q) {
  Tensor f = memory_.alloc(q.shape(), DType::F32);
  const auto* src = static_cast<const int8_t*>(q.raw());
  float* dst = f.f32();
  for (int64_t i = 0; i < q.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  return f;
}

void Int8Reference::quantize(const Tensor& x, float scale, const Tensor& q) {
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

void Int8Reference::conv_forward(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                                 const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                                 const Tensor& y) {
  const char* op = "conv_forward_int8";
  check_i8(op, xq, "x");
  check_i8(op, wq, "w");
  check_f32(op, scale, "scale");
  check_f32(op, bias, "bias");
  const bool y_i8 = y.dtype() == DType::I8;
  if (!y_i8) check_f32(op, y, "y");
  if (y_i8 && !relu) throw_runtime("{}: an int8 y follows a ReLU", op);
  const int64_t k = y.shape().c();
  if (scale.numel() != k || bias.numel() != k)
    throw_runtime("{}: scale ({}) and bias ({}) need one value per output channel ({})", op, scale.numel(),
                  bias.numel(), k);
  const bool z_i8 = addend.defined() && addend.dtype() == DType::I8;
  if (addend.defined()) {
    if (!z_i8) check_f32(op, addend, "addend");
    check_same_numel(op, addend, y);
  }
  if (addend.defined() && (z_i8 || y_i8) && !addend_scale.defined())
    throw_runtime("{}: an int8 addend, or any beside an int8 y, needs its scale", op);
  if (addend_scale.defined()) {
    if (!addend.defined()) throw_runtime("{}: an addend scale without an addend", op);
    check_f32(op, addend_scale, "addend_scale");
    if (addend_scale.numel() != k) throw_runtime("{}: addend_scale needs one value per output channel ({})", op, k);
  }
  const Tensor acc = y_i8 ? memory_.alloc(y.shape(), DType::F32) : y;
  conv_.forward(p, widened(xq), widened(wq), acc);
  const int64_t n = y.shape().n(), pixels = y.numel() / (n * k);
  const float* pa = acc.f32();
  const float* ps = scale.f32();
  const float* pb = bias.f32();
  const float* pzs = addend_scale.defined() ? addend_scale.f32() : nullptr;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < k; ++c)
      for (int64_t j = 0; j < pixels; ++j) {
        const int64_t at = (i * k + c) * pixels + j;
        float v = pa[at] * ps[c] + pb[c];
        if (addend.defined()) {
          const float z = z_i8 ? static_cast<float>(static_cast<const int8_t*>(addend.raw())[at]) : addend.f32()[at];
          v += pzs ? z * pzs[c] : z;
        }
        if (relu) v = std::max(v, 0.0f);
        if (y_i8)
          static_cast<int8_t*>(y.raw())[at] = quantize_int8_value(v, 1.0f);
        else
          y.f32()[at] = v;
      }
}

void Int8Reference::linear_forward(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias,
                                   bool relu, const Tensor& y) {
  const char* op = "linear_forward_int8";
  check_i8(op, xq, "x");
  check_i8(op, wq, "w");
  check_f32(op, scale, "scale");
  check_f32(op, bias, "bias");
  check_f32(op, y, "y");
  if (xq.shape().rank() != 2 || wq.shape().rank() != 2 || y.shape().rank() != 2)
    throw_runtime("{}: x {}, w {} and y {} are matrices", op, xq.shape().to_string(), wq.shape().to_string(),
                  y.shape().to_string());
  const int64_t n = xq.shape()[0], c = xq.shape()[1], kp = wq.shape()[0], k = y.shape()[1];
  if (wq.shape()[1] != c || y.shape()[0] != n || kp < k || scale.numel() != k || bias.numel() != k)
    throw_runtime("{}: x {}, w {}, y {}, scale ({}) and bias ({}) do not match", op, xq.shape().to_string(),
                  wq.shape().to_string(), y.shape().to_string(), scale.numel(), bias.numel());
  // Integer sums in int64 (exact: |q| <= 127 keeps any practical fan-in far below 2^63).
  const auto* px = static_cast<const int8_t*>(xq.raw());
  const auto* pw = static_cast<const int8_t*>(wq.raw());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < k; ++o) {
      int64_t acc = 0;
      for (int64_t j = 0; j < c; ++j) acc += int64_t{px[i * c + j]} * int64_t{pw[o * c + j]};
      float v = static_cast<float>(acc) * scale.f32()[o] + bias.f32()[o];
      y.f32()[i * k + o] = relu ? std::max(v, 0.0f) : v;
    }
}

}  // namespace cnnscale::cpu
