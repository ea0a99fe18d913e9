// CpuBackend softmax, cross-entropy, top-k accuracy, channel copies for Concat and the SGD update.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_checks.hpp"
#include "core/byte_input.hpp"

namespace cnnscale {

using cpu::check_f32;
using cpu::check_i32;
using cpu::check_same_numel;

namespace {

// Scores/prob are (N, C); labels (N) must name a class. A bad label is a data error, reported with
// the sample rather than read out of bounds.
int64_t checked_label(const char* op, const int32_t* labels, int64_t n, int64_t classes) {
  int32_t label = labels[n];
  if (label < 0 || label >= classes)
    throw_runtime("cpu {}: label {} of sample {} outside [0, {})", op, label, n, classes);
  return label;
}

void check_scores_labels(const char* op, const Tensor& scores, const Tensor& labels) {
  check_f32(op, scores, "scores");
  check_i32(op, labels, "labels");
  CNNSCALE_CHECK(labels.numel() == scores.shape().n(), "cpu {}: labels {} for scores {}", op,
                 labels.shape().to_string(), scores.shape().to_string());
}

}  // namespace

void CpuBackend::softmax_forward(const Tensor& x, const Tensor& prob) {
  check_f32("softmax_forward", x, "x");
  check_f32("softmax_forward", prob, "prob");
  check_same_numel("softmax_forward", x, prob);
  const int64_t batch = x.shape().n(), classes = batch ? x.numel() / batch : 0;
  for (int64_t n = 0; n < batch; ++n) {
    const float* in = x.f32() + n * classes;
    float* out = prob.f32() + n * classes;
    // Subtracting the row maximum keeps every exponent <= 0: no overflow for large scores.
    float max_value = -FLT_MAX;
    for (int64_t c = 0; c < classes; ++c) max_value = std::max(max_value, in[c]);
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) {
      out[c] = std::exp(in[c] - max_value);
      sum += out[c];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t c = 0; c < classes; ++c) out[c] *= inv;
  }
}

void CpuBackend::cross_entropy_loss(const Tensor& prob, const Tensor& labels, const Tensor& loss) {
  check_scores_labels("cross_entropy_loss", prob, labels);
  check_f32("cross_entropy_loss", loss, "loss");
  CNNSCALE_CHECK(loss.numel() == 1, "cpu cross_entropy_loss: loss must be (1), got {}", loss.shape().to_string());
  const int64_t batch = prob.shape().n(), classes = batch ? prob.numel() / batch : 0;
  double sum = 0.0;
  for (int64_t n = 0; n < batch; ++n) {
    int64_t label = checked_label("cross_entropy_loss", labels.i32(), n, classes);
    sum -= std::log(std::max(prob.f32()[n * classes + label], FLT_MIN));
  }
  loss.f32()[0] = batch ? static_cast<float>(sum / static_cast<double>(batch)) : 0.0f;
}

void CpuBackend::softmax_cross_entropy_backward(const Tensor& prob, const Tensor& labels, float scale,
                                                const Tensor& dx) {
  check_scores_labels("softmax_cross_entropy_backward", prob, labels);
  check_f32("softmax_cross_entropy_backward", dx, "dx");
  check_same_numel("softmax_cross_entropy_backward", prob, dx);
  const int64_t batch = prob.shape().n(), classes = batch ? prob.numel() / batch : 0;
  for (int64_t n = 0; n < batch; ++n) {
    int64_t label = checked_label("softmax_cross_entropy_backward", labels.i32(), n, classes);
    const float* p = prob.f32() + n * classes;
    float* d = dx.f32() + n * classes;
    for (int64_t c = 0; c < classes; ++c) d[c] = scale * (p[c] - (c == label ? 1.0f : 0.0f));
  }
}

// Tie rule (backend.hpp: ties count against): a sample is correct at k when fewer than k other
// classes score >= the label's score. So with all scores equal nothing is ever correct for k < C,
// and a constant network cannot look accurate.
void CpuBackend::accuracy_topk(const Tensor& scores, const Tensor& labels, const std::vector<int>& ks,
                               const Tensor& out) {
  check_scores_labels("accuracy_topk", scores, labels);
  check_f32("accuracy_topk", out, "out");
  CNNSCALE_CHECK(out.numel() == static_cast<int64_t>(ks.size()), "cpu accuracy_topk: out {} for {} values of k",
                 out.shape().to_string(), ks.size());
  const int64_t batch = scores.shape().n(), classes = batch ? scores.numel() / batch : 0;
  std::vector<int64_t> correct(ks.size(), 0);
  for (int64_t n = 0; n < batch; ++n) {
    int64_t label = checked_label("accuracy_topk", labels.i32(), n, classes);
    const float* s = scores.f32() + n * classes;
    const float label_score = s[label];
    int64_t rivals = 0;  // other classes scoring at least as high as the label
    for (int64_t c = 0; c < classes; ++c)
      if (c != label && s[c] >= label_score) ++rivals;
    for (size_t j = 0; j < ks.size(); ++j)
      if (rivals < ks[j]) ++correct[j];
  }
  for (size_t j = 0; j < ks.size(); ++j)
    out.f32()[j] = batch ? static_cast<float>(static_cast<double>(correct[j]) / static_cast<double>(batch)) : 0.0f;
}

