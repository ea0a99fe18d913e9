// What every backend shares: the host-clock timing defaults and the shape rules.
#include "backend/backend.hpp"

#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "backend/loss_scale_rule.hpp"
#include "core/byte_input.hpp"
#include "core/rng.hpp"

namespace cnnscale {

namespace {
// Floor division for a possibly negative numerator: a window larger than the padded input must give
// an output extent <= 0 (which layers reject), not C++'s truncation towards zero, which gives 1.
int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
}  // namespace

// Host timing points, the default for backends whose ops complete before they return (CPU).
struct HostTimingEvent final : TimingEvent {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

std::shared_ptr<TimingEvent> Backend::record_timing_event() {
  return std::make_shared<HostTimingEvent>();
}

bool Backend::timing_event_done(const TimingEvent&) {
  return true;
}

void Backend::quantize_int8(const Tensor&, float, const Tensor&) {
  throw_runtime("the {} backend has no int8 kernels (quantize_int8)", name());
}

void Backend::conv_forward_int8(const ConvParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, const Tensor&, bool, const Tensor&) {
  throw_runtime("the {} backend has no int8 kernels (conv_forward_int8)", name());
}

void Backend::linear_forward_int8(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&) {
  throw_runtime("the {} backend has no int8 kernels (linear_forward_int8)", name());
}

void check_decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out,
                        const std::string& where) {
  CNNSCALE_CHECK(bytes.defined() && bytes.dtype() == DType::U8 && bytes.shape().rank() == 4,
                 "{}: the samples must be a 4-d u8 tensor", where);
  CNNSCALE_CHECK(
      out.defined() && out.dtype() == DType::F32 && out.layout() == Layout::NCHW && out.shape() == bytes.shape(),
      "{}: the output must be f32 NCHW of the samples' shape {}", where, bytes.shape().to_string());
  const Shape& s = bytes.shape();
  CNNSCALE_CHECK(
      affine.defined() && affine.dtype() == DType::F32 && (affine.numel() == 2 * s.c() || affine.numel() == 3 * s.c()),
      "{}: the affine map must be 2 or 3 x {} f32 values (scales, offsets, mirror negations)", where, s.c());
  CNNSCALE_CHECK(!draws.defined() || (draws.dtype() == DType::I32 && draws.numel() == s.n() * kDrawInts),
                 "{}: the draws must be {} x {} i32 values", where, s.n(), kDrawInts);
}

void check_sgd_mirrors(const SgdMirrors& mirrors, const Tensor& ranges, const std::string& where) {
  CNNSCALE_CHECK(mirrors.defined() || !mirrors.grads.defined(), "{}: mirror gradients without mirrors", where);
  if (!mirrors.defined()) return;
  CNNSCALE_CHECK(
      !mirrors.grads.defined() ||
          (mirrors.grads.dtype() == mirrors.mirror.dtype() && mirrors.grads.numel() == mirrors.mirror.numel()),
      "{}: the mirror gradients ({} {}) must match the mirrors ({} {})", where, dtype_name(mirrors.grads.dtype()),
      mirrors.grads.shape().to_string(), dtype_name(mirrors.mirror.dtype()), mirrors.mirror.shape().to_string());
  CNNSCALE_CHECK(mirrors.mirror.dtype() != DType::I32 && mirrors.map.dtype() == DType::I32 &&
                     mirrors.map.numel() == 2 * ranges.numel(),
                 "{}: the mirror map must be i32 (4S) beside ranges (2S) {} and the mirror a float buffer, got {} {}",
                 where, ranges.shape().to_string(), dtype_name(mirrors.map.dtype()), mirrors.map.shape().to_string());
}

void Backend::sgd_update_segments(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                                  const Tensor& mults, float lr, float momentum, float weight_decay,
                                  const SgdMirrors& mirrors) {
  CNNSCALE_CHECK(ranges.dtype() == DType::I32 && mults.dtype() == DType::F32 && ranges.numel() == mults.numel() &&
                     ranges.numel() % 2 == 0,
                 "sgd_update_segments on {}: ranges {} i32 and mults {} f32 must both be (2S)", name(),
                 ranges.shape().to_string(), mults.shape().to_string());
  check_sgd_mirrors(mirrors, ranges, fmt::format("sgd_update_segments on {}", name()));
  CNNSCALE_CHECK(!mirrors.grads.defined(), "sgd_update_segments on {}: this backend reads gradients from dw only",
                 name());
  std::vector<int32_t> r(static_cast<size_t>(ranges.numel()));
  std::vector<float> m(static_cast<size_t>(mults.numel()));
  std::vector<int32_t> map(mirrors.defined() ? static_cast<size_t>(mirrors.map.numel()) : 0);
  download(ranges, r.data());
  download(mults, m.data());
  if (mirrors.defined()) download(mirrors.map, map.data());
  for (size_t k = 0; k + 1 < r.size(); k += 2) {
    const int64_t begin = r[k], n = r[k + 1] - r[k];
    CNNSCALE_CHECK(begin >= 0 && n >= 0 && begin + n <= w.numel(), "sgd_update_segments: segment [{}, {}) outside {}",
                   r[k], r[k + 1], w.numel());
    const Shape s{n};
    sgd_update(w.view(begin, s), dw.view(begin, s), history.view(begin, s), lr * m[k], momentum,
               weight_decay * m[k + 1]);
    if (map.empty() || map[2 * k] < 0) continue;
    const int64_t at = map[2 * k], channels = map[2 * k + 1], pixels = map[2 * k + 2];
    CNNSCALE_CHECK(at + n <= mirrors.mirror.numel() && channels > 0 && pixels > 0 && n % (channels * pixels) == 0,
                   "sgd_update_segments: mirror entry {{{}, {}, {}}} of segment [{}, {}) does not fit the mirror {}",
                   at, channels, pixels, r[k], r[k + 1], mirrors.mirror.numel());
    if (map[2 * k + 3] == 0) {
      convert(w.view(begin, s), mirrors.mirror.view(at, s));
    } else {  // (K, C, P, 1) NCHW -> NHWC is KCRS -> KRSC
      const Shape filter{n / (channels * pixels), channels, pixels, 1};
      convert(w.view(begin, filter), mirrors.mirror.view(at, filter).as_layout(Layout::NHWC));
    }
  }
}

namespace {
int32_t read_i32_scalar(Backend& b, const Tensor& t, const char* op, const char* what) {
  CNNSCALE_CHECK(t.dtype() == DType::I32 && t.numel() == 1, "{} on {}: {} must be i32 (1), got {} {}", op, b.name(),
                 what, dtype_name(t.dtype()), t.shape().to_string());
  int32_t v = 0;
  b.download(t, &v);
  return v;
}
}  // namespace

void Backend::dropout_forward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& x,
                                 const Tensor& y) {
  const int32_t it = read_i32_scalar(*this, iteration, "dropout_forward_at", "iteration");
  dropout_forward(ratio, seed, dropout_stream(static_cast<uint64_t>(static_cast<uint32_t>(it)), layer), x, y);
}

