// CUDA vs CPU parity for batch norm (train: y, running statistics, saved mean and inverse std;
// inference; backward), softmax, cross-entropy, its gradient and top-k accuracy (with ties).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "parity_util.hpp"

namespace cnnscale::testing {
namespace {

// ---- batch norm -----------------------------------------------------------------------------------

class CudaParityBatchNorm : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaParityBatchNorm, TrainInferenceBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const Shape s = GetParam();
  const std::string tag = "batchnorm " + s.to_string() + " ";
  const Shape cs{s.c()};
  BatchNormParams p;
  p.eps = 1e-5f;
  p.momentum = 0.1f;
  // Non-zero mean and non-unit spread so that normalisation does something visible.
  Twin x = twin_uniform(s, 111, -0.5f, 2.5f);
  Twin scale = twin_uniform(cs, 112, 0.5f, 1.5f), shift = twin_uniform(cs, 113, -0.5f, 0.5f);
  Twin running_mean = twin_uniform(cs, 114, -0.5f, 0.5f), running_var = twin_uniform(cs, 115, 0.5f, 1.5f);
  Twin y = twin_output(s), save_mean = twin_output(cs), save_inv_std = twin_output(cs);

  cpu_backend().batchnorm_forward_train(p, x.cpu, scale.cpu, shift.cpu, running_mean.cpu, running_var.cpu, y.cpu,
                                        save_mean.cpu, save_inv_std.cpu);
  gpu_backend().batchnorm_forward_train(p, x.gpu, scale.gpu, shift.gpu, running_mean.gpu, running_var.gpu, y.gpu,
                                        save_mean.gpu, save_inv_std.gpu);
  // Per-channel statistics over N*H*W values: reductions.
  expect_twin(tag + "train y", y, kTolReduction);
  expect_twin(tag + "save_mean", save_mean, kTolReduction);
  expect_twin(tag + "save_inv_std", save_inv_std, kTolReduction);
  // Momentum blend of the old value and the (unbiased) batch variance: a wrong momentum
  // convention or a biased variance is off by >= 1e-2 at these sizes.
  expect_twin(tag + "running_mean", running_mean, kTolReduction);
  expect_twin(tag + "running_var (unbiased)", running_var, kTolReduction);

  Twin dy = twin_uniform(s, 116), dx = twin_output(s), dscale = twin_output(cs), dshift = twin_output(cs);
  cpu_backend().batchnorm_backward(p, x.cpu, dy.cpu, scale.cpu, save_mean.cpu, save_inv_std.cpu, dx.cpu, dscale.cpu,
                                   dshift.cpu);
  gpu_backend().batchnorm_backward(p, x.gpu, dy.gpu, scale.gpu, save_mean.gpu, save_inv_std.gpu, dx.gpu, dscale.gpu,
                                   dshift.gpu);
  expect_twin(tag + "backward dx", dx, kTolBnBackward);
  expect_twin(tag + "backward dscale", dscale, kTolReduction);
  expect_twin(tag + "backward dshift", dshift, kTolReduction);

  // Inference with the running statistics just updated (identical on both sides up to the
  // tolerance above; re-upload the CPU's so this compares the op, not the previous one).
  from_host(gpu_backend(), running_mean.gpu, to_host(cpu_backend(), running_mean.cpu));
  from_host(gpu_backend(), running_var.gpu, to_host(cpu_backend(), running_var.cpu));
  Twin yi = twin_output(s);
  cpu_backend().batchnorm_forward_inference(p, x.cpu, scale.cpu, shift.cpu, running_mean.cpu, running_var.cpu, yi.cpu);
  gpu_backend().batchnorm_forward_inference(p, x.gpu, scale.gpu, shift.gpu, running_mean.gpu, running_var.gpu, yi.gpu);
  // A few float roundings per element in cuDNN ((x - mean), rsqrt(var + eps), scale, shift)
  // against one from double on the CPU.
  expect_twin(tag + "inference y", yi, kTolReduction);
}

// Not N*H*W = 2: there xhat = +-1 and dx is exactly 0 in exact arithmetic, so both backends return
// rounding noise and a normalized error is meaningless. (3, 4, 1, 1) is the smallest
// non-degenerate FC-like case.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaParityBatchNorm,
                         ::testing::Values(Shape{4, 8, 5, 5}, Shape{16, 10}, Shape{8, 32, 14, 14}, Shape{3, 4, 1, 1}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           std::string n;
                           for (int64_t d : info.param.dims()) {
                             if (!n.empty()) n.push_back('x');
                             n.append(std::to_string(d));
                           }
                           return n;
                         });

// ---- softmax and loss --------------------------------------------------------------------------------

