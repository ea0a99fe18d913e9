// CpuBackend spatial batch normalisation: statistics per channel over (N, H, W), accumulated in
// double. Biased variance normalises the batch; the unbiased one feeds the running average
// (backend.hpp's contract, shared with cuDNN's BatchNormalizationForwardTraining).
#include <cmath>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_checks.hpp"

namespace cnnscale {

using cpu::check_f32;

namespace {

struct BnGeometry {
  int64_t batch, channels, spatial;                  // x (N, C, H, W) or (N, C)
  int64_t count() const { return batch * spatial; }  // elements per channel statistic
};

BnGeometry bn_geometry(const char* op, const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
  check_f32(op, x, "x");
  BnGeometry g{x.shape().n(), x.shape().c(), x.shape().h() * x.shape().w()};
  for (const Tensor* t : per_channel) {
    check_f32(op, *t, "per-channel tensor");
    CNNSCALE_CHECK(t->numel() == g.channels, "cpu {}: per-channel tensor {} for x {}", op, t->shape().to_string(),
                   x.shape().to_string());
  }
  return g;
}

// An optional fused operand (addend z, forward output y, addend gradient dz): x's shape, f32.
void check_fused(const char* op, const Tensor& x, const Tensor& t) {
  if (!t.defined()) return;
  check_f32(op, t, "fused operand");
  CNNSCALE_CHECK(t.shape() == x.shape(), "cpu {}: fused operand {} for x {}", op, t.shape().to_string(),
                 x.shape().to_string());
}

// y = a * x + b over channel c, then + z and max(0, .) when fused: each step rounds to float as
// the separate Eltwise and ReLU layers would, so a fused network computes the same bits.
void apply_channel(const BnGeometry& g, int64_t c, double a, double b, bool relu, const Tensor& x, const Tensor& z,
                   const Tensor& y) {
  for (int64_t n = 0; n < g.batch; ++n) {
    const int64_t off = (n * g.channels + c) * g.spatial;
    const float* xc = x.f32() + off;
    float* yc = y.f32() + off;
    for (int64_t i = 0; i < g.spatial; ++i) yc[i] = static_cast<float>(a * xc[i] + b);
    if (z.defined()) {
      const float* zc = z.f32() + off;
      for (int64_t i = 0; i < g.spatial; ++i) yc[i] = yc[i] + zc[i];
    }
    if (relu)
      for (int64_t i = 0; i < g.spatial; ++i) yc[i] = yc[i] > 0.0f ? yc[i] : 0.0f;
  }
}

}  // namespace

void CpuBackend::batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                         const Tensor& shift, const Tensor& running_mean, const Tensor& running_var,
                                         const Tensor& y, const Tensor& save_mean, const Tensor& save_inv_std,
                                         const BatchNormFused& fused) {
  BnGeometry g = bn_geometry("batchnorm_forward_train", x,
                             {&scale, &shift, &running_mean, &running_var, &save_mean, &save_inv_std});
  check_f32("batchnorm_forward_train", y, "y");
  CNNSCALE_CHECK(x.shape() == y.shape(), "cpu batchnorm_forward_train: x {} vs y {}", x.shape().to_string(),
                 y.shape().to_string());
  CNNSCALE_CHECK(g.count() > 0, "cpu batchnorm_forward_train: empty batch");
  check_fused("batchnorm_forward_train", x, fused.z);
  const double count = static_cast<double>(g.count());
  // Unbiased correction; a single element per channel has no spread to estimate, keep the biased value.
  const double unbias = g.count() > 1 ? count / (count - 1.0) : 1.0;
  for (int64_t c = 0; c < g.channels; ++c) {
    double sum = 0.0;
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* xc = x.f32() + (n * g.channels + c) * g.spatial;
      for (int64_t i = 0; i < g.spatial; ++i) sum += xc[i];
    }
    const double mean = sum / count;
    double sq = 0.0;  // two-pass variance: no cancellation for large means
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* xc = x.f32() + (n * g.channels + c) * g.spatial;
      for (int64_t i = 0; i < g.spatial; ++i) sq += (xc[i] - mean) * (xc[i] - mean);
    }
    const double var = sq / count;
    const double inv_std = 1.0 / std::sqrt(var + p.eps);
    const double a = scale.f32()[c] * inv_std, b = shift.f32()[c] - mean * a;
    apply_channel(g, c, a, b, p.relu, x, fused.z, y);
    save_mean.f32()[c] = static_cast<float>(mean);
    save_inv_std.f32()[c] = static_cast<float>(inv_std);
    float& rm = running_mean.f32()[c];
    float& rv = running_var.f32()[c];
    rm = static_cast<float>((1.0 - p.momentum) * rm + p.momentum * mean);
    rv = static_cast<float>((1.0 - p.momentum) * rv + p.momentum * var * unbias);
  }
}

