// fp16 dynamic loss scaling on device values (Backend::update_loss_scale and the ops around it),
// on the CPU backend, whose defaults run the rule of backend/loss_scale_rule.hpp on values read
// back: the rule itself, the skipped update, the device-scaled conversion, and a net whose
// gradient scale lives in device memory giving the same gradients as one whose scale is on the
// host. The CUDA kernels are compared with these in tests/gpu/test_cuda_graph.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

struct Rule {
  Backend& b;
  Tensor found = b.alloc(Shape{1}, DType::I32), scale = b.alloc(Shape{2}), state = b.alloc(Shape{3}, DType::I32),
         tag = b.alloc(Shape{1}, DType::I32), nonfinite = b.alloc(Shape{1}, DType::I32);
  explicit Rule(Backend& backend, float start) : b(backend) {
    const float s[2] = {start, 1.0f / start};
    b.upload(s, scale);
  }
  // One step: returns {scale, inverse} and fills `st` with (clean, skipped, skip) and `flag`.
  std::vector<float> step(bool overflow, int32_t step_tag, int64_t growth, float max_scale, int32_t st[3],
                          int32_t& flag) {
    b.fill_i32(found, overflow ? 1 : 0);
    b.fill_i32(tag, step_tag);
    b.update_loss_scale(found, scale, state, tag, nonfinite, growth, max_scale);
    std::vector<float> s(2);
    b.download(scale, s.data());
    b.download(state, st);
    b.download(nonfinite, &flag);
    return s;
  }
};

TEST(LossScaleRule, HalvesAndSkipsOnOverflowGrowsAfterCleanStepsAndCapsAtTheMaximum) {
  auto backend = make_backend("cpu");
  Rule r(*backend, 65536.0f);
  int32_t st[3], flag = 0;
  std::vector<float> s = r.step(true, 1, 3, 1 << 24, st, flag);
  EXPECT_EQ(s, (std::vector<float>{32768.0f, 1.0f / 32768.0f}));
  EXPECT_EQ(st[0], 0);  // clean steps
  EXPECT_EQ(st[1], 1);  // skipped so far
  EXPECT_EQ(st[2], 1);  // this step skipped
  EXPECT_EQ(flag, 0);
  // Growth interval 3: two clean steps keep the scale, the third doubles it and restarts the count.
  s = r.step(false, 2, 3, 1 << 24, st, flag);
  EXPECT_EQ(s[0], 32768.0f);
  EXPECT_EQ(st[0], 1);
  EXPECT_EQ(st[2], 0);
  r.step(false, 3, 3, 1 << 24, st, flag);
  s = r.step(false, 4, 3, 1 << 24, st, flag);
  EXPECT_EQ(s, (std::vector<float>{65536.0f, 1.0f / 65536.0f}));
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 1);
  // An overflow resets the clean count; the maximum caps growth.
  r.step(false, 5, 2, 65536.0f * 1.5f, st, flag);
  s = r.step(false, 6, 2, 65536.0f * 1.5f, st, flag);
  EXPECT_EQ(s[0], 65536.0f * 1.5f);
  EXPECT_EQ(flag, 0);
}

TEST(LossScaleRule, OverflowWithNothingLeftToHalveIsDivergenceNotASkip) {
  auto backend = make_backend("cpu");
  Rule r(*backend, 1.0f);
  int32_t st[3], flag = 0;
  std::vector<float> s = r.step(true, 7, 2000, 1 << 24, st, flag);
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(st[1], 0);  // not counted as skipped
  EXPECT_EQ(st[2], 0);  // and not skipped: the divergence check ends the run
  EXPECT_EQ(flag, 7);
  r.step(true, 9, 2000, 1 << 24, st, flag);
  EXPECT_EQ(flag, 7) << "the first failing step's tag stays";
}

// The running loss sums and the kept last loss of fp16 runs: a skipped step's loss (here inf, as a
// forward overflow gives) is left out, the others are added with their weight; beta 0 assigns even
// over a NaN (nothing kept yet).
TEST(LossScaleRule, SkippedStepsLeaveTheLossSumAndTheKeptLossAlone) {
  auto backend = make_backend("cpu");
  Backend& b = *backend;
  Tensor loss = b.alloc(Shape{1}), sum = b.alloc(Shape{1}), kept = b.alloc(Shape{1}),
         skip = b.alloc(Shape{1}, DType::I32);
  auto value = [&](const Tensor& t) {
    float v = 0;
    b.download(t, &v);
    return v;
  };
  b.fill(sum, 1.5f);
  b.fill(kept, std::numeric_limits<float>::quiet_NaN());
  b.fill(loss, 2.0f);
  b.fill_i32(skip, 0);
  b.axpby_unless(0.25f, loss, 1.0f, sum, skip);
  b.axpby_unless(1.0f, loss, 0.0f, kept, skip);
  b.fill(loss, std::numeric_limits<float>::infinity());
  b.fill_i32(skip, 1);
  b.axpby_unless(0.25f, loss, 1.0f, sum, skip);
  b.axpby_unless(1.0f, loss, 0.0f, kept, skip);
  EXPECT_EQ(value(sum), 2.0f);  // 1.5 + 0.25 * 2, exact in binary
  EXPECT_EQ(value(kept), 2.0f);
  EXPECT_THROW(b.axpby_unless(1.0f, b.alloc(Shape{2}), 1.0f, sum, skip), Error);
}