TEST(CudaParityLoss, SoftmaxRows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  // ImageNet-sized rows with a wide score range, and (N, C, 1, 1) as an FC top arrives.
  for (Shape s : {Shape{8, 1000}, Shape{5, 10, 1, 1}}) {
    Twin x = twin_uniform(s, 121, -8.0f, 8.0f), prob = twin_output(s);
    cpu_backend().softmax_forward(x.cpu, prob.cpu);
    gpu_backend().softmax_forward(x.gpu, prob.gpu);
    // Each output is exp(x - max) / sum: one expf (<= 2 ulp apart between libm and CUDA) and a
    // sum of C terms (float in cuDNN, double on the CPU).
    expect_twin("softmax " + s.to_string(), prob, kTolReduction);
  }
}

TEST(CudaParityLoss, CrossEntropyAndGradient) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const int64_t n = 64, c = 10;
  std::mt19937 rng(131);
  std::vector<float> prob(static_cast<size_t>(n * c));
  for (auto& v : prob) v = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (auto& l : labels) l = std::uniform_int_distribution<int32_t>(0, c - 1)(rng);
  prob[static_cast<size_t>(3 * c + labels[3])] = 0.0f;  // clamped to FLT_MIN: -log stays finite
  Twin p = twin_values(Shape{n, c}, prob), lab = twin_labels(labels), loss = twin_output(Shape{1});
  cpu_backend().cross_entropy_loss(p.cpu, lab.cpu, loss.cpu);
  gpu_backend().cross_entropy_loss(p.gpu, lab.gpu, loss.gpu);
  // Mean of 64 logs accumulated in double on both sides; logf vs libm log differ by <= 1 ulp.
  expect_twin("cross_entropy_loss", loss, kTolElementwise);
  EXPECT_TRUE(std::isfinite(to_host(gpu_backend(), loss.gpu)[0]));

  Twin dx = twin_output(Shape{n, c});
  cpu_backend().softmax_cross_entropy_backward(p.cpu, lab.cpu, 1.0f / n, dx.cpu);
  gpu_backend().softmax_cross_entropy_backward(p.gpu, lab.gpu, 1.0f / n, dx.gpu);
  expect_twin("softmax_cross_entropy_backward", dx, kTolElementwise);
}

// ---- accuracy ---------------------------------------------------------------------------------------

// The tie rule, independently of both backends: correct at k when fewer than k OTHER classes
// score >= the label's score.
std::vector<float> expected_accuracy(const std::vector<float>& scores, const std::vector<int32_t>& labels,
                                     int64_t c, const std::vector<int>& ks) {
  std::vector<int64_t> hits(ks.size(), 0);
  const int64_t n = static_cast<int64_t>(labels.size());
  for (int64_t i = 0; i < n; ++i) {
    const float ls = scores[static_cast<size_t>(i * c + labels[i])];
    int64_t rivals = 0;
    for (int64_t j = 0; j < c; ++j) rivals += j != labels[i] && scores[static_cast<size_t>(i * c + j)] >= ls;
    for (size_t t = 0; t < ks.size(); ++t) hits[t] += rivals < ks[t];
  }
  std::vector<float> out;
  for (int64_t h : hits) out.push_back(static_cast<float>(static_cast<double>(h) / static_cast<double>(n)));
  return out;
}

TEST(CudaParityLoss, AccuracyTopKWithTies) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  struct Case {
    int64_t n, c;
    int levels;  // 0: continuous scores; otherwise scores take only this many values (many ties)
    std::vector<int> ks;
  };
  for (const Case& t : {Case{64, 20, 5, {1, 5}}, Case{37, 1000, 0, {1, 5}}, Case{300, 10, 3, {1, 2, 3, 9}},
                        Case{2048, 100, 0, {1, 5}}}) {
    SCOPED_TRACE(::testing::Message() << "N " << t.n << " C " << t.c << " levels " << t.levels);
    std::mt19937 rng(141);
    std::vector<float> scores(static_cast<size_t>(t.n * t.c));
    for (auto& v : scores) {
      v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      if (t.levels) v = std::round((v + 1.0f) / 2.0f * (t.levels - 1));
    }
    std::vector<int32_t> labels(static_cast<size_t>(t.n));
    for (auto& l : labels) l = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(t.c - 1))(rng);
    Twin s = twin_values(Shape{t.n, t.c}, scores), lab = twin_labels(labels);
    Twin out = twin_output(Shape{static_cast<int64_t>(t.ks.size())});
    cpu_backend().accuracy_topk(s.cpu, lab.cpu, t.ks, out.cpu);
    gpu_backend().accuracy_topk(s.gpu, lab.gpu, t.ks, out.gpu);
    expect_twin("accuracy_topk", out, kTolExact);
    EXPECT_EQ(to_host(gpu_backend(), out.gpu), expected_accuracy(scores, labels, t.c, t.ks));
  }
}

}  // namespace
}  // namespace cnnscale::testing
