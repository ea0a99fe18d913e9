// Loss-side ops on CUDA (own kernels; cuDNN has none of these): cross-entropy to a device scalar,
// its gradient through softmax, and top-k accuracy. None synchronises with the host, so a label
// outside [0, C) cannot throw here: it turns the result into NaN, which the caller sees. Accuracy
// ranks f32, bf16 or f16 scores (comparisons in float are exact); the rest is f32.
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"

namespace cnnscale {
namespace {

// Scores/probabilities are (N, C) or (N, C, 1, 1); labels (N) i32. Returns {N, C}.
// f32 except where `any_float` (accuracy ranks 16-bit scores as they are).
std::pair<int64_t, int64_t> check_scores_labels(const char* op, const Tensor& scores, const Tensor& labels,
                                                int device, bool any_float = false) {
  if (any_float)
    cuda::expect_float(op, "scores", scores, device);
  else
    cuda::expect_f32(op, "scores", scores, device);
  cuda::expect_i32(op, "labels", labels, device);
  const Shape& s = scores.shape();
  if (s.rank() < 2 || s.numel() != s.n() * s.c())
    throw_runtime("{} on cuda: scores {} must be (N, C)", op, s.to_string());
  if (s.n() < 1 || s.c() < 1) throw_runtime("{} on cuda: empty scores {}", op, s.to_string());
  cuda::expect_numel(op, "labels", labels, s.n());
  return {s.n(), s.c()};
}

}  // namespace

void CudaBackend::cross_entropy_loss(const Tensor& prob, const Tensor& labels, const Tensor& loss) {
  auto [n, c] = check_scores_labels("cross_entropy_loss", prob, labels, device_);
  cuda::expect_f32("cross_entropy_loss", "loss", loss, device_);
  cuda::expect_numel("cross_entropy_loss", "loss", loss, 1);
  activate();
  cuda::launch_cross_entropy_loss(prob.f32(), labels.i32(), n, c, loss.f32(), stream());
}

void CudaBackend::softmax_cross_entropy_backward(const Tensor& prob, const Tensor& labels, float scale,
                                                 const Tensor& dx) {
  auto [n, c] = check_scores_labels("softmax_cross_entropy_backward", prob, labels, device_);
  cuda::expect_f32("softmax_cross_entropy_backward", "dx", dx, device_);
  cuda::expect_numel("softmax_cross_entropy_backward", "dx", dx, n * c);
  activate();
  cuda::launch_softmax_cross_entropy_backward(prob.f32(), labels.i32(), n, c, scale, dx.f32(), stream());
}

void CudaBackend::accuracy_topk(const Tensor& scores, const Tensor& labels, const std::vector<int>& ks,
                                const Tensor& out) {
  auto [n, c] = check_scores_labels("accuracy_topk", scores, labels, device_, /*any_float=*/true);
  cuda::expect_f32("accuracy_topk", "out", out, device_);
  if (ks.empty() || ks.size() > static_cast<size_t>(cuda::kMaxTopK))
    throw_runtime("accuracy_topk on cuda: {} values of k given; 1..{} supported", ks.size(), cuda::kMaxTopK);
  for (int k : ks)
    if (k < 1) throw_runtime("accuracy_topk on cuda: k = {} must be >= 1", k);
  cuda::expect_numel("accuracy_topk", "out", out, static_cast<int64_t>(ks.size()));
  activate();
  cuda::launch_accuracy_topk(scores.dtype(), scores.raw(), labels.i32(), n, c, ks.data(), static_cast<int>(ks.size()),
                             out.f32(), stream());
}

}  // namespace cnnscale
