// Nets built for inference (NetUse::Inference, as `cnnscale infer` builds them): the same test-phase
// scores as a training net, bit for bit, without any activation gradient buffer (so less memory, by
// at least the largest activation's gradient), and a clear refusal of backward and of training-phase
// forwards.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/layer_harness.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

using testing::fill_uniform;
using testing::to_host;

// Batch norm (running statistics in the test phase), a residual sum read by two layers, dropout,
// pooling and an inner product: every kind of blob a training net keeps a gradient for.
const char* kInferNet = R"(name: infer_net
input: {shape: [3, 12, 12], classes: 5}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 8, kernel: 3, pad: 1, weight_filler: {type: msra}}
  - {name: bn1, type: BatchNorm, bottom: conv1, top: bn1}
  - {name: relu1, type: ReLU, bottom: bn1, top: relu1}
  - {name: conv2, type: Convolution, bottom: relu1, top: conv2, num_output: 8, kernel: 3, pad: 1, weight_filler: {type: msra}}
  - {name: sum, type: Eltwise, bottom: [conv2, relu1], top: sum}
  - {name: pool, type: Pooling, bottom: sum, top: pool, pool: max, kernel: 2, stride: 2}
  - {name: drop, type: Dropout, bottom: pool, top: drop, ratio: 0.3}
  - {name: fc, type: InnerProduct, bottom: drop, top: fc, num_output: 5, weight_filler: {type: xavier}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";

struct Built {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Net> net;
  int64_t bytes = 0;  // what building the net allocated, by the backend's own count
};

Built build(NetUse use) {
  Built b;
  b.backend = make_backend("cpu");
  const int64_t before = b.backend->memory_stats().current_bytes;
  static const NetSpec spec = NetSpec::load_string(kInferNet, "infer_net.yaml");
  b.net = std::make_unique<Net>(spec, *b.backend, 8, 5, DType::F32, use);
  b.bytes = b.backend->memory_stats().current_bytes - before;
  fill_uniform(*b.backend, b.net->input(), 11, -1, 1);
  b.backend->fill(b.net->labels(), 2.0f);
  return b;
}

TEST(NetInference, SameScoresAsATrainingNetWithoutGradientBuffers) {
  Built train = build(NetUse::Training), infer = build(NetUse::Inference);
  EXPECT_EQ(train.net->use(), NetUse::Training);
  EXPECT_EQ(infer.net->use(), NetUse::Inference);
  train.net->forward(Phase::Test, 0);
  infer.net->forward(Phase::Test, 0);
  const std::vector<float> a = to_host(*train.backend, train.net->blob("fc")),
                           b = to_host(*infer.backend, infer.net->blob("fc"));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(to_host(*train.backend, train.net->loss()), to_host(*infer.backend, infer.net->loss()));
  // conv1's output (8 x 8 x 12 x 12 floats) is the largest activation: a training net holds its
  // gradient too, an inference net no gradient at all.
  const int64_t conv1_bytes = 8 * 8 * 12 * 12 * static_cast<int64_t>(sizeof(float));
  EXPECT_LE(infer.bytes, train.bytes - conv1_bytes) << "training " << train.bytes << " B, inference " << infer.bytes;
}

TEST(NetInference, BackwardAndTrainingForwardsAreRefused) {
  Built infer = build(NetUse::Inference);
  try {
    infer.net->backward(0);
    FAIL() << "backward ran on an inference net";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("built for inference"), std::string::npos) << e.what();
  }
  try {
    infer.net->forward(Phase::Train, 0);
    FAIL() << "a training-phase forward ran on an inference net";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("test-phase forwards only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cnnscale