void CpuBackend::batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                             const Tensor& shift, const Tensor& running_mean, const Tensor& running_var,
                                             const Tensor& y, const BatchNormFused& fused) {
  BnGeometry g = bn_geometry("batchnorm_forward_inference", x, {&scale, &shift, &running_mean, &running_var});
  check_f32("batchnorm_forward_inference", y, "y");
  CNNSCALE_CHECK(x.shape() == y.shape(), "cpu batchnorm_forward_inference: x {} vs y {}", x.shape().to_string(),
                 y.shape().to_string());
  check_fused("batchnorm_forward_inference", x, fused.z);
  for (int64_t c = 0; c < g.channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var.f32()[c]) + p.eps);
    const double a = scale.f32()[c] * inv_std, b = shift.f32()[c] - running_mean.f32()[c] * a;
    apply_channel(g, c, a, b, p.relu, x, fused.z, y);
  }
}

// With xhat = (x - mean) * inv_std and M elements per channel:
//   dshift = sum dy, dscale = sum dy * xhat,
//   dx = scale * inv_std / M * (M * dy - dshift - xhat * dscale).
void CpuBackend::batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& scale,
                                    const Tensor& save_mean, const Tensor& save_inv_std, const Tensor& dx,
                                    const Tensor& dscale, const Tensor& dshift, const BatchNormFused& fused) {
  // eps is already folded into save_inv_std
  BnGeometry g = bn_geometry("batchnorm_backward", x, {&scale, &save_mean, &save_inv_std, &dscale, &dshift});
  check_f32("batchnorm_backward", dy, "dy");
  check_f32("batchnorm_backward", dx, "dx");
  CNNSCALE_CHECK(x.shape() == dy.shape() && x.shape() == dx.shape(), "cpu batchnorm_backward: x {}, dy {}, dx {}",
                 x.shape().to_string(), dy.shape().to_string(), dx.shape().to_string());
  if (p.relu) {
    CNNSCALE_CHECK(fused.y.defined(), "cpu batchnorm_backward: a fused ReLU needs the forward's output y");
    check_fused("batchnorm_backward", x, fused.y);
  }
  check_fused("batchnorm_backward", x, fused.dz);
  // The gradient reaching bn(x) (+ z): dy where the fused ReLU passed its input, else 0, as
  // relu_backward gates it; written out as the addend's gradient when asked for.
  std::vector<float> gated;
  const float* grad = dy.f32();
  if (p.relu) {
    gated.resize(static_cast<size_t>(dy.numel()));
    for (size_t i = 0; i < gated.size(); ++i) gated[i] = fused.y.f32()[i] > 0.0f ? dy.f32()[i] : 0.0f;
    grad = gated.data();
  }
  if (fused.dz.defined()) std::copy(grad, grad + dy.numel(), fused.dz.f32());
  const double count = static_cast<double>(g.count());
  for (int64_t c = 0; c < g.channels; ++c) {
    const double mean = save_mean.f32()[c], inv_std = save_inv_std.f32()[c];
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* xc = x.f32() + (n * g.channels + c) * g.spatial;
      const float* dyc = grad + (n * g.channels + c) * g.spatial;
      for (int64_t i = 0; i < g.spatial; ++i) {
        sum_dy += dyc[i];
        sum_dy_xhat += dyc[i] * (xc[i] - mean) * inv_std;
      }
    }
    dshift.f32()[c] = static_cast<float>(sum_dy);
    dscale.f32()[c] = static_cast<float>(sum_dy_xhat);
    const double k = scale.f32()[c] * inv_std / count;
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* xc = x.f32() + (n * g.channels + c) * g.spatial;
      const float* dyc = grad + (n * g.channels + c) * g.spatial;
      float* dxc = dx.f32() + (n * g.channels + c) * g.spatial;
      for (int64_t i = 0; i < g.spatial; ++i) {
        const double xhat = (xc[i] - mean) * inv_std;
        dxc[i] = static_cast<float>(k * (count * dyc[i] - sum_dy - xhat * sum_dy_xhat));
      }
    }
  }
}

}  // namespace cnnscale
