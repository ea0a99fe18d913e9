// Solver: learning-rate policies (with warm-up) at chosen iterations, SolverConfig parsing and
// validation, and SGD with momentum and weight decay (per-parameter lr_mult/decay_mult) on the CPU
// backend against a hand computation in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.hpp"
#include "core/half.hpp"
#include "net/net.hpp"
#include "solver/lr_schedule.hpp"
#include "solver/sgd_solver.hpp"

namespace cnnscale {
namespace {

SolverConfig config(LrPolicy policy) {
  SolverConfig c;
  c.lr = 0.1;
  c.policy = policy;
  return c;
}

// 100 iterations per epoch, 1000 in total.
double lr_at(const SolverConfig& c, int64_t iteration) {
  return LrSchedule(c, 100, 1000).lr(iteration);
}

TEST(LrSchedule, Fixed) {
  SolverConfig c = config(LrPolicy::Fixed);
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 999), 0.1);
}

TEST(LrSchedule, StepEveryTwoEpochsAndHalfEpochs) {
  SolverConfig c = config(LrPolicy::Step);
  c.step_epochs = 2;
  c.gamma = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(c, 199), 0.1);
  EXPECT_NEAR(lr_at(c, 200), 0.01, 1e-15);
  EXPECT_NEAR(lr_at(c, 450), 0.001, 1e-15);
  c.step_epochs = 0.5;  // 50 iterations
  c.gamma = 0.5;
  EXPECT_DOUBLE_EQ(lr_at(c, 49), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 50), 0.05);
  EXPECT_DOUBLE_EQ(lr_at(c, 149), 0.025);
}

TEST(LrSchedule, ExpIsContinuousInEpochs) {
  SolverConfig c = config(LrPolicy::Exp);
  c.gamma = 0.5;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 0.05);
  EXPECT_NEAR(lr_at(c, 50), 0.1 * std::sqrt(0.5), 1e-15);
  EXPECT_NEAR(lr_at(c, 300), 0.0125, 1e-15);
}

TEST(LrSchedule, Multistep) {
  SolverConfig c = config(LrPolicy::Multistep);
  c.milestones = {1, 3};
  c.gamma = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(c, 99), 0.1);
  EXPECT_NEAR(lr_at(c, 100), 0.01, 1e-15);
  EXPECT_NEAR(lr_at(c, 299), 0.01, 1e-15);
  EXPECT_NEAR(lr_at(c, 300), 0.001, 1e-15);
  EXPECT_NEAR(lr_at(c, 999), 0.001, 1e-15);
}

TEST(LrSchedule, PolyOverTotalIterations) {
  SolverConfig c = config(LrPolicy::Poly);
  c.power = 2;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 500), 0.025);
  EXPECT_NEAR(lr_at(c, 900), 0.1 * 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(c, 1000), 0.0);
}

TEST(LrSchedule, LinearWarmupInEpochsOrIterations) {
  SolverConfig c = config(LrPolicy::Fixed);
  c.warmup_epochs = 2;  // 200 iterations
  c.warmup_start_factor = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.01);
  EXPECT_NEAR(lr_at(c, 100), 0.1 * (0.1 + 0.9 * 0.5), 1e-15);
  EXPECT_NEAR(lr_at(c, 199), 0.1 * (0.1 + 0.9 * 199.0 / 200.0), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(c, 200), 0.1);
  // Warm-up scales whatever the policy gives: here a step after 5 iterations within a 10-iteration warm-up.
  SolverConfig s = config(LrPolicy::Step);
  s.step_epochs = 0.05;  // 5 iterations
  s.gamma = 0.5;
  s.warmup_iterations = 10;
  s.warmup_start_factor = 0.0;
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 0.0);
  EXPECT_NEAR(lr_at(s, 4), 0.1 * 0.4, 1e-15);
  EXPECT_NEAR(lr_at(s, 6), 0.05 * 0.6, 1e-15);
  EXPECT_NEAR(lr_at(s, 10), 0.1 * 0.25, 1e-15);
}

