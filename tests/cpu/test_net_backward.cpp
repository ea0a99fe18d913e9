// Whole-net checks on the CPU backend: finite-difference gradients of the loss w.r.t. every
// parameter (exercising the summed diffs of blobs with several consumers, the flat buffers, loss
// weights and block expansion), the flat buffer layout and initialisation order, skipped
// backward passes, phases, reshape and state.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/net_batch.hpp"
#include "layers/filler.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

const std::string kHead = "name: small\ninput: {shape: [2, 5, 5], classes: 3}\n";
const std::string kFill =
    "weight_filler: {type: gaussian, std: 0.4}, bias_filler: {type: gaussian, std: 0.2}";

// conv -> relu -> three consumers of relu1 (two convs and the sum itself) -> fc -> loss.
const std::string kEltwiseNet = kHead + "layers:\n" +
    "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 3, kernel: 3, pad: 1, " + kFill + "}\n" +
    "  - {name: relu1, type: ReLU, bottom: conv1, top: relu1}\n" +
    "  - {name: a, type: Convolution, bottom: relu1, top: a, num_output: 3, kernel: 3, pad: 1, " + kFill + "}\n" +
    "  - {name: b, type: Convolution, bottom: relu1, top: b, num_output: 3, kernel: 1, " + kFill + "}\n" +
    "  - {name: sum, type: Eltwise, bottom: [a, b, relu1], top: sum}\n" +
    "  - {name: fc, type: InnerProduct, bottom: sum, top: fc, num_output: 3, " + kFill + "}\n" +
    "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n";

// The same branches joined by Concat (relu1 again read three times).
const std::string kConcatNet = kHead + "layers:\n" +
    "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 3, kernel: 3, pad: 1, " + kFill + "}\n" +
    "  - {name: relu1, type: ReLU, bottom: conv1, top: relu1}\n" +
    "  - {name: a, type: Convolution, bottom: relu1, top: a, num_output: 2, kernel: 3, pad: 1, " + kFill + "}\n" +
    "  - {name: b, type: Convolution, bottom: relu1, top: b, num_output: 4, kernel: 1, " + kFill + "}\n" +
    "  - {name: cat, type: Concat, bottom: [a, relu1, b], top: cat}\n" +
    "  - {name: fc, type: InnerProduct, bottom: cat, top: fc, num_output: 3, " + kFill + "}\n" +
    "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n";

// Two weighted losses on two heads of one blob: Net::loss() = 0.5 l1 + 2 l2.
const std::string kTwoLossNet = kHead + "layers:\n" +
    "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 3, kernel: 3, " + kFill + "}\n" +
    "  - {name: relu1, type: ReLU, bottom: conv1, top: relu1}\n" +
    "  - {name: fc1, type: InnerProduct, bottom: relu1, top: fc1, num_output: 3, " + kFill + "}\n" +
    "  - {name: fc2, type: InnerProduct, bottom: relu1, top: fc2, num_output: 3, " + kFill + "}\n" +
    "  - {name: loss1, type: SoftmaxWithLoss, bottom: [fc1, label], top: loss1, loss_weight: 0.5}\n" +
    "  - {name: loss2, type: SoftmaxWithLoss, bottom: [fc2, label], top: loss2, loss_weight: 2}\n";

// Residual blocks with batch norm, built by repeat: checks expansion end to end.
const std::string kBlockNet = kHead +
    "blocks:\n"
    "  res:\n"
    "    params: {filters: 2}\n"
    "    output: out\n"
    "    layers:\n"
    "      - {name: conv, type: Convolution, bottom: \"${in}\", top: conv, num_output: \"${filters}\", kernel: 3, "
    "pad: 1, bias: false, weight_filler: {type: gaussian, std: 0.4}}\n"
    "      - {name: bn, type: BatchNorm, bottom: conv, top: bn, "
    "scale_filler: {type: uniform, min: 0.5, max: 1.5}, shift_filler: {type: gaussian, std: 0.3}}\n"
    "      - {name: sum, type: Eltwise, bottom: [bn, \"${in}\"], top: sum}\n"
    "      - {name: relu, type: ReLU, bottom: sum, top: out}\n"
    "layers:\n"
    "  - repeat: {block: res, times: 2, prefix: stage, input: data}\n"
    "  - {name: fc, type: InnerProduct, bottom: stage, top: fc, num_output: \"${classes}\", " + kFill + "}\n"
    "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n";

std::vector<float> download_all(Backend& backend, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.download(t, out.data());
  return out;
}

void random_inputs(Net& net, int64_t classes, uint64_t seed) { testing::feed_random_batch(net, classes, seed); }

float train_loss(Net& net) {
  net.forward(Phase::Train, 7);
  float loss = 0;
  net.backend().download(net.loss(), &loss);
  return loss;
}