void Backend::dropout_backward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& dy,
                                  const Tensor& dx) {
  const int32_t it = read_i32_scalar(*this, iteration, "dropout_backward_at", "iteration");
  dropout_backward(ratio, seed, dropout_stream(static_cast<uint64_t>(static_cast<uint32_t>(it)), layer), dy, dx);
}

void Backend::convert_scaled_at(const Tensor& src, const Tensor& dst, const Tensor& scale) {
  CNNSCALE_CHECK(scale.dtype() == DType::F32 && scale.numel() >= 1, "convert_scaled_at on {}: scale must be f32",
                 name());
  float s = 0;
  download(scale.view(0, Shape{1}), &s);
  convert(src, dst, s);
}

void Backend::convert_segments(const Tensor& src, const Tensor& dst, const Tensor& ranges) {
  CNNSCALE_CHECK(src.shape().rank() == 1 && dst.shape() == src.shape(),
                 "convert_segments on {}: {} -> {}, not 1-d of one numel", name(), src.shape().to_string(),
                 dst.shape().to_string());
  CNNSCALE_CHECK(ranges.dtype() == DType::I32 && ranges.numel() % 2 == 0,
                 "convert_segments on {}: ranges must be i32 (2S)", name());
  std::vector<int32_t> host(static_cast<size_t>(ranges.numel()));
  if (!host.empty()) download(ranges, host.data());
  int64_t last = 0;
  for (size_t k = 0; k < host.size(); k += 2) {
    const int64_t begin = host[k], end = host[k + 1];
    CNNSCALE_CHECK(begin >= last && begin <= end && end <= src.numel(),
                   "convert_segments on {}: range [{}, {}) after {} of {} elements", name(), begin, end, last,
                   src.numel());
    if (end > begin) convert(src.view(begin, Shape{end - begin}), dst.view(begin, Shape{end - begin}));
    last = end;
  }
}