TEST(SolverConfig, ParsesYaml) {
  auto node = ConfigNode::load_string(
      "solver: {lr: 0.2, momentum: 0.8, weight_decay: 0.0001, lr_policy: multistep, milestones: [30, 60],"
      " gamma: 0.2, warmup_epochs: 5, warmup_start_factor: 0.25}\n",
      "exp.yaml");
  SolverConfig c = SolverConfig::parse(node["solver"]);
  EXPECT_DOUBLE_EQ(c.lr, 0.2);
  EXPECT_DOUBLE_EQ(c.momentum, 0.8);
  EXPECT_DOUBLE_EQ(c.weight_decay, 1e-4);
  EXPECT_EQ(c.policy, LrPolicy::Multistep);
  EXPECT_EQ(c.milestones, std::vector<double>({30, 60}));
  EXPECT_DOUBLE_EQ(c.gamma, 0.2);
  EXPECT_DOUBLE_EQ(c.warmup_epochs, 5);
  EXPECT_DOUBLE_EQ(c.warmup_start_factor, 0.25);
}

void expect_parse_error(const std::string& yaml, const std::string& fragment) {
  auto node = ConfigNode::load_string(yaml, "exp.yaml");
  try {
    SolverConfig::parse(node["solver"]);
    ADD_FAILURE() << "accepted: " << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exp.yaml:"), std::string::npos) << e.what();
  }
}

TEST(SolverConfig, RejectsBadInputWithLocation) {
  expect_parse_error("solver:\n  lr: 0.1\n  momentun: 0.9\n", "exp.yaml:3:3: solver.momentun: unknown key 'momentun'");
  expect_parse_error("solver:\n  lr: -1\n", "exp.yaml:2:7: solver.lr: must be > 0");
  expect_parse_error("solver:\n  lr: abc\n", "solver.lr: expected a number");
  expect_parse_error("solver:\n  lr_policy: cosine\n", "unknown learning-rate policy 'cosine'");
  expect_parse_error("solver: {lr_policy: multistep}\n", "at least one milestone");
  expect_parse_error("solver: {lr_policy: multistep, milestones: [3, 2]}\n", "strictly increasing");
  expect_parse_error("solver: {momentum: 1.0}\n", "solver.momentum: must be in [0, 1)");
  expect_parse_error("solver: {warmup_epochs: 1, warmup_iterations: 10}\n", "either in epochs or in iterations");
}

// The linear scaling rule: lr x global batch / base batch, the base named in the description.
TEST(SolverConfig, LinearScalingRule) {
  auto node = ConfigNode::load_string("solver: {lr: 0.01, lr_scaling: linear, lr_base_batch: 32}\n", "exp.yaml");
  SolverConfig c = SolverConfig::parse(node["solver"]);
  EXPECT_DOUBLE_EQ(c.scaled_lr(32), 0.01);
  EXPECT_DOUBLE_EQ(c.scaled_lr(256), 0.08);
  EXPECT_NE(c.describe().find("lr 0.01 scaled linearly from batch 32"), std::string::npos) << c.describe();
  c.lr_scaling = "none";
  EXPECT_DOUBLE_EQ(c.scaled_lr(256), 0.01);
  EXPECT_EQ(c.describe().find("scaled"), std::string::npos);
  expect_parse_error("solver: {lr_scaling: sqrt}\n", "solver.lr_scaling: must be none or linear");
  expect_parse_error("solver: {lr_base_batch: 0}\n", "solver.lr_base_batch: must be >= 1");
}

// A net with one fully-connected layer: weight (2, 3) with lr_mult 1 and decay_mult 1, bias (2)
// with lr_mult 2 and decay_mult 0 (Caffe's usual setting).
const char* kTinyNet = R"(
name: sgd_tiny
input: {shape: [3, 1, 1], classes: 2}
layers:
  - name: fc
    type: InnerProduct
    bottom: data
    top: fc
    num_output: 2
    weight_filler: {type: gaussian, std: 0.5}
    bias_filler: {type: constant, value: 0.25}
    param: [{lr_mult: 1, decay_mult: 1}, {lr_mult: 2, decay_mult: 0}]
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";

