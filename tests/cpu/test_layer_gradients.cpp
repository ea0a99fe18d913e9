// Finite-difference gradient checks of every layer type and its important variants on the CPU
// backend (w.r.t. every f32 bottom and every parameter), plus a check that the checker itself
// catches a wrong backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "common/gradient_check.hpp"
#include "common/layer_harness.hpp"
#include "core/error.hpp"

namespace cnnscale::testing {
namespace {

class LayerGradients : public ::testing::Test {
 protected:
  void expect_ok(LayerHarness& h, const GradCheckOptions& options = {}) {
    GradCheckResult r = check_gradients(h, options);
    RecordProperty("checked", std::to_string(r.checked));
    RecordProperty("max_relative_error", std::to_string(r.max_error));
    EXPECT_GT(r.checked, 0) << "nothing was checked";
    EXPECT_EQ(r.failures, 0) << r.failures << " of " << r.checked << " gradients wrong, max relative error "
                             << r.max_error << ":\n"
                             << r.report;
  }
  // `relu: true` gates the top gradient by the output's sign before the layer's own backward. A
  // central difference across the ReLU's kink would be meaningless, so the outputs of `layer` (its
  // YAML without `relu`, with these bias values) are checked to stay away from it: a step of 1e-2 in
  // one input moves an output by at most 1e-2 times a weight (xavier: |w| <= sqrt(3 / fan_in), 0.41
  // for the convolution's 18 inputs, 0.71 for the fully connected layer's 6), in one weight or bias
  // by at most 1e-2 (|x| <= 1), so pre-activations of magnitude >= 0.02 keep their sign under every
  // perturbation. Both signs must occur: some outputs gated, some passed.
  void expect_fused_relu_ok(const std::string& layer, const std::vector<float>& bias, const Shape& input) {
    auto plain = make_layer(cpu_, layer, {input});
    auto h = make_layer(cpu_, layer + "relu: true\n", {input});
    from_host(cpu_, plain.layer->params()[1].data, bias);
    from_host(cpu_, h.layer->params()[1].data, bias);
    plain.forward(Phase::Train);
    int gated = 0, passed = 0;
    for (float v : to_host(cpu_, plain.tops[0])) {
      EXPECT_GE(std::fabs(v), 0.02f) << "an output too close to the ReLU's kink for a central difference";
      (v > 0.0f ? passed : gated) += 1;
    }
    EXPECT_GT(gated, 0);
    EXPECT_GT(passed, 0);
    expect_ok(h);
  }
  CpuBackend cpu_;
};

// ---- Convolution ----------------------------------------------------------------------------------

TEST_F(LayerGradients, ConvolutionPad1WithBias) {
  auto h =
      make_layer(cpu_, "type: Convolution\nnum_output: 4\nkernel: 3\npad: 1\nbias_filler: {type: gaussian, std: 0.5}",
                 {Shape{2, 3, 5, 5}});
  expect_ok(h);
}

TEST_F(LayerGradients, ConvolutionStride2RectangularKernel) {
  auto h = make_layer(cpu_, "type: Convolution\nnum_output: 3\nkernel: [3, 2]\nstride: [2, 1]\npad: [1, 0]",
                      {Shape{2, 2, 7, 6}});
  expect_ok(h);
}

TEST_F(LayerGradients, ConvolutionGroupsWithoutBias) {
  auto h = make_layer(cpu_, "type: Convolution\nnum_output: 4\nkernel: 3\nstride: 2\npad: 1\ngroup: 2\nbias: false",
                      {Shape{2, 4, 6, 6}});
  ASSERT_EQ(h.layer->params().size(), 1u);
  expect_ok(h);
}

TEST_F(LayerGradients, ConvolutionDilation) {
  auto h = make_layer(cpu_, "type: Convolution\nnum_output: 2\nkernel: 3\ndilation: 2\npad: 1", {Shape{1, 2, 7, 7}});
  expect_ok(h);
}

TEST_F(LayerGradients, ConvolutionPointwise) {
  // 1x1, stride 1, no padding takes the path without im2col.
  auto h = make_layer(cpu_, "type: Convolution\nnum_output: 3\nkernel: 1", {Shape{2, 4, 3, 3}});
  expect_ok(h);
}

TEST_F(LayerGradients, ConvolutionFusedRelu) {
  // Biases of either sign: some outputs gated, some passed.
  expect_fused_relu_ok("type: Convolution\nnum_output: 3\nkernel: 3\npad: 1\n", {1.5f, -1.5f, 0.6f},
                       Shape{2, 2, 4, 4});
}

// A second bottom adds a residual addend before the ReLU (a residual block's last convolution
// with its batch norm folded): its gradient is the gated top gradient. The addend moves each
// conv + bias further from the ReLU's kink, by 0.25 to 0.5 in its own direction, so every sum is at
// least 0.25 from it and keeps its sign under the checker's steps (as above: <= 1e-2 per step, in
// z too), and the outputs have both signs.
TEST_F(LayerGradients, ConvolutionFusedAddRelu) {
  const std::string layer = "type: Convolution\nnum_output: 3\nkernel: 3\npad: 1\n";
  const Shape x{2, 2, 4, 4}, y{2, 3, 4, 4};
  const std::vector<float> bias{1.5f, -1.5f, 0.6f};
  auto plain = make_layer(cpu_, layer, {x});
  auto h = make_layer(cpu_, layer + "relu: true\n", {x, y});
  from_host(cpu_, plain.layer->params()[1].data, bias);
  from_host(cpu_, h.layer->params()[1].data, bias);
  cpu_.copy(h.bottoms[0], plain.bottoms[0]);
  plain.forward(Phase::Train);
  const std::vector<float> conv = to_host(cpu_, plain.tops[0]);
  std::vector<float> z = to_host(cpu_, h.bottoms[1]);  // U(-1, 1) from the harness
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::copysign(0.375f + 0.125f * z[i], conv[i]);
  from_host(cpu_, h.bottoms[1], z);
  int gated = 0, passed = 0;
  for (size_t i = 0; i < conv.size(); ++i) {
    const float v = conv[i] + z[i];
    EXPECT_GE(std::fabs(v), 0.25f) << "an output too close to the ReLU's kink for a central difference";
    (v > 0.0f ? passed : gated) += 1;
  }
  EXPECT_GT(gated, 0);
  EXPECT_GT(passed, 0);
  expect_ok(h);
  EXPECT_TRUE(h.bottom_diffs[1].defined());
}

// The addend must have the output's shape, and comes only with the ReLU and a bias.
TEST_F(LayerGradients, ConvolutionAddendIsCheckedAtLoad) {
  const Shape x{2, 2, 4, 4};
  EXPECT_THROW(
      make_layer(cpu_, "type: Convolution\nnum_output: 3\nkernel: 3\npad: 1\nrelu: true\n", {x, Shape{2, 3, 3, 3}}),
      ConfigError);
  EXPECT_THROW(make_layer(cpu_, "type: Convolution\nnum_output: 3\nkernel: 3\npad: 1\n", {x, Shape{2, 3, 4, 4}}),
               ConfigError);
  EXPECT_THROW(make_layer(cpu_, "type: Convolution\nnum_output: 3\nkernel: 3\npad: 1\nrelu: true\nbias: false\n",
                          {x, Shape{2, 3, 4, 4}}),
               ConfigError);
}

// ---- InnerProduct -------------------------------------------------------------------------------

TEST_F(LayerGradients, InnerProductFromFeatureMaps) {
  auto h = make_layer(cpu_, "type: InnerProduct\nnum_output: 5\nbias_filler: {type: uniform, min: -1, max: 1}",
                      {Shape{3, 2, 3, 3}});
  expect_ok(h);
}

TEST_F(LayerGradients, InnerProductFusedRelu) {
  expect_fused_relu_ok("type: InnerProduct\nnum_output: 4\n", {1.5f, -1.5f, 0.6f, -0.4f}, Shape{3, 6});
}

TEST_F(LayerGradients, InnerProductWithoutBias) {
  auto h = make_layer(cpu_, "type: InnerProduct\nnum_output: 4\nbias: false", {Shape{2, 6}});
  expect_ok(h);
}

// ---- Pooling: distinct inputs spaced 0.05 apart, so a 0.01 step never moves a maximum ------------

TEST_F(LayerGradients, MaxPoolingCeilMode) {
  // 6 -> ceil((6 - 3) / 2) + 1 = 3: the last window hangs over the edge.
  auto h = make_layer(cpu_, "type: Pooling\npool: max\nkernel: 3\nstride: 2", {Shape{2, 2, 6, 6}});
  ASSERT_EQ(h.top_shapes[0], (Shape{2, 2, 3, 3}));
  fill_distinct(cpu_, h.bottoms[0], 5, 0.05f);
  expect_ok(h);
}

TEST_F(LayerGradients, MaxPoolingPaddedFloor) {
  auto h =
      make_layer(cpu_, "type: Pooling\npool: max\nkernel: 2\nstride: 2\npad: 1\nround: floor", {Shape{1, 3, 5, 5}});
  fill_distinct(cpu_, h.bottoms[0], 6, 0.05f);
  expect_ok(h);
}

TEST_F(LayerGradients, AveragePoolingPaddedCeil) {
  auto h = make_layer(cpu_, "type: Pooling\npool: ave\nkernel: 3\nstride: 2\npad: 1", {Shape{2, 2, 6, 6}});
  expect_ok(h);
}

TEST_F(LayerGradients, GlobalAveragePooling) {
  auto h = make_layer(cpu_, "type: Pooling\npool: ave\nglobal_pooling: true", {Shape{2, 3, 4, 5}});
  ASSERT_EQ(h.top_shapes[0], (Shape{2, 3, 1, 1}));
  expect_ok(h);
}

// ---- element-wise layers ------------------------------------------------------------------------

TEST_F(LayerGradients, ReLU) {
  auto h = make_layer(cpu_, "type: ReLU", {Shape{2, 3, 4, 4}});
  GradCheckOptions options;
  options.kink_range = 2.0f * options.step;  // a perturbation must not cross x = 0
  GradCheckResult r = check_gradients(h, options);
  EXPECT_EQ(r.failures, 0) << r.report;
  EXPECT_GT(r.checked, 60);  // of 96 inputs from U(-1, 1) about 4 % are near the kink
}

TEST_F(LayerGradients, DropoutTrainPhase) {
  auto h = make_layer(cpu_, "type: Dropout\nratio: 0.3", {Shape{2, 4, 5, 5}});
  h.iteration = 17;  // the mask is a fixed function of (seed, iteration, layer), the same in every forward
  expect_ok(h);
}

TEST_F(LayerGradients, BatchNormTrainFeatureMaps) {
  auto h = make_layer(cpu_,
                      "type: BatchNorm\nscale_filler: {type: uniform, min: 0.5, max: 1.5}\n"
                      "shift_filler: {type: gaussian, std: 0.5}",
                      {Shape{3, 2, 3, 3}});
  expect_ok(h);
}

TEST_F(LayerGradients, BatchNormTrainFullyConnected) {
  auto h = make_layer(cpu_, "type: BatchNorm\nscale_filler: {type: uniform, min: 0.5, max: 1.5}", {Shape{6, 4}});
  expect_ok(h);
}

// Fused ReLU (and addend): inputs whose normalised values stay at least ~0.3 away from the ReLU's
// kink, so that no finite-difference step crosses it. Per channel, pairs +v, -v with v in [0.5, 1]:
// the batch mean is exactly 0 and |xhat| >= 0.5 / std; scale >= 0.5 and shift 0 keep |bn(x)| >=
// 0.3, and an addend in [-0.1, 0.1] keeps |bn(x) + z| >= 0.2 (steps are 0.01).
std::vector<float> away_from_kink(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  const int64_t per_channel = s.n() * s.h() * s.w();
  for (int64_t n = 0; n < s.n(); ++n)
    for (int64_t c = 0; c < s.c(); ++c)
      for (int64_t i = 0; i < s.h() * s.w(); ++i) {
        const int64_t k = n * s.h() * s.w() + i;  // index within the channel
        const float mag = 0.5f + 0.5f * static_cast<float>((k / 2 * 7) % per_channel) / static_cast<float>(per_channel);
        v[static_cast<size_t>((n * s.c() + c) * s.h() * s.w() + i)] = k % 2 == 0 ? mag : -mag;
      }
  return v;
}

TEST_F(LayerGradients, BatchNormFusedRelu) {
  const Shape s{4, 2, 3, 3};
  auto h = make_layer(cpu_, "type: BatchNorm\nrelu: true\nscale_filler: {type: uniform, min: 0.5, max: 1.5}", {s});
  from_host(cpu_, h.bottoms[0], away_from_kink(s));
  expect_ok(h);
}

TEST_F(LayerGradients, BatchNormFusedAddRelu) {
  const Shape s{4, 2, 3, 3};
  auto h = make_layer(cpu_, "type: BatchNorm\nrelu: true\nscale_filler: {type: uniform, min: 0.5, max: 1.5}",
                      {s, s});
  from_host(cpu_, h.bottoms[0], away_from_kink(s));
  fill_uniform(cpu_, h.bottoms[1], 11, -0.1f, 0.1f);
  expect_ok(h);
  // Both bottoms carry a gradient: the addend's is dy gated by the ReLU.
  EXPECT_TRUE(h.bottom_diffs[1].defined());
}

// Synchronised batch norm with the fused epilogue, on two ranks holding the same data: the job's
// statistics are this rank's, the gradient correction is exactly zero, so the synced layer must
// compute what the local one does. Differences come only from the exchanged statistics being
// rounded to float (2^-24 relative), amplified at most ~10x by the normalisation: 1e-5 allows that,
// while a lost ReLU gate or addend gradient is off by O(1). Inputs away from the kink (above), so
// the two paths' last-bit differences in y cannot flip a gate.
class TwinRanks final : public RankExchange {
 public:
  int ranks() const override { return 2; }
  std::vector<std::vector<float>> allgather(Backend&, const std::vector<float>& values) override {
    return {values, values};
  }
  // On the CPU backend: both ranks' rows are this rank's.
  void gather_async(const Tensor& mine, const Tensor& all) override {
    ++gathers;
    const size_t bytes = mine.bytes();
    std::memcpy(all.raw(), mine.raw(), bytes);
    std::memcpy(static_cast<char*>(all.raw()) + bytes, mine.raw(), bytes);
  }
  void wait_gathers() override {}
  int gathers = 0;
};

TEST_F(LayerGradients, SyncBatchNormFusedOnTwoIdenticalRanksIsTheLocalOne) {
  const Shape s{4, 2, 3, 3};
  const std::string bn = "type: BatchNorm\nrelu: true\nscale_filler: {type: uniform, min: 0.5, max: 1.5}";
  auto synced = make_layer(cpu_, bn + "\nsync: true", {s, s});
  auto local = make_layer(cpu_, bn, {s, s});
  for (auto* h : {&synced, &local}) {
    from_host(cpu_, h->bottoms[0], away_from_kink(s));
    fill_uniform(cpu_, h->bottoms[1], 11, -0.1f, 0.1f);
    fill_uniform(cpu_, h->top_diffs[0], 12, -1.0f, 1.0f);
  }
  ASSERT_EQ(to_host(cpu_, synced.flat_params), to_host(cpu_, local.flat_params));
  TwinRanks twins;
  LayerContext ctx{cpu_, Phase::Train, 1, 0};
  ctx.ranks = &twins;
  synced.layer->forward(ctx, synced.bottoms, synced.tops);
  local.forward(Phase::Train);
  synced.layer->backward(ctx, synced.bottoms, synced.tops, synced.top_diffs, {true, true}, synced.bottom_diffs);
  local.backward(Phase::Train);
  auto expect_close = [&](const char* what, const Tensor& a, const Tensor& b) {
    const std::vector<float> x = to_host(cpu_, a), y = to_host(cpu_, b);
    float scale = 0.0f;
    for (float v : y) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-5f * scale) << what << " [" << i << "]";
  };
  expect_close("y", synced.tops[0], local.tops[0]);
  expect_close("dx", synced.bottom_diffs[0], local.bottom_diffs[0]);
  expect_close("dz", synced.bottom_diffs[1], local.bottom_diffs[1]);
  expect_close("dscale, dshift", synced.flat_grads, local.flat_grads);
  // The gate did something: some outputs are clipped, and their dz is 0.
  const std::vector<float> y = to_host(cpu_, local.tops[0]), dz = to_host(cpu_, local.bottom_diffs[1]);
  EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 0);
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) {
      EXPECT_EQ(dz[i], 0.0f) << i;
    }
  }
}