void check_add_scratch(const std::string& who, const Tensor& dx, const Tensor& scratch) {
  CNNSCALE_CHECK(scratch.defined() && scratch.shape() == dx.shape() && scratch.dtype() == dx.dtype() &&
                     scratch.layout() == dx.layout(),
                 "conv_backward_data_add on {}: the scratch must have dx's shape, dtype and layout", who);
}

void Backend::conv_backward_data_add(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                                     const Tensor& scratch) {
  check_add_scratch(name(), dx, scratch);
  conv_backward_data(p, w, dy, scratch);
  axpby(1.0f, scratch, 1.0f, dx);
}

void Backend::axpby_unless(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& skip) {
  CNNSCALE_CHECK(x.dtype() == DType::F32 && x.numel() == 1 && y.dtype() == DType::F32 && y.numel() == 1,
                 "axpby_unless on {}: x and y must be f32 (1)", name());
  if (skip.defined() && read_i32_scalar(*this, skip, "axpby_unless", "skip") != 0) return;
  axpby(alpha, x, beta, y);
}

void Backend::update_loss_scale(const Tensor& found_inf, const Tensor& scale, const Tensor& state, const Tensor& tag,
                                const Tensor& nonfinite, int64_t growth_interval, float max_scale) {
  CNNSCALE_CHECK(scale.dtype() == DType::F32 && scale.numel() == 2, "update_loss_scale on {}: scale must be f32 (2)",
                 name());
  CNNSCALE_CHECK(state.dtype() == DType::I32 && state.numel() == 3, "update_loss_scale on {}: state must be i32 (3)",
                 name());
  float sc[2];
  int32_t st[3];
  download(scale, sc);
  download(state, st);
  LossScaleState s{sc[0], sc[1], st[0],
                   st[1], st[2], read_i32_scalar(*this, nonfinite, "update_loss_scale", "nonfinite")};
  loss_scale_step(s, read_i32_scalar(*this, found_inf, "update_loss_scale", "found_inf") != 0,
                  read_i32_scalar(*this, tag, "update_loss_scale", "tag"), growth_interval, max_scale);
  sc[0] = s.scale;
  sc[1] = s.inverse;
  st[0] = s.clean;
  st[1] = s.skipped;
  st[2] = s.skip;
  upload(sc, scale);
  upload(st, state);
  upload(&s.nonfinite, nonfinite);
}

void Backend::sgd_update_segments_at(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                                     const Tensor& mults, const Tensor& lr, float momentum, float weight_decay,
                                     const Tensor& skip, const SgdMirrors& mirrors, const GradCheck& check) {
  CNNSCALE_CHECK(lr.dtype() == DType::F32 && lr.numel() == 1, "sgd_update_segments_at on {}: lr must be f32 (1)",
                 name());
  CNNSCALE_CHECK(!(check.defined() && skip.defined()), "sgd_update_segments_at on {}: a gradient check with a skip",
                 name());
  if (check.defined()) flag_nonfinite_at(dw, check.tag, check.flag);
  if (skip.defined() && read_i32_scalar(*this, skip, "sgd_update_segments_at", "skip") != 0) return;
  float rate = 0;
  download(lr, &rate);
  sgd_update_segments(w, dw, history, ranges, mults, rate, momentum, weight_decay, mirrors);
}