TEST(SgdSolver, MomentumAndWeightDecayMatchHandComputation) {
  NetSpec spec = NetSpec::load_string(kTinyNet, "sgd_tiny.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 4, 5);
  SolverConfig c = config(LrPolicy::Step);
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.01;
  c.step_epochs = 1;  // 2 iterations per epoch below: the rate halves at step 2
  c.gamma = 0.5;
  SgdSolver solver(net, c, 2, 10);
  ASSERT_EQ(solver.params().size(), 2u);
  EXPECT_EQ(solver.params()[0].name, "fc/weight");
  EXPECT_EQ(solver.params()[1].name, "fc/bias");

  struct Reference {
    std::vector<double> w, h;
    double lr_mult, decay_mult;
  };
  std::vector<Reference> ref;
  for (const auto& np : solver.params()) {
    const Tensor& d = np.param->data;
    ref.push_back({std::vector<double>(d.f32(), d.f32() + d.numel()), std::vector<double>(d.numel(), 0.0),
                   np.param->spec.lr_mult, np.param->spec.decay_mult});
  }
  EXPECT_EQ(ref[1].lr_mult, 2.0);
  EXPECT_EQ(ref[1].decay_mult, 0.0);
  for (int64_t it = 0; it < 4; ++it) {
    const double rate = 0.1 * (it < 2 ? 1.0 : 0.5);
    for (size_t p = 0; p < ref.size(); ++p) {
      const Param& param = *solver.params()[p].param;
      for (int64_t i = 0; i < param.diff.numel(); ++i) {
        double g = std::sin(1.0 + 3.0 * i + 7.0 * it + 11.0 * p);  // arbitrary, reproducible gradients
        param.diff.f32()[i] = static_cast<float>(g);
        // Caffe: h = momentum * h + lr * lr_mult * (g + wd * decay_mult * w); w -= h.
        double& w = ref[p].w[i];
        double& h = ref[p].h[i];
        h = 0.9 * h + rate * ref[p].lr_mult * (static_cast<float>(g) + 0.01 * ref[p].decay_mult * w);
        w -= h;
      }
    }
    solver.step(it);
    for (size_t p = 0; p < ref.size(); ++p) {
      const Param& param = *solver.params()[p].param;
      for (int64_t i = 0; i < param.data.numel(); ++i) {
        EXPECT_NEAR(param.data.f32()[i], ref[p].w[i], 1e-6) << solver.params()[p].name << "[" << i << "] step " << it;
        EXPECT_NEAR(solver.history()[p].f32()[i], ref[p].h[i], 1e-6) << "history " << i << " step " << it;
      }
    }
  }
}

// The update in parts (SgdSolver::plan_parts, as a bucketed exchange hands the gradients over):
// applying every part of a step is apply() bit for bit, over momentum steps with weight decay and
// lr_mult 2 on the bias. The flat buffer: weight [0, 6), bias [64, 66) (parameters start at
// multiples of 64 elements). Ends {3, 7, 66}: no parameter ends in the first bucket (the weight's
// first three elements), the weight ends in the second, the bias in the third. Each parameter is
// updated by exactly one part: part 1 alone moves the weight and not the bias. Ends that do not
// reach the buffer's end are refused.
TEST(SgdSolver, UpdateInPartsIsTheWholeUpdateBitForBit) {
  NetSpec spec = NetSpec::load_string(kTinyNet, "sgd_tiny.yaml");
  auto backend = make_backend("cpu");
  Net whole_net(spec, *backend, 4, 5), parts_net(spec, *backend, 4, 5);
  SolverConfig c = config(LrPolicy::Fixed);
  c.momentum = 0.9;
  c.weight_decay = 0.01;
  SgdSolver whole(whole_net, c, 2, 10), parts(parts_net, c, 2, 10);
  ASSERT_TRUE(parts.capturable());
  ASSERT_EQ(parts_net.flat_params().numel(), 66);
  parts.plan_parts({3, 7, 66});
  ASSERT_EQ(parts.parts(), 3u);
  auto values = [](const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); };
  for (int64_t it = 0; it < 3; ++it) {
    for (Net* net : {&whole_net, &parts_net})
      for (int64_t i = 0; i < net->flat_grads().numel(); ++i)
        net->flat_grads().f32()[i] = static_cast<float>(std::sin(0.7 * i + 3.0 * it));  // reproducible gradients
    whole.step(it);
    parts.set_rate(it);
    const std::vector<float> before = values(parts_net.flat_params());
    parts.apply_part(1);
    const std::vector<float> after_weight = values(parts_net.flat_params());
    EXPECT_NE(after_weight[0], before[0]) << "part 1 holds the weight";
    EXPECT_EQ(after_weight[64], before[64]) << "part 1 does not hold the bias";
    parts.apply_part(0);
    EXPECT_EQ(values(parts_net.flat_params()), after_weight) << "no parameter ends in the first bucket";
    parts.apply_part(2);
    parts.parts_applied();
    EXPECT_EQ(values(parts_net.flat_params()), values(whole_net.flat_params())) << "step " << it;
    for (size_t p = 0; p < whole.history().size(); ++p)
      EXPECT_EQ(values(parts.history()[p]), values(whole.history()[p])) << "history " << p << " step " << it;
  }
  EXPECT_THROW(parts.plan_parts({3, 7}), Error);
  EXPECT_THROW(parts.plan_parts({7, 3, 66}), Error);
}