// A fully-connected layer that gathers (LayerContext::gather_rows) on two ranks holding the same
// rows forms its weight and bias gradients from both ranks' x and dy: twice the local ones, the
// input gradient its own. Twice a sum of n products is the sum of the 2n duplicated ones up to
// the order of the additions: 2n fp32 terms re-associated move the sum by at most gamma_{2n-1}
// sum|terms| (Higham 4.2), 9e-7 relative here at n = 6 + 2 padding rows, against the sum's own
// magnitude times the few-fold cancellation of U(-1, 1) products: 1e-5 of the largest allows it,
// while a missing rank (1x) or a padding row that is not zero is off by O(1). Padded rows (gather
// rows 8 > 6) must add nothing. The layer decides itself where gathering pays: here it would not
// (a 3 x 10 weight), so the test asks through the context as the net does for a planned layer.
TEST_F(LayerGradients, InnerProductGatheringFormsTheJobsGradients) {
  const Shape s{6, 2, 2, 3};
  const std::string fc =
      "type: InnerProduct\nnum_output: 3\nweight_filler: {type: uniform, min: -1, max: 1}\n"
      "bias_filler: {type: uniform, min: -1, max: 1}";
  for (int64_t rows : {6, 8}) {
    SCOPED_TRACE(rows);
    auto gathered = make_layer(cpu_, fc, {s}, 3);
    auto local = make_layer(cpu_, fc, {s}, 3);
    for (auto* h : {&gathered, &local}) {
      fill_uniform(cpu_, h->bottoms[0], 21, -1.0f, 1.0f);
      fill_uniform(cpu_, h->top_diffs[0], 22, -1.0f, 1.0f);
    }
    TwinRanks twins;
    LayerContext ctx{cpu_, Phase::Train, 1, 0};
    ctx.ranks = &twins;
    ctx.gather_rows = rows;
    gathered.layer->forward(ctx, gathered.bottoms, gathered.tops);
    gathered.layer->backward(ctx, gathered.bottoms, gathered.tops, gathered.top_diffs, {true}, gathered.bottom_diffs);
    local.forward(Phase::Train);
    local.backward(Phase::Train);
    EXPECT_EQ(twins.gathers, 2) << "x and dy";
    EXPECT_EQ(to_host(cpu_, gathered.bottom_diffs[0]), to_host(cpu_, local.bottom_diffs[0]));
    const std::vector<float> g = to_host(cpu_, gathered.flat_grads), l = to_host(cpu_, local.flat_grads);
    ASSERT_EQ(g.size(), l.size());
    float scale = 0.0f;
    for (float v : l) scale = std::max(scale, std::fabs(2 * v));
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], 2 * l[i], 1e-5f * scale) << i;
  }
  EXPECT_FALSE(make_layer(cpu_, fc, {s}, 3).layer->gathers_gradients(6, 2)) << "a 3 x 12 weight: not worth it";
  // CaffeNet's fc6 on 4 ranks of 64 rows: 2.6 M values gathered instead of 57 M allreduced.
  auto fc6 = make_layer(cpu_, "type: InnerProduct\nnum_output: 4096", {Shape{1, 256, 6, 6}});
  EXPECT_TRUE(fc6.layer->gathers_gradients(64, 4));
  EXPECT_FALSE(fc6.layer->gathers_gradients(64, 1));
}