void CpuBackend::copy_channels(const Tensor& src, int64_t src_c, const Tensor& dst, int64_t dst_c, int64_t channels) {
  check_f32("copy_channels", src, "src");
  check_f32("copy_channels", dst, "dst");
  const Shape &s = src.shape(), &d = dst.shape();
  const int64_t spatial = s.h() * s.w();
  CNNSCALE_CHECK(s.n() == d.n() && spatial == d.h() * d.w(), "cpu copy_channels: src {} and dst {} differ",
                 s.to_string(), d.to_string());
  CNNSCALE_CHECK(src_c >= 0 && dst_c >= 0 && channels >= 0 && src_c + channels <= s.c() && dst_c + channels <= d.c(),
                 "cpu copy_channels: channels [{}, +{}) of {} into [{}, +{}) of {}", src_c, channels, s.to_string(),
                 dst_c, channels, d.to_string());
  const size_t bytes = static_cast<size_t>(channels * spatial) * sizeof(float);
  for (int64_t n = 0; n < s.n(); ++n)
    std::memcpy(dst.f32() + (n * d.c() + dst_c) * spatial, src.f32() + (n * s.c() + src_c) * spatial, bytes);
}

void CpuBackend::decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out) {
  check_decode_bytes(bytes, draws, affine, out, "cpu decode_bytes");
  CNNSCALE_CHECK(bytes.device().is_cpu() && out.device().is_cpu() && affine.device().is_cpu() &&
                     (!draws.defined() || draws.device().is_cpu()),
                 "cpu decode_bytes: a tensor is not on the cpu");
  const Shape& s = bytes.shape();
  const int64_t channels = s.c(), height = s.h(), width = s.w(), plane = height * width;
  const auto* in = static_cast<const uint8_t*>(bytes.raw());
  const float* scale = affine.f32();
  const float* offset = scale + channels;
  const float* negates = affine.numel() == 3 * channels ? offset + channels : nullptr;
  for (int64_t n = 0; n < s.n(); ++n) {
    const int32_t* d = draws.defined() ? draws.i32() + n * kDrawInts : nullptr;
    const int64_t dy = d ? d[0] : 0, dx = d ? d[1] : 0;
    const bool mirror = d && d[2] != 0;
    for (int64_t c = 0; c < channels; ++c) {
      const uint8_t* src = in + (n * channels + c) * plane;
      float* dst = out.f32() + (n * channels + c) * plane;
      const bool negate = negates && negates[c] != 0.0f;
      for (int64_t y = 0; y < height; ++y)
        for (int64_t x = 0; x < width; ++x)
          dst[y * width + x] = drawn_input(src, y, x, height, width, dy, dx, mirror, negate, scale[c], offset[c]);
    }
  }
}

void CpuBackend::sgd_update(const Tensor& w, const Tensor& dw, const Tensor& history, float lr, float momentum,
                            float weight_decay) {
  check_f32("sgd_update", w, "w");
  check_f32("sgd_update", dw, "dw");
  check_f32("sgd_update", history, "history");
  check_same_numel("sgd_update", w, dw);
  check_same_numel("sgd_update", w, history);
  float *pw = w.f32(), *ph = history.f32();
  const float* pdw = dw.f32();
  for (int64_t i = 0, n = w.numel(); i < n; ++i) {
    ph[i] = momentum * ph[i] + lr * (pdw[i] + weight_decay * pw[i]);
    pw[i] -= ph[i];
  }
}

void CpuBackend::flag_nonfinite(const Tensor& x, int32_t tag, const Tensor& flag) {
  check_f32("flag_nonfinite", x, "x");
  check_i32("flag_nonfinite", flag, "flag");
  CNNSCALE_CHECK(flag.numel() == 1 && tag > 0, "flag_nonfinite: flag of {} elements, tag {}", flag.numel(), tag);
  if (flag.i32()[0] != 0) return;
  const float* p = x.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i)
    if (!std::isfinite(p[i])) {
      flag.i32()[0] = tag;
      return;
    }
}

}  // namespace cnnscale