// A divergence check fused into the update (GradCheck) on the CPU's default path: finite gradients
// leave the flag at 0 and the update goes ahead; a NaN gradient sets the step's tag, the update still
// runs (the caller stops the run), and a later step leaves the first tag. The default path reads dw
// only: it refuses mirror gradients, and a check together with a skip.
TEST(SgdSolver, SegmentedUpdateChecksTheGradientsItReads) {
  auto backend = make_backend("cpu");
  Backend& b = *backend;
  EXPECT_FALSE(b.sgd_reads_mirror_grads());
  const int64_t n = 16;
  Tensor w = b.alloc(Shape{n}), dw = b.alloc(Shape{n}), h = b.alloc(Shape{n});
  b.fill(w, 1.0f);
  b.fill(dw, 0.5f);
  b.fill(h, 0.0f);
  const std::vector<int32_t> ranges{0, 8, 8, 16};
  const std::vector<float> mults{1, 1, 1, 1};
  Tensor r = b.alloc(Shape{4}, DType::I32), m = b.alloc(Shape{4}), lr = b.alloc(Shape{1});
  b.upload(ranges.data(), r);
  b.upload(mults.data(), m);
  b.fill(lr, 0.1f);
  const GradCheck check{b.alloc(Shape{1}, DType::I32), b.alloc(Shape{1}, DType::I32)};
  b.fill_i32(check.flag, 0);
  b.fill_i32(check.tag, 3);
  b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.0f, 0.0f, Tensor(), SgdMirrors(), check);
  EXPECT_EQ(check.flag.i32()[0], 0);
  EXPECT_FLOAT_EQ(w.f32()[0], 1.0f - 0.1f * 0.5f);
  dw.f32()[11] = std::numeric_limits<float>::quiet_NaN();
  b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.0f, 0.0f, Tensor(), SgdMirrors(), check);
  EXPECT_EQ(check.flag.i32()[0], 3);
  EXPECT_TRUE(std::isnan(w.f32()[11]));  // the update went ahead
  b.fill_i32(check.tag, 4);
  b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.0f, 0.0f, Tensor(), SgdMirrors(), check);
  EXPECT_EQ(check.flag.i32()[0], 3) << "the first tag stays";

  Tensor skip = b.alloc(Shape{1}, DType::I32);
  b.fill_i32(skip, 0);
  auto message = [&](const auto& call) -> std::string {
    try {
      call();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  EXPECT_NE(message([&] { b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.0f, 0.0f, skip, SgdMirrors(), check); })
                .find("a gradient check with a skip"),
            std::string::npos);
  const std::vector<int32_t> map{-1, 1, 1, 0, -1, 1, 1, 0};
  SgdMirrors mirrors{b.alloc(Shape{4}, DType::BF16), b.alloc(Shape{8}, DType::I32), b.alloc(Shape{4}, DType::BF16)};
  b.upload(map.data(), mirrors.map);
  EXPECT_NE(message([&] { b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.0f, 0.0f, Tensor(), mirrors); })
                .find("reads gradients from dw only"),
            std::string::npos);
}