TEST_F(LayerGradients, LRNStrongNormalisation) {
  // AlexNet's alpha = 1e-4 makes the cross-channel term nearly invisible to a gradient check;
  // alpha = 1 and k = 2 make it dominate so a wrong backward window or coefficient shows.
  auto h = make_layer(cpu_, "type: LRN\nlocal_size: 3\nalpha: 1.0\nbeta: 0.75\nk: 2.0", {Shape{2, 6, 3, 3}});
  fill_uniform(cpu_, h.bottoms[0], 9, -2.0f, 2.0f);
  expect_ok(h);
}

TEST_F(LayerGradients, LRNAlexNetWindow) {
  auto h = make_layer(cpu_, "type: LRN\nlocal_size: 5\nalpha: 0.5\nbeta: 0.75", {Shape{1, 7, 3, 2}});
  fill_uniform(cpu_, h.bottoms[0], 10, -2.0f, 2.0f);
  expect_ok(h);
}

TEST_F(LayerGradients, EltwiseSumWithCoefficients) {
  auto h = make_layer(cpu_, "type: Eltwise\ncoeff: [0.5, -2, 1.5]",
                      {Shape{2, 3, 2, 2}, Shape{2, 3, 2, 2}, Shape{2, 3, 2, 2}});
  expect_ok(h);
}