// Central differences on every parameter element against the backward pass. A ReLU unit whose
// input lies within the step of zero makes the loss non-smooth there: such elements are detected
// by one-sided differences that disagree (a smooth loss gives nearly equal slopes on both sides)
// and skipped, but at most a few percent of them.
void check_gradients(Net& net) {
  Backend& be = net.backend();
  const double loss0 = train_loss(net);
  net.backward(7);
  const std::vector<float> analytic = download_all(be, net.flat_grads());
  // Backward overwrites gradients: a second pass gives the same values, not twice them.
  net.backward(7);
  EXPECT_EQ(download_all(be, net.flat_grads()), analytic);

  const Tensor& flat = net.flat_params();
  const float eps = 1e-3f;
  double err_sum = 0, ref_sum = 0;
  int checked = 0, kinks = 0;
  for (Param* p : net.params()) {
    const int64_t base = static_cast<int64_t>((p->data.offset_bytes() - flat.offset_bytes()) / sizeof(float));
    for (int64_t i = 0; i < p->data.numel(); ++i) {
      Tensor element = flat.view(base + i, Shape({1}));
      float original = 0;
      be.download(element, &original);
      float plus = original + eps, minus = original - eps;
      be.upload(&plus, element);
      const double loss_plus = train_loss(net);
      be.upload(&minus, element);
      const double loss_minus = train_loss(net);
      be.upload(&original, element);
      const double right = (loss_plus - loss0) / eps, left = (loss0 - loss_minus) / eps;
      if (std::abs(right - left) > 2e-3 + 0.1 * std::max(std::abs(right), std::abs(left))) {
        ++kinks;
        continue;
      }
      const double numeric = (loss_plus - loss_minus) / (2.0 * eps);
      const double a = analytic[static_cast<size_t>(base + i)];
      // float32 losses of order 1 carry ~1e-7 relative rounding: ~1e-4 in a difference quotient.
      EXPECT_NEAR(a, numeric, 1e-3 + 2e-2 * std::max(std::abs(a), std::abs(numeric)))
          << p->spec.name << "[" << i << "] at flat offset " << base + i;
      err_sum += std::abs(a - numeric);
      ref_sum += std::abs(numeric);
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  EXPECT_LE(kinks, checked / 20) << "too many non-smooth points skipped";
  EXPECT_LT(err_sum / ref_sum, 5e-3) << "aggregate relative gradient error";
}

class NetGradients : public ::testing::TestWithParam<std::pair<const char*, const std::string*>> {};

TEST_P(NetGradients, FiniteDifferencesMatchBackward) {
  NetSpec spec = NetSpec::load_string(*GetParam().second, "small.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 11);
  random_inputs(net, spec.classes(), 5);
  check_gradients(net);
}

INSTANTIATE_TEST_SUITE_P(Small, NetGradients,
                         ::testing::Values(std::make_pair("eltwise", &kEltwiseNet), std::make_pair("concat", &kConcatNet),
                                           std::make_pair("two_losses", &kTwoLossNet),
                                           std::make_pair("blocks", &kBlockNet)),
                         [](const auto& info) { return std::string(info.param.first); });

TEST(NetBackward, GradientsAfterReshape) {
  NetSpec spec = NetSpec::load_string(kEltwiseNet, "small.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 11);
  const std::vector<float> before = download_all(*backend, net.flat_params());
  net.reshape(3);
  EXPECT_EQ(net.batch(), 3);
  EXPECT_EQ(net.input().shape(), Shape({3, 2, 5, 5}));
  EXPECT_EQ(net.labels().shape(), Shape({3}));
  EXPECT_EQ(net.blob("fc").shape(), Shape({3, 3}));
  EXPECT_EQ(download_all(*backend, net.flat_params()), before) << "reshape must not touch parameters";
  random_inputs(net, spec.classes(), 6);
  check_gradients(net);
}

// A blob's consumers after the first in backward order add to its one gradient where they can (the
// convolutions); the finite-difference test above checks the sums, this that the plan took them.
TEST(NetBackward, LaterConvolutionsAddToTheFirstConsumersGradient) {
  auto backend = make_backend("cpu");
  auto adding = [&](const std::string& yaml) {
    Net net(NetSpec::load_string(yaml, "small.yaml"), *backend, 2, 1);
    std::vector<std::string> out;
    for (Layer* l : net.layers())
      for (size_t i = 0; i < l->bottoms().size(); ++i)
        if (l->adds_bottom_diff(i)) out.push_back(l->name() + "/" + std::to_string(i));
    return out;
  };
  // relu1 is read by a, b and sum: sum runs first in backward and writes; b, then a, add.
  EXPECT_EQ(adding(kEltwiseNet), (std::vector<std::string>{"a/0", "b/0"}));
  // Concat writes (it runs first); the convolutions on either side of it add.
  EXPECT_EQ(adding(kConcatNet), (std::vector<std::string>{"a/0", "b/0"}));
  // A residual block: the sum reads the block input last and writes; the block's convolution adds
  // (the first block's input is the data, which needs no gradient).
  EXPECT_EQ(adding(kBlockNet), (std::vector<std::string>{"stage_2_conv/0"}));
  // Inner products cannot add: both heads keep buffers of their own, summed as before.
  EXPECT_TRUE(adding(kTwoLossNet).empty());
  // `time` says which convolutions add, after a step has run them.
  Net net(NetSpec::load_string(kEltwiseNet, "small.yaml"), *backend, 2, 1);
  random_inputs(net, 3, 2);
  train_loss(net);
  net.backward(7);
  for (Layer* l : net.layers())
    if (l->type() == "Convolution")
      EXPECT_EQ(l->implementation(*backend).find("adding to its input's gradient") != std::string::npos,
                l->name() == "a" || l->name() == "b")
          << l->name() << ": " << l->implementation(*backend);
}

TEST(NetBackward, WeightedLossesAreSummed) {
  NetSpec spec = NetSpec::load_string(kTwoLossNet, "small.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 3);
  random_inputs(net, spec.classes(), 4);
  const float total = train_loss(net);
  float l1 = 0, l2 = 0;
  backend->download(net.blob("loss1"), &l1);
  backend->download(net.blob("loss2"), &l2);
  EXPECT_GT(l1, 0.0f);
  EXPECT_NEAR(total, 0.5f * l1 + 2.0f * l2, 1e-6f * (1.0f + std::abs(total)));
}

TEST(NetLayout, FlatBuffersPutLateLayersFirst) {
  NetSpec spec = NetSpec::load_string(kEltwiseNet, "small.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 11);
  std::vector<Param*> params = net.params();
  // Network order: conv1, a, b, fc, each weight then bias.
  ASSERT_EQ(params.size(), 8u);
  const std::vector<Shape> shapes = {Shape({3, 2, 3, 3}), Shape({3}), Shape({3, 3, 3, 3}), Shape({3}),
                                     Shape({3, 3, 1, 1}), Shape({3}), Shape({3, 75}),      Shape({3})};
  std::vector<int64_t> offsets;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = *params[i];
    EXPECT_EQ(p.data.shape(), shapes[i]) << i;
    EXPECT_EQ(p.spec.name, i % 2 ? "bias" : "weight");
    EXPECT_EQ(p.data.storage(), net.flat_params().storage());
    EXPECT_EQ(p.diff.storage(), net.flat_grads().storage());
    EXPECT_EQ(p.data.offset_bytes(), p.diff.offset_bytes()) << "same offsets in both buffers";
    const int64_t off = static_cast<int64_t>(p.data.offset_bytes() / sizeof(float));
    EXPECT_EQ(off % 64, 0) << "256-byte aligned";
    offsets.push_back(off);
  }
  // The last layer (fc) starts the buffer; earlier layers follow in reverse network order;
  // within a layer, weight before bias; padding between parameters is under 64 elements.
  EXPECT_EQ(offsets[6], 0);
  EXPECT_EQ(offsets[7], 256);           // fc.weight has 225 elements
  EXPECT_EQ(offsets[4], 256 + 64);      // b.weight after fc.bias (3 elements)
  EXPECT_EQ(offsets[5], 256 + 64 + 64);
  EXPECT_EQ(offsets[2], 256 + 64 + 64 + 64);  // a.weight (81 elements) then a.bias
  EXPECT_EQ(offsets[3], 256 + 64 + 64 + 64 + 128);
  EXPECT_EQ(offsets[0], offsets[3] + 64);  // conv1.weight (54 elements) then conv1.bias
  EXPECT_EQ(offsets[1], offsets[0] + 64);
  EXPECT_EQ(net.flat_params().numel(), offsets[1] + 3);
  EXPECT_EQ(net.flat_grads().numel(), net.flat_params().numel());
  EXPECT_EQ(spec.total_params(), 57 + 84 + 12 + 228);
}

TEST(NetLayout, InitialisedInNetworkOrderFromTheSeed) {
  NetSpec spec = NetSpec::load_string(kEltwiseNet, "small.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 42);
  // The first parameter in network order (conv1.weight) takes the generator's first draws.
  const Param& first = *net.params()[0];
  std::mt19937_64 rng(42);
  std::vector<float> expected(static_cast<size_t>(first.data.numel()));
  fill_param(first.spec, rng, expected.data());
  EXPECT_EQ(download_all(*backend, first.data), expected);

  Net same(spec, *backend, 4, 42), other(spec, *backend, 2, 43);
  EXPECT_EQ(download_all(*backend, same.flat_params()), download_all(*backend, net.flat_params()));
  EXPECT_NE(download_all(*backend, other.flat_params()), download_all(*backend, net.flat_params()));
  // Gradients start at zero, padding included.
  for (float g : download_all(*backend, net.flat_grads())) ASSERT_EQ(g, 0.0f);
}

// A ReLU that counts its backward calls, to see which layers the net skips.
int g_probe_backward_calls = 0;
class ProbeLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override { return {bottoms.at(0)}; }
  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    ctx.backend.relu_forward(bottom[0], top[0]);
  }
  void backward(LayerContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    ++g_probe_backward_calls;
    if (propagate[0]) ctx.backend.relu_backward(top[0], top_diff[0], bottom_diff[0]);
  }
};

TEST(NetBackward, SkipsLayersThatNeedNoGradient) {
  register_layer(
      "TestProbe", [](LayerConfig c) -> std::unique_ptr<Layer> { return std::make_unique<ProbeLayer>(std::move(c)); },
      {});
  const std::string text = kHead + "layers:\n" +
      "  - {name: probe0, type: TestProbe, bottom: data, top: p0}\n" +
      "  - {name: conv1, type: Convolution, bottom: p0, top: conv1, num_output: 2, kernel: 3, " + kFill + "}\n" +
      "  - {name: probe1, type: TestProbe, bottom: conv1, top: p1}\n" +
      "  - {name: fc, type: InnerProduct, bottom: p1, top: fc, num_output: 3, " + kFill + "}\n" +
      "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n" +
      "  - {name: acc, type: Accuracy, bottom: [fc, label], top: [top1, top2], top_k: [1, 2], phase: test}\n";
  NetSpec spec = NetSpec::load_string(text, "probe.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 1);
  random_inputs(net, spec.classes(), 2);
  g_probe_backward_calls = 0;
  train_loss(net);
  net.backward(0);
  // probe0 reads `data` and has no parameters: skipped. probe1 feeds conv1's gradient: runs.
  // Accuracy (test phase, no backward) is skipped too, or it would throw.
  EXPECT_EQ(g_probe_backward_calls, 1);

  // Accuracy runs only in the test phase.
  float top1 = -1;
  backend->download(net.blob("top1"), &top1);
  EXPECT_EQ(top1, 0.0f) << "untouched by a train-phase forward";
  net.forward(Phase::Test, 0);
  float top2 = -1;
  backend->download(net.blob("top1"), &top1);
  backend->download(net.blob("top2"), &top2);
  EXPECT_TRUE(top1 == 0.0f || top1 == 0.5f || top1 == 1.0f) << top1;
  EXPECT_GE(top2, top1);
  EXPECT_EQ(net.accuracy_outputs(), (std::vector<std::string>{"top1", "top2"}));
  EXPECT_TRUE(net.has_blob("p0"));
  EXPECT_FALSE(net.has_blob("p9"));
  EXPECT_THROW(net.blob("p9"), ConfigError);
}

// forward's after_copies comes once per forward, before any layer's after_layer: per-layer timing
// starts the first layer there.
TEST(NetForward, CopiesHookComesBeforeTheFirstLayer) {
  NetSpec spec = NetSpec::load_string(kEltwiseNet, "eltwise.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 1);
  random_inputs(net, spec.classes(), 2);
  std::vector<std::string> calls;
  for (int pass = 0; pass < 2; ++pass)
    net.forward(
        Phase::Train, static_cast<uint64_t>(pass), [&](size_t l) { calls.push_back(std::to_string(l)); },
        [&] { calls.push_back("copies"); });
  const size_t per_pass = calls.size() / 2;
  ASSERT_EQ(calls.size(), 2 * per_pass);
  ASSERT_EQ(per_pass, net.layers().size() + 1);  // every layer runs in the train phase here
  for (size_t pass = 0; pass < 2; ++pass) {
    EXPECT_EQ(calls[pass * per_pass], "copies");
    for (size_t l = 0; l + 1 < per_pass; ++l) EXPECT_EQ(calls[pass * per_pass + 1 + l], std::to_string(l));
  }
}

TEST(NetState, BatchNormRunningStatistics) {
  NetSpec spec = NetSpec::load_string(kBlockNet, "small.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 1);
  auto state = net.state();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].first, "stage_1_bn/running_mean");
  EXPECT_EQ(state[1].first, "stage_1_bn/running_var");
  EXPECT_EQ(state[3].first, "stage_2_bn/running_var");
  EXPECT_EQ(download_all(*backend, state[0].second), std::vector<float>(2, 0.0f));
  EXPECT_EQ(download_all(*backend, state[1].second), std::vector<float>(2, 1.0f));
  random_inputs(net, spec.classes(), 3);
  train_loss(net);
  EXPECT_NE(download_all(*backend, state[0].second), std::vector<float>(2, 0.0f)) << "train forward updates them";
}

}  // namespace
}  // namespace cnnscale