void Backend::flag_nonfinite_at(const Tensor& x, const Tensor& tag, const Tensor& flag) {
  flag_nonfinite(x, read_i32_scalar(*this, tag, "flag_nonfinite_at", "tag"), flag);
}

std::unique_ptr<CapturedWork> Backend::capture(const std::function<void()>&, const CaptureOptions&) {
  throw_runtime("{}: this backend cannot capture work for replay (CUDA graphs are a CUDA backend feature)", name());
}

size_t Backend::capture_timing_point() {
  throw_runtime("{}: no capture in progress", name());
}

std::unique_ptr<KernelTracer> Backend::trace_kernels() {
  throw_config("kernel profiling needs a CUDA GPU and CUPTI; this run's device is {} ({})", device().to_string(),
               name());
}

MetricReplay metric_replay_from_name(const std::string& name) {
  if (name == "kernel") return MetricReplay::Kernel;
  if (name == "work") return MetricReplay::Work;
  throw_config("--metric-replay '{}': expected kernel or work", name);
}

const char* metric_replay_name(MetricReplay replay) {
  return replay == MetricReplay::Kernel ? "kernel" : "work";
}

std::unique_ptr<KernelMetricProfiler> Backend::kernel_metric_profiler() {
  throw_config("hardware metrics need a CUDA GPU and CUPTI's profiler; this run's device is {} ({})",
               device().to_string(), name());
}

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

namespace {
// (N, K, D) of a fully connected layer's operands; RuntimeError naming `op` when they do not agree.
std::array<int64_t, 3> linear_extents(const char* op, const std::string& backend, const Tensor& x, const Tensor& w,
                                      const Tensor& y) {
  const int64_t n = y.shape().rank() >= 1 ? y.shape().n() : 0;
  const int64_t k = w.shape().rank() == 2 ? w.shape()[0] : -1;
  const int64_t d = w.shape().rank() == 2 ? w.shape()[1] : -1;
  if (k < 0 || y.numel() != n * k || x.numel() != n * d)
    throw_runtime("{} on {}: x {} w {} y {} are not (N, D), (K, D), (N, K)", op, backend, x.shape().to_string(),
                  w.shape().to_string(), y.shape().to_string());
  return {n, k, d};
}
}  // namespace

void Backend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y) {
  const auto [n, k, d] = linear_extents("linear_forward", name(), x, w, y);
  matmul(false, true, n, k, d, 1.0f, x, w, 0.0f, y);
  if (bias.defined()) bias_add(bias, y);
  if (relu) relu_forward(y, y);
}

void Backend::linear_backward_params(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& dbias) {
  const auto [n, k, d] = linear_extents("linear_backward_params", name(), x, dw, dy);
  matmul(true, false, k, d, n, 1.0f, dy, x, 0.0f, dw);
  if (dbias.defined()) bias_backward(dy, dbias);
}

double Backend::elapsed_ms(const TimingEvent& a, const TimingEvent& b) {
  const auto* ha = dynamic_cast<const HostTimingEvent*>(&a);
  const auto* hb = dynamic_cast<const HostTimingEvent*>(&b);
  CNNSCALE_CHECK(ha && hb, "elapsed_ms on {}: timing events of another backend", name());
  return std::chrono::duration<double, std::milli>(hb->at - ha->at).count();
}

int64_t conv_output_dim(int64_t in, int kernel, int stride, int pad, int dilation) {
  // In 64 bits: `2 * pad` in int wraps for a pad near 2^31 to a plausible small size, which the
  // bound checks after this could not tell from a real one.
  int64_t extent = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
  return floor_div(in + 2 * static_cast<int64_t>(pad) - extent, stride) + 1;
}

int64_t pool_output_dim(int64_t in, int kernel, int stride, int pad, bool ceil_mode) {
  int64_t span = in + 2 * static_cast<int64_t>(pad) - kernel;  // 64 bits, as conv_output_dim
  if (span < 0) return 0;                                      // window larger than the padded input: no valid output
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // Caffe: the last pooling window must start strictly inside the image (or its left padding).
  if (pad > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace cnnscale