TEST_F(LayerGradients, Flatten) {
  auto h = make_layer(cpu_, "type: Flatten", {Shape{2, 3, 2, 2}});
  ASSERT_EQ(h.top_shapes[0], (Shape{2, 12}));
  expect_ok(h);
}

TEST_F(LayerGradients, ConcatChannels) {
  auto h = make_layer(cpu_, "type: Concat", {Shape{2, 1, 3, 3}, Shape{2, 3, 3, 3}, Shape{2, 2, 3, 3}});
  ASSERT_EQ(h.top_shapes[0], (Shape{2, 6, 3, 3}));
  expect_ok(h);
}

TEST_F(LayerGradients, SoftmaxWithLossWrtScores) {
  auto h =
      make_layer(cpu_, "type: SoftmaxWithLoss\nloss_weight: 2.0", {Shape{4, 5}, Shape{4}}, 1, {DType::F32, DType::I32});
  fill_uniform(cpu_, h.bottoms[0], 11, -3.0f, 3.0f);
  set_labels(cpu_, h.bottoms[1], {0, 4, 2, 2});
  expect_ok(h);
}

// ---- the checker can fail -----------------------------------------------------------------------

// y = 2 x whose backward forgets the factor 2.
class WrongBackwardLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& b) override { return {b.at(0)}; }
  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    ctx.backend.axpby(2.0f, bottom[0], 0.0f, top[0]);
  }
  void backward(LayerContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>&,
                const std::vector<Tensor>& top_diff, const std::vector<bool>&,
                const std::vector<Tensor>& bottom_diff) override {
    ctx.backend.copy(top_diff[0], bottom_diff[0]);
  }
};

TEST_F(LayerGradients, CheckerDetectsWrongBackward) {
  register_layer(
      "TestWrongBackward",
      [](LayerConfig c) -> std::unique_ptr<Layer> { return std::make_unique<WrongBackwardLayer>(std::move(c)); }, {});
  auto h = make_layer(cpu_, "type: TestWrongBackward", {Shape{2, 3}});
  GradCheckResult r = check_gradients(h);
  EXPECT_EQ(r.checked, 6);
  // Analytic r vs numeric 2 r: relative error 0.5 (or |r| / floor for tiny r), far above 1e-2.
  EXPECT_EQ(r.failures, r.checked) << r.report;
}

}  // namespace
}  // namespace cnnscale::testing
