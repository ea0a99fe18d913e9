// What every backend shares: the host-clock timing defaults and the shape rules.
#include "backend/backend.hpp"

#include <chrono>


namespace cnnscale {

namespace {
// Floor division for a possibly negative numerator: a window larger than the padded input must give
// an output extent <= 0 (which layers reject), not C++'s truncation towards zero, which gives 1.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
}  // namespace

// Host timing points, the default for backends whose ops complete before they return (CPU).
struct HostTimingEvent final : TimingEvent {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

std::shared_ptr<TimingEvent> Backend::record_timing_event() { return std::make_shared<HostTimingEvent>(); }

bool Backend::timing_event_done(const TimingEvent&) { return true; }

void Backend::matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
                     const Tensor& b, float beta, const Tensor& c) {
  for (const Tensor* t : {&a, &b, &c})
    if (t->dtype() != DType::F32)
      throw_runtime("matmul on {}: {} operands; this backend computes in f32 only", name(), dtype_name(t->dtype()));
  CNNSCALE_CHECK(a.numel() == m * k && b.numel() == k * n && c.numel() == m * n,
                 "matmul on {}: a {} b {} c {} do not hold m={} n={} k={}", name(), a.shape().to_string(),
                 b.shape().to_string(), c.shape().to_string(), m, n, k);
  gemm(trans_a, trans_b, m, n, k, alpha, a.f32(), b.f32(), beta, c.f32());
}

double Backend::elapsed_ms(const TimingEvent& a, const TimingEvent& b) {
  const auto* ha = dynamic_cast<const HostTimingEvent*>(&a);
  const auto* hb = dynamic_cast<const HostTimingEvent*>(&b);
  CNNSCALE_CHECK(ha && hb, "elapsed_ms on {}: timing events of another backend", name());
  return std::chrono::duration<double, std::milli>(hb->at - ha->at).count();
}

int64_t conv_output_dim(int64_t in, int kernel, int stride, int pad, int dilation) {
  int64_t extent = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
  return floor_div(in + 2 * pad - extent, stride) + 1;
}

int64_t pool_output_dim(int64_t in, int kernel, int stride, int pad, bool ceil_mode) {
  int64_t span = in + 2 * pad - kernel;
  if (span < 0) return 0;  // window larger than the padded input: no valid output
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // Caffe: the last pooling window must start strictly inside the image (or its left padding).
  if (pad > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace cnnscale
