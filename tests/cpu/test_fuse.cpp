// Batch-norm epilogue fusion (net/fuse.hpp) on the CPU backend: which layers fuse and how the spec
// is rewired (the small residual network of the folding tests, which holds a BatchNorm that must
// stay, and the shipped ResNets), and that the fused network trains to the same bits as the
// network as written: loss, gradients and parameters after SGD steps, and test-phase scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/layer_harness.hpp"
#include "common/net_batch.hpp"
#include "net/fuse.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

std::string fuse_test_network(const std::string& name) { return std::string(CNNSCALE_TEST_DATA) + "/" + name; }
std::string fuse_shipped_network(const std::string& name) {
  return std::string(CNNSCALE_SOURCE_DIR) + "/networks/" + name + ".yaml";
}

using testing::to_host;

int count_layers_of(const NetSpec& spec, const std::string& type) {
  return static_cast<int>(
      std::count_if(spec.layers().begin(), spec.layers().end(), [&](const LayerInfo& l) { return l.type == type; }));
}

std::vector<std::string> names(const NetSpec& spec) {
  std::vector<std::string> out;
  for (const LayerInfo& l : spec.layers()) out.push_back(l.name);
  return out;
}

TEST(FuseBatchNormEpilogues, SmallResNetFusesEveryReluAndResidualSumAfterABatchNorm) {
  NetSpec spec = NetSpec::load(fuse_test_network("fold_small_resnet.yaml"));
  FusedSpec f = fuse_epilogues(spec);
  // bn_pool's output is read by a convolution: it stays as it is.
  EXPECT_EQ(names(f.spec), (std::vector<std::string>{"conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "pool1",
                                                      "bn_pool", "conv4", "bn4", "fc1", "bn_fc", "fc2", "loss",
                                                      "accuracy"}));
  ASSERT_EQ(f.fused.size(), 5u);
  EXPECT_EQ(f.fused[2].layer, "bn3");
  EXPECT_EQ(f.fused[2].absorbed, (std::vector<std::string>{"sum1", "relu3"}));
  EXPECT_EQ(f.fused[0].absorbed, (std::vector<std::string>{"relu1"}));
  // The fused layers produce the blobs the absorbed ReLUs produced, so every later layer reads
  // what it read before; a residual one takes the sum's other bottom as its addend.
  const std::string yaml = f.spec.resolved_yaml();
  EXPECT_NE(yaml.find("bottom: [conv3, relu1]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("bottom: [conv4, conv4]"), std::string::npos) << yaml;
  EXPECT_EQ(count_layers_of(f.spec, "ReLU"), 0);
  EXPECT_EQ(count_layers_of(f.spec, "Eltwise"), 0);
}

TEST(FuseBatchNormEpilogues, ShippedResNetsLoseEveryReluAndSum) {
  for (const char* net : {"resnet34", "resnet_gait", "resnet_fmnist", "resnet50"}) {
    SCOPED_TRACE(net);
    NetSpec spec = NetSpec::load(fuse_shipped_network(net));
    FusedSpec f = fuse_epilogues(spec);
    const int relus = count_layers_of(spec, "ReLU"), sums = count_layers_of(spec, "Eltwise");
    EXPECT_EQ(f.fused.size(), static_cast<size_t>(relus));  // every ReLU follows a BatchNorm or a sum of one
    EXPECT_EQ(count_layers_of(f.spec, "ReLU"), 0);
    EXPECT_EQ(count_layers_of(f.spec, "Eltwise"), 0);
    EXPECT_EQ(f.spec.layers().size(), spec.layers().size() - static_cast<size_t>(relus + sums));
    EXPECT_EQ(count_layers_of(f.spec, "BatchNorm"), count_layers_of(spec, "BatchNorm"));
  }
}

TEST(FuseBatchNormEpilogues, AResidualBatchNormMovesOnlyPastALaterAddend) {
  NetSpec spec = NetSpec::load(fuse_shipped_network("resnet34"));
  const std::vector<std::string> fused = names(fuse_epilogues(spec).spec);
  auto at = [&](const std::string& name) { return std::find(fused.begin(), fused.end(), name) - fused.begin(); };
  // Identity shortcut: the addend exists already, the BatchNorm stays right after its convolution.
  EXPECT_EQ(at("res2_1_bn2"), at("res2_1_conv2") + 1);
  // Projection shortcut, listed after bn2: the fused bn2 follows the projection's BatchNorm.
  EXPECT_GT(at("res3_1_bn2"), at("res3_1_proj_bn"));
}

void feed_half(Net& net, int64_t classes, uint64_t seed) { testing::feed_random_batch(net, classes, seed, 0.5f); }

// The network as written and fused, from the same weights on the same batches, through three SGD
// steps: loss, gradients and weights bit-identical after each.
void expect_same_training(Backend& backend, Net& plain, Net& fused, int64_t classes) {
  ASSERT_EQ(to_host(backend, plain.flat_params()), to_host(backend, fused.flat_params()));
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    for (Net* n : {&plain, &fused}) {
      feed_half(*n, classes, 100 + static_cast<uint64_t>(step));
      n->forward(Phase::Train, static_cast<uint64_t>(step));
      n->backward(static_cast<uint64_t>(step));
    }
    EXPECT_EQ(to_host(backend, plain.loss()), to_host(backend, fused.loss()));
    EXPECT_EQ(to_host(backend, plain.flat_grads()), to_host(backend, fused.flat_grads()));
    for (Net* n : {&plain, &fused}) backend.axpby(-0.05f, n->flat_grads(), 1.0f, n->flat_params());
  }
  EXPECT_EQ(to_host(backend, plain.flat_params()), to_host(backend, fused.flat_params()));
}

TEST(FuseConvolutionEpilogues, AConvolutionTakesTheReluThatAloneReadsIt) {
  NetSpec spec = NetSpec::load(fuse_test_network("fuse_small_convnet.yaml"));
  FusedSpec f = fuse_epilogues(spec);
  // conv3's output is also read by the sum: it and relu3 stay as written.
  EXPECT_EQ(names(f.spec), (std::vector<std::string>{"conv1", "pool1", "conv2", "conv3", "relu3", "sum1", "conv4",
                                                     "fc0", "fc1", "loss", "accuracy"}));
  ASSERT_EQ(f.fused.size(), 4u);
  EXPECT_EQ(f.fused[0].layer, "conv1");
  EXPECT_EQ(f.fused[0].absorbed, (std::vector<std::string>{"relu1"}));
  EXPECT_EQ(f.fused[1].layer, "conv2");  // without a bias: convolution and ReLU
  EXPECT_EQ(f.fused[2].layer, "conv4");  // the sum and its ReLU, relu2 the addend
  EXPECT_EQ(f.fused[2].absorbed, (std::vector<std::string>{"sum2", "relu4"}));
  EXPECT_EQ(f.fused[3].layer, "fc0");  // a fully connected layer takes its ReLU alone
  EXPECT_EQ(f.fused[3].absorbed, (std::vector<std::string>{"relu_fc0"}));
  const std::string yaml = f.spec.resolved_yaml();
  EXPECT_NE(yaml.find("top: relu1"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("bottom: relu1"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("bottom: [sum1, relu2]"), std::string::npos) << yaml;
  EXPECT_EQ(count_layers_of(f.spec, "Eltwise"), 1);  // sum1 stays
}

// A convolution without a bias keeps a following sum as written (only its ReLU would fuse, and
// here the sum reads it, not a ReLU).
TEST(FuseConvolutionEpilogues, AResidualSumNeedsTheConvolutionsBias) {
  const std::string yaml = R"(name: no_bias_residual
input: {shape: [4, 5, 5], classes: 3}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3, pad: 1, bias: false}
  - {name: sum1, type: Eltwise, bottom: [conv1, data], top: sum1}
  - {name: relu1, type: ReLU, bottom: sum1, top: relu1}
  - {name: fc, type: InnerProduct, bottom: relu1, top: fc, num_output: "${classes}"}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";
  const FusedSpec f = fuse_epilogues(NetSpec::load_string(yaml, "no_bias_residual"));
  EXPECT_TRUE(f.fused.empty());
  EXPECT_EQ(count_layers_of(f.spec, "Eltwise"), 1);
}

TEST(FuseConvolutionEpilogues, ShippedAlexNetStyleNetworksLoseEveryRelu) {
  // Every ReLU of these networks follows a convolution or a fully-connected layer, alone reading
  // its output: every one fuses, and no layer but the ReLUs disappears.
  for (const auto& [net, convs] : {std::pair{"caffenet", 5}, {"cnn2d_gait", 4}, {"alexnet", 5}}) {
    SCOPED_TRACE(net);
    NetSpec spec = NetSpec::load(fuse_shipped_network(net));
    FusedSpec f = fuse_epilogues(spec);
    EXPECT_GT(count_layers_of(spec, "ReLU"), convs);  // some follow fully connected layers
    EXPECT_EQ(f.fused.size(), static_cast<size_t>(count_layers_of(spec, "ReLU")));
    EXPECT_EQ(count_layers_of(f.spec, "ReLU"), 0);
    EXPECT_EQ(count_layers_of(f.spec, "Convolution"), convs);
    EXPECT_EQ(count_layers_of(f.spec, "InnerProduct"), count_layers_of(spec, "InnerProduct"));
  }
}

// Convolution, bias (addend) and ReLU in one layer run the same CPU ops as the layers apart (the
// ReLU's backward gating the convolution's top gradient in place, the addend's gradient a copy of
// it as the sum's backward writes it): bit-identical, with and without bias.
TEST(FuseConvolutionEpilogues, FusedNetworkTrainsToTheSameBits) {
  NetSpec spec = NetSpec::load(fuse_test_network("fuse_small_convnet.yaml"));
  FusedSpec f = fuse_epilogues(spec);
  ASSERT_EQ(f.fused.size(), 4u);
  auto backend = make_backend("cpu");
  Net plain(spec, *backend, 8, 5), fused(f.spec, *backend, 8, 5);
  expect_same_training(*backend, plain, fused, spec.classes());
}

// The fused BatchNorm rounds bn(x), bn(x) + z and max(0, .) to float exactly as the BatchNorm,
// Eltwise and ReLU layers do, and gates the gradient as ReLU's backward does: bit-identical.
TEST(FuseBatchNormEpilogues, FusedNetworkTrainsToTheSameBits) {
  NetSpec spec = NetSpec::load(fuse_test_network("fold_small_resnet.yaml"));
  FusedSpec f = fuse_epilogues(spec);
  auto backend = make_backend("cpu");
  Net plain(spec, *backend, 8, 5), fused(f.spec, *backend, 8, 5);
  expect_same_training(*backend, plain, fused, spec.classes());
  for (Net* n : {&plain, &fused}) {
    feed_half(*n, spec.classes(), 999);
    n->forward(Phase::Test, 3);
  }
  EXPECT_EQ(to_host(*backend, plain.blob("fc2")), to_host(*backend, fused.blob("fc2")));
}

}  // namespace
}  // namespace cnnscale