TEST(LossScaleRule, SkippedUpdateLeavesWeightsAndHistory) {
  auto backend = make_backend("cpu");
  Backend& b = *backend;
  const int64_t n = 200;
  Tensor w = b.alloc(Shape{n}), dw = b.alloc(Shape{n}), h = b.alloc(Shape{n});
  std::vector<float> w0(n), g(n), h0(n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) w0[i] = u(rng), g[i] = u(rng), h0[i] = u(rng);
  Tensor ranges = b.alloc(Shape{2}, DType::I32), mults = b.alloc(Shape{2}), lr = b.alloc(Shape{1}),
         skip = b.alloc(Shape{1}, DType::I32);
  const int32_t r[2] = {0, static_cast<int32_t>(n)};
  const float m[2] = {1.0f, 1.0f};
  b.upload(r, ranges);
  b.upload(m, mults);
  b.fill(lr, 0.1f);
  auto run = [&](int32_t skip_value, bool with_skip) {
    b.upload(w0.data(), w);
    b.upload(g.data(), dw);
    b.upload(h0.data(), h);
    b.fill_i32(skip, skip_value);
    b.sgd_update_segments_at(w, dw, h, ranges, mults, lr, 0.9f, 1e-3f, with_skip ? skip : Tensor());
    std::vector<float> out(2 * n);
    b.download(w, out.data());
    b.download(h, out.data() + n);
    return out;
  };
  std::vector<float> before = w0;
  before.insert(before.end(), h0.begin(), h0.end());
  EXPECT_EQ(run(1, true), before);
  const std::vector<float> applied = run(0, true);
  EXPECT_EQ(applied, run(0, false));
  EXPECT_NE(applied, before);
}

TEST(LossScaleRule, DeviceScaledConversionScalesInPlaceAndAcrossDtypes) {
  auto backend = make_backend("cpu");
  Backend& b = *backend;
  Tensor x = b.alloc(Shape{5}), y = b.alloc(Shape{5}, DType::F16), s = b.alloc(Shape{2});
  const std::vector<float> v = {1.0f, -3.5f, 0.25f, 1e-3f, 7.0f};
  const float sc[2] = {8.0f, 0.125f};
  b.upload(v.data(), x);
  b.upload(sc, s);
  b.convert_scaled_at(x, y, s.view(0, Shape{1}));
  b.convert_scaled_at(y, x, s.view(1, Shape{1}));  // back, unscaled
  std::vector<float> got(5);
  b.download(x, got.data());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], round_to(DType::F16, v[i])) << i;
  b.convert_scaled_at(x, x, s.view(0, Shape{1}));  // in place
  b.download(x, got.data());
  EXPECT_EQ(got[1], 8.0f * -3.5f);
}

const char* kScaledNet = R"(name: scaled
input: {shape: [2, 8, 8], classes: 5}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3, weight_filler: {type: xavier}}
  - {name: bn1, type: BatchNorm, bottom: conv1, top: bn1}
  - {name: relu1, type: ReLU, bottom: bn1, top: relu1}
  - {name: fc1, type: InnerProduct, bottom: relu1, top: fc1, num_output: 5, weight_filler: {type: xavier}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc1, label], top: loss}
)";

// The loss gradient times 2^10 and every parameter gradient (batch norm's included) divided by it
// again, once with the scale on the host and once read from device memory: powers of two scale
// exactly, so both give the unscaled gradients' bits (a scale not applied at all would too, hence
// the third net, whose device scale is never divided out, as the control).
TEST(LossScale, ADeviceScaleScalesAsTheHostScaleDoes) {
  auto backend = make_backend("cpu");
  Backend& b = *backend;
  NetSpec spec = NetSpec::load_string(kScaledNet, "scaled.yaml");
  Net plain(spec, b, 4, 3), host(spec, b, 4, 3), device(spec, b, 4, 3);
  host.set_grad_scale(1024.0);
  Tensor scale = b.alloc(Shape{2});
  const float sc[2] = {1024.0f, 1.0f / 1024.0f};
  b.upload(sc, scale);
  device.set_grad_scale_on_device(scale);
  EXPECT_THROW(device.set_grad_scale(2.0), Error);  // one scale at a time
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> data(static_cast<size_t>(plain.input().numel()));
  for (float& v : data) v = normal(rng);
  const std::vector<int32_t> labels = {0, 3, 1, 4};
  std::vector<std::vector<float>> grads;
  for (Net* n : {&plain, &host, &device}) {
    b.upload(data.data(), n->input());
    b.upload(labels.data(), n->labels());
    n->forward(Phase::Train, 0);
    n->backward(0);
    const float* g = n->flat_grads().f32();
    grads.emplace_back(g, g + n->flat_grads().numel());
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(grads[0], grads[2]);
  // Control: the device scale is really applied (left in, the gradients are 1024 times larger).
  const float keep[2] = {1024.0f, 1.0f};
  b.upload(keep, scale);
  device.forward(Phase::Train, 0);
  device.backward(0);
  int64_t scaled = 0, nonzero = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    nonzero += grads[0][i] != 0.0f;
    scaled += grads[0][i] != 0.0f && device.flat_grads().f32()[i] == 1024.0f * grads[0][i];
  }
  EXPECT_GT(nonzero, static_cast<int64_t>(grads[0].size()) / 2);
  EXPECT_EQ(scaled, nonzero);
}

}  // namespace
}  // namespace cnnscale