// The segmented update's compute copies (SgdMirrors) on the CPU's default path: a filter (K, C, P)
// lands reordered (K, P, C), a bias in its own order, a segment without a copy writes none, and
// each copy element is the updated master rounded once to bf16 (to nearest even, half.hpp), which
// is exact to compare. A skipped step writes no copy either.
TEST(SgdSolver, SegmentedUpdateWritesTheComputeCopies) {
  auto backend = make_backend("cpu");
  Backend& b = *backend;
  constexpr int64_t kK = 2, kC = 3, kP = 4, kFilter = kK * kC * kP;  // 24
  const int64_t n = 64, copies = 40;
  Tensor w = b.alloc(Shape{n}), dw = b.alloc(Shape{n}), h = b.alloc(Shape{n});
  std::vector<float> w0(n), g(n);
  for (int64_t i = 0; i < n; ++i) w0[i] = std::sin(0.3f * i), g[i] = std::cos(0.7f * i);
  b.upload(w0.data(), w);
  b.upload(g.data(), dw);
  b.fill(h, 0.0f);
  // [0, 24) a filter whose copy is at 0, reordered; [32, 36) a bias copied at 28; [40, 60) no copy.
  const std::vector<int32_t> ranges{0, 24, 32, 36, 40, 60};
  const std::vector<float> mults{1, 1, 2, 0, 1, 1};
  const std::vector<int32_t> map{0, kC, kP, 1, 28, 1, 1, 0, -1, 1, 1, 0};
  Tensor r = b.alloc(Shape{6}, DType::I32), m = b.alloc(Shape{6}), lr = b.alloc(Shape{1}),
         skip = b.alloc(Shape{1}, DType::I32);
  SgdMirrors mirrors{b.alloc(Shape{copies}, DType::BF16), b.alloc(Shape{12}, DType::I32), Tensor()};
  b.upload(ranges.data(), r);
  b.upload(mults.data(), m);
  b.upload(map.data(), mirrors.map);
  b.fill(lr, 0.1f);
  const float sentinel = 7.0f;  // exact in bf16
  {
    Tensor wide = b.alloc(Shape{copies});
    b.fill(wide, sentinel);
    b.convert(wide, mirrors.mirror);
  }
  auto copy_on_host = [&] {
    Tensor wide = b.alloc(Shape{copies});
    b.convert(mirrors.mirror, wide);
    return std::vector<float>(wide.f32(), wide.f32() + copies);
  };
  b.fill_i32(skip, 1);
  b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.9f, 0.01f, skip, mirrors);
  EXPECT_EQ(copy_on_host(), std::vector<float>(copies, sentinel)) << "a skipped step wrote a copy";

  b.fill_i32(skip, 0);
  b.sgd_update_segments_at(w, dw, h, r, m, lr, 0.9f, 0.01f, skip, mirrors);
  const std::vector<float> updated(w.f32(), w.f32() + n), copy = copy_on_host();
  auto rounded = [](float v) { return bf16_to_float(float_to_bf16(v)); };
  std::vector<float> expected(copies, sentinel);
  for (int64_t k = 0; k < kK; ++k)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t p = 0; p < kP; ++p) expected[(k * kP + p) * kC + c] = rounded(updated[(k * kC + c) * kP + p]);
  for (int64_t j = 0; j < 4; ++j) expected[28 + j] = rounded(updated[32 + j]);
  EXPECT_EQ(copy, expected);
  EXPECT_NE(updated[0], w0[0]);  // the step did move the masters
  EXPECT_EQ(updated[kFilter], w0[kFilter]) << "element 24 is in no segment";
}

}  // namespace
}  // namespace cnnscale
