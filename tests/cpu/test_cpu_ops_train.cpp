// CPU backend and layer values for the training-specific ops: softmax, cross-entropy, top-k
// accuracy, batch norm (inference affine, running-statistic update), dropout statistics and phase
// behaviour, the SGD update, and the parameter fillers.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.hpp"
#include "common/layer_harness.hpp"
#include "core/config.hpp"
#include "core/rng.hpp"
#include "layers/filler.hpp"

namespace cnnscale::testing {
namespace {

// fill_i32 writes any int exactly: through a float (fill) 2^24 + 1 would round to 2^24. The
// trainer's per-step values (iteration, divergence tag) take this path.
TEST(CpuTrainOps, FillI32IsExactBeyondFloatPrecision) {
  CpuBackend cpu;
  Tensor t = cpu.alloc(Shape{3}, DType::I32);
  const int32_t big = (1 << 24) + 1;
  cpu.fill_i32(t, big);
  EXPECT_EQ(t.i32()[0], big);
  EXPECT_EQ(t.i32()[2], big);
  cpu.fill_i32(t, -7);
  EXPECT_EQ(t.i32()[1], -7);
  Tensor f = cpu.alloc(Shape{1});
  EXPECT_THROW(cpu.fill_i32(f, 1), Error);
}

TEST(CpuTrainOps, SoftmaxRowsSumToOneAndSurviveLargeScores) {
  CpuBackend cpu;
  Tensor x = cpu.alloc({3, 4}), prob = cpu.alloc({3, 4});
  from_host(cpu, x, {0, 1, 2, 3, 1000, 1001, 1002, 1003, -5, -5, -5, -5});
  cpu.softmax_forward(x, prob);
  auto p = to_host(cpu, prob);
  for (int n = 0; n < 3; ++n) {
    double sum = 0.0;
    for (int c = 0; c < 4; ++c) sum += p[static_cast<size_t>(n * 4 + c)];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // Shift invariance: row 1 is row 0 plus 1000, which would overflow exp() without the max shift.
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(p[static_cast<size_t>(4 + c)], p[static_cast<size_t>(c)], 1e-6);
  EXPECT_NEAR(p[0], std::exp(0.0) / (1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
  EXPECT_FLOAT_EQ(p[8], 0.25f);
}

TEST(CpuTrainOps, CrossEntropyMatchesHandValue) {
  CpuBackend cpu;
  auto h = make_layer(cpu, "type: SoftmaxWithLoss", {Shape{2, 3}, Shape{2}}, 1, {DType::F32, DType::I32});
  // Row 0: uniform, label 1 -> -log(1/3). Row 1: probabilities (1, 2, 5) / 8, label 2 -> -log(5/8).
  from_host(cpu, h.bottoms[0], {0, 0, 0, 0, std::log(2.0f), std::log(5.0f)});
  set_labels(cpu, h.bottoms[1], {1, 2});
  h.forward();
  EXPECT_NEAR(to_host(cpu, h.tops[0])[0], (std::log(3.0) + std::log(8.0 / 5.0)) / 2.0, 1e-6);
  h.backward();
  // d loss / d scores = (prob - onehot) / N with loss_weight 1.
  auto dx = to_host(cpu, h.bottom_diffs[0]);
  std::vector<double> expect{1.0 / 6, -1.0 / 3, 1.0 / 6, 1.0 / 16, 2.0 / 16, -3.0 / 16};
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(dx[i], expect[i], 1e-6) << i;
  EXPECT_FLOAT_EQ(h.layer->loss_weight(), 1.0f);
}

TEST(CpuTrainOps, CrossEntropyRejectsOutOfRangeLabel) {
  CpuBackend cpu;
  Tensor prob = cpu.alloc({1, 3}), labels = cpu.alloc({1}, DType::I32), loss = cpu.alloc({1});
  set_labels(cpu, labels, {3});
  EXPECT_THROW(cpu.cross_entropy_loss(prob, labels, loss), RuntimeError);
}

TEST(CpuTrainOps, AccuracyTop1Top5HandBuilt) {
  CpuBackend cpu;
  auto h = make_layer(cpu, "type: Accuracy\ntop: [top1, top5]\ntop_k: [1, 5]", {Shape{4, 6}, Shape{4}}, 1,
                      {DType::F32, DType::I32});
  from_host(cpu, h.bottoms[0],
            {
                9, 1, 2, 3, 4, 5,  // label 0 is the maximum: top-1 and top-5
                0, 1, 2, 3, 4, 5,  // label 1 is 5th of 6: top-5 only
                0, 1, 2, 3, 4, 5,  // label 0 is last: neither
                7, 7, 0, 0, 0, 0,  // label 1 ties with class 0: ties count against
            });
  set_labels(cpu, h.bottoms[1], {0, 1, 0, 1});
  h.forward(Phase::Test);
  EXPECT_FLOAT_EQ(to_host(cpu, h.tops[0])[0], 0.25f);  // sample 0
  EXPECT_FLOAT_EQ(to_host(cpu, h.tops[1])[0], 0.75f);  // samples 0, 1, 3
  EXPECT_FALSE(h.layer->has_backward());
}

TEST(CpuTrainOps, BatchNormInferenceIsAffineOfRunningStats) {
  CpuBackend cpu;
  auto h = make_layer(cpu, "type: BatchNorm\neps: 0.01", {Shape{2, 2, 1, 2}});
  from_host(cpu, h.layer->params()[0].data, {2.0f, -1.0f});  // scale
  from_host(cpu, h.layer->params()[1].data, {0.5f, 3.0f});   // shift
  from_host(cpu, h.layer->state()[0], {1.0f, -2.0f});        // running mean
  from_host(cpu, h.layer->state()[1], {3.99f, 0.24f});       // running var: var + eps = 4, 0.25
  from_host(cpu, h.bottoms[0], {1, 3, -2, 0, 5, -1, -1, -3});
  h.forward(Phase::Test);
  std::vector<float> x = to_host(cpu, h.bottoms[0]), y = to_host(cpu, h.tops[0]);
  for (size_t i = 0; i < 8; ++i) {
    size_t c = (i / 2) % 2;
    double ref = c == 0 ? 2.0 * (x[i] - 1.0) / 2.0 + 0.5 : -1.0 * (x[i] + 2.0) / 0.5 + 3.0;
    EXPECT_NEAR(y[i], ref, 1e-5) << i;
  }
  // Inference leaves the running statistics alone.
  EXPECT_EQ(to_host(cpu, h.layer->state()[0]), (std::vector<float>{1.0f, -2.0f}));
}

TEST(CpuTrainOps, BatchNormTrainNormalisesAndUpdatesRunningStats) {
  CpuBackend cpu;
  auto h = make_layer(cpu, "type: BatchNorm\nmomentum: 0.1", {Shape{4, 1}});
  from_host(cpu, h.bottoms[0], {1, 2, 3, 6});  // mean 3, biased var 3.5, unbiased 14/3
  h.forward(Phase::Train);
  auto y = to_host(cpu, h.tops[0]);
  const double inv_std = 1.0 / std::sqrt(3.5 + 1e-5);
  std::vector<double> x{1, 2, 3, 6};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], (x[i] - 3.0) * inv_std, 1e-6);
  EXPECT_NEAR(to_host(cpu, h.layer->state()[0])[0], 0.9 * 0.0 + 0.1 * 3.0, 1e-6);
  EXPECT_NEAR(to_host(cpu, h.layer->state()[1])[0], 0.9 * 1.0 + 0.1 * 14.0 / 3.0, 1e-6);
  h.forward(Phase::Train);  // a second step compounds from the updated values
  EXPECT_NEAR(to_host(cpu, h.layer->state()[0])[0], 0.9 * 0.3 + 0.1 * 3.0, 1e-6);
}

TEST(CpuTrainOps, DropoutKeepsOneMinusRatioAndScales) {
  CpuBackend cpu;
  const float ratio = 0.3f;
  Tensor x = cpu.alloc({200000}), y = cpu.alloc({200000});
  cpu.fill(x, 2.0f);
  cpu.dropout_forward(ratio, 42, 7, x, y);
  int64_t kept = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    float v = y.f32()[i];
    ASSERT_TRUE(v == 0.0f || v == 2.0f / (1.0f - ratio)) << v;
    kept += v != 0.0f;
    ASSERT_EQ(v != 0.0f, counter_uniform(42, 7, static_cast<uint64_t>(i)) >= ratio);  // the documented rule
  }
  // Binomial(200000, 0.7): standard deviation of the fraction ~0.001; 0.005 is five sigma.
  EXPECT_NEAR(static_cast<double>(kept) / y.numel(), 1.0 - ratio, 0.005);
}

TEST(CpuTrainOps, DropoutLayerMasksPerIterationAndIsIdentityInTest) {
  CpuBackend cpu;
  auto h = make_layer(cpu, "type: Dropout\nratio: 0.5", {Shape{4, 64}});
  h.iteration = 1;
  h.forward(Phase::Train);
  auto first = to_host(cpu, h.tops[0]);
  h.forward(Phase::Train);
  EXPECT_EQ(to_host(cpu, h.tops[0]), first);  // same iteration, same mask
  h.iteration = 2;
  h.forward(Phase::Train);
  EXPECT_NE(to_host(cpu, h.tops[0]), first);  // next iteration, new mask
  h.forward(Phase::Test);
  EXPECT_EQ(to_host(cpu, h.tops[0]), to_host(cpu, h.bottoms[0]));
}

TEST(CpuTrainOps, SgdUpdateMatchesHandComputation) {
  CpuBackend cpu;
  Tensor w = cpu.alloc({2}), dw = cpu.alloc({2}), history = cpu.alloc({2});
  from_host(cpu, w, {1.0f, -2.0f});
  from_host(cpu, dw, {0.5f, 0.25f});
  from_host(cpu, history, {0.1f, -0.2f});
  cpu.sgd_update(w, dw, history, 0.1f, 0.9f, 0.01f);
  // history = 0.9 h + 0.1 (dw + 0.01 w); w -= history.
  const double h0 = 0.9 * 0.1 + 0.1 * (0.5 + 0.01 * 1.0), h1 = 0.9 * -0.2 + 0.1 * (0.25 + 0.01 * -2.0);
  EXPECT_NEAR(to_host(cpu, history)[0], h0, 1e-7);
  EXPECT_NEAR(to_host(cpu, history)[1], h1, 1e-7);
  EXPECT_NEAR(to_host(cpu, w)[0], 1.0 - h0, 1e-7);
  EXPECT_NEAR(to_host(cpu, w)[1], -2.0 - h1, 1e-7);
}

// ---- fillers ------------------------------------------------------------------------------------

struct Moments {
  double mean, stddev, min, max;
};

Moments fill_and_measure(const std::string& yaml, int64_t fan_in, int64_t fan_out) {
  ConfigNode node = ConfigNode::load_string(yaml, "filler.yaml");
  ParamSpec spec{"weight", Shape{100000}, Filler::parse(node), 1, 1, fan_in, fan_out};
  std::vector<float> v(100000);
  std::mt19937_64 rng(3);
  fill_param(spec, rng, v.data());
  double sum = std::accumulate(v.begin(), v.end(), 0.0), sq = 0.0;
  for (float x : v) sq += double(x) * x;
  double mean = sum / v.size();
  return {mean, std::sqrt(sq / v.size() - mean * mean), *std::min_element(v.begin(), v.end()),
          *std::max_element(v.begin(), v.end())};
}

TEST(Fillers, DistributionsMatchCaffe) {
  Moments c = fill_and_measure("{type: constant, value: 0.25}", 1, 1);
  EXPECT_EQ(c.min, 0.25);
  EXPECT_EQ(c.max, 0.25);
  // 100000 samples: sample mean/std are within ~1 % of the truth; 3 % tolerances are ~3 sigma+.
  Moments g = fill_and_measure("{type: gaussian, mean: 1, std: 0.5}", 1, 1);
  EXPECT_NEAR(g.mean, 1.0, 0.015);
  EXPECT_NEAR(g.stddev, 0.5, 0.015);
  Moments u = fill_and_measure("{type: uniform, min: -2, max: 4}", 1, 1);
  EXPECT_GE(u.min, -2.0);
  EXPECT_LT(u.max, 4.0);
  EXPECT_NEAR(u.mean, 1.0, 0.03);
  // xavier: U(-sqrt(3/n), sqrt(3/n)), variance 1/n; fan_in 27 -> bound 1/3.
  Moments x = fill_and_measure("{type: xavier}", 27, 96);
  EXPECT_GE(x.min, -1.0 / 3.0);
  EXPECT_LE(x.max, 1.0 / 3.0);
  EXPECT_NEAR(x.stddev, std::sqrt(1.0 / 27), 0.03 * std::sqrt(1.0 / 27));
  Moments xo = fill_and_measure("{type: xavier, variance_norm: fan_out}", 27, 75);
  EXPECT_LE(xo.max, std::sqrt(3.0 / 75));
  Moments xa = fill_and_measure("{type: xavier, variance_norm: average}", 20, 30);
  EXPECT_LE(xa.max, std::sqrt(3.0 / 25));
  EXPECT_GT(xa.max, 0.99 * std::sqrt(3.0 / 25));
  // msra: N(0, sqrt(2/n)).
  Moments m = fill_and_measure("{type: msra}", 50, 10);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.stddev, 0.2, 0.03 * 0.2);
}

TEST(Fillers, ParseRejectsUnknownKeysAndTypes) {
  auto parse = [](const std::string& yaml) { return Filler::parse(ConfigNode::load_string(yaml, "f.yaml")); };
  EXPECT_EQ(parse("msra").type, "msra");
  EXPECT_THROW(parse("{type: gaussian, sdt: 0.1}"), ConfigError);
  EXPECT_THROW(parse("{type: bilinear}"), ConfigError);
  EXPECT_THROW(parse("{type: xavier, variance_norm: fan}"), ConfigError);
}

}  // namespace
}  // namespace cnnscale::testing
