// Batch-norm folding (net/fold.hpp) on the CPU backend: which BatchNorms fold and how the spec is
// rewired (a small residual network with every case, and the shipped ResNets), and that a folded
// net loaded from a trained one computes the same class scores within a bound from fp32 rounding,
// while folds that omit eps or the running mean land far outside that bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "common/net_batch.hpp"
#include "net/fold.hpp"
#include "net/fuse.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

constexpr int64_t kBatch = 8;

std::string test_network(const std::string& name) {
  return std::string(CNNSCALE_TEST_DATA) + "/" + name;
}
std::string shipped_network(const std::string& name) {
  return std::string(CNNSCALE_SOURCE_DIR) + "/networks/" + name + ".yaml";
}

std::vector<float> host_copy(Backend& backend, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.download(t, out.data());
  return out;
}

void from_host(Backend& backend, const std::vector<float>& values, const Tensor& t) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
  backend.upload(values.data(), t);
  backend.synchronize();
}

const Layer& layer_named(const Net& net, const std::string& name) {
  for (const Layer* l : net.layers())
    if (l->name() == name) return *l;
  throw std::runtime_error("no layer " + name);
}

int count_type(const NetSpec& spec, const std::string& type) {
  return static_cast<int>(
      std::count_if(spec.layers().begin(), spec.layers().end(), [&](const LayerInfo& l) { return l.type == type; }));
}

// A batch of images with a mean of 1, as unnormalised pixels have, so that convolution outputs have
// non-zero means and a fold that forgets the running mean shows; random labels.
void feed(Net& net, int64_t classes, uint64_t seed) { testing::feed_random_batch(net, classes, seed, 1.0f); }

// Plain SGD on fresh batches: the weights move away from their fillers and every BatchNorm's
// running statistics move from (0, 1) toward the batches' statistics.
void train(Net& net, int64_t classes, int steps) {
  for (int i = 0; i < steps; ++i) {
    feed(net, classes, 100 + static_cast<uint64_t>(i));
    net.forward(Phase::Train, static_cast<uint64_t>(i));
    net.backward(static_cast<uint64_t>(i));
    net.backend().axpby(-0.05f, net.flat_grads(), 1.0f, net.flat_params());
  }
}

// The test-phase class scores of `net` on the batch drawn from `seed`.
std::vector<float> scores(Net& net, int64_t classes, const std::string& blob, uint64_t seed) {
  feed(net, classes, seed);
  net.forward(Phase::Test, 0);
  return host_copy(net.backend(), net.blob(blob));
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

// How far the folded net's scores may lie from the trained net's through fp32 rounding alone.
// Both nets compute every convolution and fully-connected output as an fp32 dot product of length
// L; recursive (or blocked) summation errs by at most gamma_L ~ L * u times the magnitude of the
// terms (u = 2^-24, fp32's unit roundoff), and the two nets round differently (the fold
// reassociates (x * w) * s into x * (w * s)), so the two results differ by up to 2 L u. The folded
// layer adds four single roundings the other does not share or vice versa: w * s and the folded
// bias rounded to f32, the trained convolution's output rounded to f32 before BatchNorm, and
// BatchNorm's output rounded to f32. Errors from successive layers add to first order (ReLU, max
// pooling and sums do not amplify them; linear layers scale error and signal alike), and a path
// from input to scores passes at most D such layers, D counting every convolution and
// fully-connected layer. The magnitudes are taken as the largest score: BatchNorm keeps the
// activations of comparable size, and measuring against the largest score rather than each score
// keeps cancellation in one small score from counting against the bound. Hence
//   |folded - trained| <= D * (2 L_max + 4) * u * max |score|,
// with L_max the longest dot product in the network (forward MACs per output element).
double score_tolerance(const NetSpec& spec, double largest_score) {
  int64_t longest = 0, dot_layers = 0;
  for (const auto& l : spec.layers()) {
    if (l.cost.forward_macs == 0) continue;
    ++dot_layers;
    longest = std::max(longest, l.cost.forward_macs / l.top_shapes.at(0).numel());
  }
  const double unit_roundoff = std::ldexp(1.0, -24);
  return static_cast<double>(dot_layers) * (2.0 * static_cast<double>(longest) + 4.0) * unit_roundoff * largest_score;
}

// An independent fold of one pair, written into the folded net: exact, or with one of the two
// mistakes a fold can make (eps left out of the variance, running mean not subtracted).
struct FoldVariant {
  bool add_eps = true;
  bool subtract_mean = true;
};

std::pair<std::vector<float>, std::vector<float>> fold_by_hand(const Net& trained, const FoldedPair& pair,
                                                               FoldVariant variant) {
  Backend& be = trained.backend();
  const Layer &conv = layer_named(trained, pair.convolution), &bn = layer_named(trained, pair.batch_norm);
  std::vector<float> w = host_copy(be, conv.params().at(0).master);
  const size_t channels = static_cast<size_t>(bn.params().at(0).master.numel());
  std::vector<float> bias(channels, 0.0f);
  if (conv.params().size() == 2) bias = host_copy(be, conv.params()[1].master);
  const auto scale = host_copy(be, bn.params().at(0).master), shift = host_copy(be, bn.params().at(1).master);
  const auto mean = host_copy(be, bn.state().at(0)), var = host_copy(be, bn.state().at(1));
  const double eps = variant.add_eps ? bn.config().node.get_or<float>("eps", 1e-5f) : 0.0;
  const size_t run = w.size() / channels;
  for (size_t k = 0; k < channels; ++k) {
    const double s = scale[k] / std::sqrt(static_cast<double>(var[k]) + eps);
    for (size_t j = k * run; j < (k + 1) * run; ++j) w[j] = static_cast<float>(w[j] * s);
    const double centred = variant.subtract_mean ? bias[k] - static_cast<double>(mean[k]) : bias[k];
    bias[k] = static_cast<float>(centred * s + shift[k]);
  }
  return {w, bias};
}

void write_fold_by_hand(const Net& trained, const FoldedSpec& f, Net& folded, FoldVariant variant) {
  for (const auto& pair : f.folded) {
    const auto [w, b] = fold_by_hand(trained, pair, variant);
    const Layer& conv = layer_named(folded, pair.convolution);
    from_host(folded.backend(), w, conv.params().at(0).master);
    from_host(folded.backend(), b, conv.params().at(1).master);
  }
}

TEST(FoldSpec, SmallResidualNetFoldsEachBatchNormAfterAConvolutionReadOnlyByIt) {
  NetSpec trained = NetSpec::load(test_network("fold_small_resnet.yaml"));
  FoldedSpec f = fold_batch_norm(trained);
  ASSERT_EQ(f.folded.size(), 3u);
  EXPECT_EQ(f.folded[0].convolution, "conv1");
  EXPECT_EQ(f.folded[0].batch_norm, "bn1");
  EXPECT_EQ(f.folded[1].convolution, "conv2");
  EXPECT_EQ(f.folded[1].batch_norm, "bn2");
  EXPECT_EQ(f.folded[2].convolution, "conv3");
  EXPECT_EQ(f.folded[2].batch_norm, "bn3");

  // After pooling, after a convolution also read by a sum, after a fully-connected layer: kept.
  std::vector<std::string> kept;
  for (const auto& l : f.spec.layers())
    if (l.type == "BatchNorm") kept.push_back(l.name);
  EXPECT_EQ(kept, (std::vector<std::string>{"bn_pool", "bn4", "bn_fc"}));
  EXPECT_EQ(f.spec.layers().size(), trained.layers().size() - 3);
  EXPECT_EQ(f.spec.name(), trained.name());
  EXPECT_EQ(f.spec.input_shape(), trained.input_shape());
  EXPECT_EQ(f.spec.classes(), trained.classes());

  // Each fold drops scale and shift (2 x 8) and adds a bias (8) where the convolution had none
  // (conv1, conv3; conv2 had one).
  EXPECT_EQ(f.spec.total_params(), trained.total_params() - 3 * 2 * 8 + 2 * 8);
  // Convolution MACs do not count the bias, and BatchNorm has none: the same MACs, fewer bytes.
  EXPECT_LE(f.spec.forward_macs(), trained.forward_macs());
  int64_t bytes_trained = 0, bytes_folded = 0;
  for (const auto& l : trained.layers()) bytes_trained += l.cost.bytes_read + l.cost.bytes_written;
  for (const auto& l : f.spec.layers()) bytes_folded += l.cost.bytes_read + l.cost.bytes_written;
  EXPECT_LT(bytes_folded, bytes_trained);

  // Rewiring: each folded convolution produces its BatchNorm's top, which later layers still read;
  // the convolution's own top is gone.
  auto backend = make_backend("cpu");
  Net net(f.spec, *backend, 2, 1);
  for (const char* blob : {"bn1", "bn2", "bn3", "relu1", "sum1", "conv4", "bn4", "fc2"})
    EXPECT_TRUE(net.has_blob(blob));
  for (const char* blob : {"conv1", "conv2", "conv3"}) EXPECT_FALSE(net.has_blob(blob));
  EXPECT_EQ(layer_named(net, "conv1").params().size(), 2u) << "the folded convolution gains a bias";
  EXPECT_EQ(layer_named(net, "conv1").tops(), std::vector<std::string>{"bn1"});
  EXPECT_EQ(layer_named(net, "relu1").bottoms(), std::vector<std::string>{"bn1"});
  EXPECT_EQ(net.accuracy_outputs(), (std::vector<std::string>{"top1", "top5"}));

  // The folded spec is a network of its own: its resolved YAML loads back to the same layers, and
  // folding it again finds nothing left to fold.
  NetSpec again = NetSpec::load_string(f.spec.resolved_yaml(), "folded.yaml");
  EXPECT_EQ(again.layers().size(), f.spec.layers().size());
  EXPECT_EQ(again.total_params(), f.spec.total_params());
  EXPECT_TRUE(fold_batch_norm(f.spec).folded.empty());
}

TEST(FoldSpec, NetworkWithoutBatchNormIsUnchanged) {
  NetSpec trained = NetSpec::load(shipped_network("lenet"));
  FoldedSpec f = fold_batch_norm(trained);
  EXPECT_TRUE(f.folded.empty());
  EXPECT_EQ(f.spec.layers().size(), trained.layers().size());
  EXPECT_EQ(f.spec.total_params(), trained.total_params());
  EXPECT_EQ(f.spec.forward_macs(), trained.forward_macs());
}

// A BatchNorm with a fused ReLU (relu: true) stays: a convolution has no ReLU to take it over.
TEST(FoldSpec, BatchNormWithFusedReluStays) {
  NetSpec trained = NetSpec::load_string(
      "name: relu_bn\ninput: {shape: [3, 8, 8], classes: 5}\nlayers:\n"
      "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3, bias: false}\n"
      "  - {name: bn1, type: BatchNorm, bottom: conv1, top: bn1, relu: true}\n"
      "  - {name: conv2, type: Convolution, bottom: bn1, top: conv2, num_output: 4, kernel: 3, bias: false}\n"
      "  - {name: bn2, type: BatchNorm, bottom: conv2, top: bn2, relu: false}\n"
      "  - {name: fc, type: InnerProduct, bottom: bn2, top: fc, num_output: 5}\n"
      "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n",
      "relu_bn");
  FoldedSpec f = fold_batch_norm(trained);
  ASSERT_EQ(f.folded.size(), 1u);
  EXPECT_EQ(f.folded[0].batch_norm, "bn2");
  EXPECT_EQ(count_type(f.spec, "BatchNorm"), 1);
}

// The shipped ResNets put a BatchNorm after every convolution (main path and projection shortcut)
// and nowhere else: all of them fold. ResNet-18 and -34: conv1 + 2 per basic block + 3 projections
// (8 + 3 and 16 + 3 blocks); ResNet-50: conv1 + 3 per bottleneck (16) + 4 projections.
TEST(FoldSpec, ShippedResNetsFoldEveryBatchNorm) {
  for (const auto& [name, batch_norms] :
       std::map<std::string, int>{{"resnet18", 20}, {"resnet34", 36}, {"resnet50", 53}}) {
    SCOPED_TRACE(name);
    NetSpec trained = NetSpec::load(shipped_network(name));
    ASSERT_EQ(count_type(trained, "BatchNorm"), batch_norms);
    FoldedSpec f = fold_batch_norm(trained);
    EXPECT_EQ(static_cast<int>(f.folded.size()), batch_norms);
    EXPECT_EQ(count_type(f.spec, "BatchNorm"), 0);
    EXPECT_EQ(count_type(f.spec, "Convolution"), count_type(trained, "Convolution"));
    EXPECT_EQ(f.spec.layers().size(), trained.layers().size() - static_cast<size_t>(batch_norms));
    // Every convolution had no bias: each fold trades scale and shift (2C) for a bias (C).
    int64_t channels = 0;
    for (const auto& l : trained.layers())
      if (l.type == "BatchNorm") channels += l.params / 2;
    EXPECT_EQ(f.spec.total_params(), trained.total_params() - channels);
    EXPECT_LE(f.spec.forward_macs(), trained.forward_macs());
    // The output is untouched.
    EXPECT_EQ(f.spec.layers().back().name, "accuracy");
  }
}

// The folded network keeps the input the trained one was loaded with, command-line overrides included.
TEST(FoldSpec, KeepsOverriddenInputAndClasses) {
  NetOptions options;
  options.input_shape = std::vector<int64_t>{3, 64, 64};
  options.classes = 10;
  NetSpec trained = NetSpec::load(shipped_network("resnet18"), options);
  FoldedSpec f = fold_batch_norm(trained);
  EXPECT_EQ(f.spec.input_shape(), (std::vector<int64_t>{3, 64, 64}));
  EXPECT_EQ(f.spec.classes(), 10);
  EXPECT_EQ(f.spec.layers().back().bottom_shapes.at(0), Shape({1, 10}));
}

TEST(Fold, FoldedNetComputesTheTrainedScores) {
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load(test_network("fold_small_resnet.yaml"));
  Net trained(spec, *backend, kBatch, 11);
  train(trained, spec.classes(), 10);

  // The fold must have something to do: running statistics far from (0, 1), scale and shift far
  // from (1, 0), in every BatchNorm.
  for (const auto& name : {"bn1", "bn2", "bn3", "bn_pool", "bn4", "bn_fc"}) {
    const Layer& bn = layer_named(trained, name);
    const auto mean = host_copy(*backend, bn.state()[0]), var = host_copy(*backend, bn.state()[1]);
    std::vector<float> var_minus_one(var);
    for (auto& v : var_minus_one) v -= 1.0f;
    EXPECT_GT(max_abs(mean), 0.1) << name;
    EXPECT_GT(max_abs(var_minus_one), 0.1) << name;
  }

  FoldedSpec f = fold_batch_norm(spec);
  ASSERT_EQ(f.folded.size(), 3u);
  Net folded(f.spec, *backend, kBatch, 12);  // another seed: nothing may survive from initialisation
  copy_folded_weights(trained, f, folded);

  // Unchanged layers carry the trained values bit for bit, parameters and state alike.
  std::set<std::string> folded_convolutions;
  for (const auto& pair : f.folded) folded_convolutions.insert(pair.convolution);
  for (const Layer* layer : folded.layers()) {
    if (folded_convolutions.count(layer->name())) continue;
    const Layer& original = layer_named(trained, layer->name());
    for (size_t p = 0; p < layer->params().size(); ++p)
      EXPECT_EQ(host_copy(*backend, layer->params()[p].master), host_copy(*backend, original.params()[p].master))
          << layer->name();
    for (size_t s = 0; s < layer->state().size(); ++s)
      EXPECT_EQ(host_copy(*backend, layer->state()[s]), host_copy(*backend, original.state()[s])) << layer->name();
  }
  // Folded convolutions: the formula computed here independently, to within one rounding.
  for (const auto& pair : f.folded) {
    const auto [w, b] = fold_by_hand(trained, pair, {});
    const Layer& conv = layer_named(folded, pair.convolution);
    const auto got_w = host_copy(*backend, conv.params()[0].master);
    const auto got_b = host_copy(*backend, conv.params()[1].master);
    ASSERT_EQ(got_w.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_LE(std::abs(got_w[i] - w[i]), FLT_EPSILON * std::abs(w[i])) << i;
    for (size_t i = 0; i < b.size(); ++i) EXPECT_LE(std::abs(got_b[i] - b[i]), FLT_EPSILON * std::abs(b[i])) << i;
  }

  const std::vector<float> expected = scores(trained, spec.classes(), "fc2", 999);
  const double largest = max_abs(expected);
  ASSERT_GT(largest, 0.1);
  const double tolerance = score_tolerance(spec, largest);
  const double error = max_abs_diff(scores(folded, spec.classes(), "fc2", 999), expected);
  EXPECT_LE(error, tolerance) << "largest score " << largest;
  std::cout << "folded vs trained scores: max |difference| " << error << ", tolerance " << tolerance
            << ", largest score " << largest << "\n";

  // Negative controls: a fold without eps or without the running mean misses by far more.
  write_fold_by_hand(trained, f, folded, {.add_eps = false});
  const double without_eps = max_abs_diff(scores(folded, spec.classes(), "fc2", 999), expected);
  EXPECT_GT(without_eps, 10 * tolerance);
  write_fold_by_hand(trained, f, folded, {.subtract_mean = false});
  const double without_mean = max_abs_diff(scores(folded, spec.classes(), "fc2", 999), expected);
  EXPECT_GT(without_mean, 10 * tolerance);
  std::cout << "negative controls: without eps " << without_eps << ", without the mean " << without_mean << "\n";
  // And the exact hand fold lands back inside.
  write_fold_by_hand(trained, f, folded, {});
  EXPECT_LE(max_abs_diff(scores(folded, spec.classes(), "fc2", 999), expected), tolerance);
}

// The inference network as `cnnscale infer` builds it: folded, then every epilogue fused, the
// residual sum over a folded BatchNorm's output into that convolution (conv3 takes relu1 as its
// addend). The fused layers run the same CPU ops as the layers apart, so the fused net's scores are
// the folded net's bit for bit, and within the folding bound of the trained net's.
TEST(Fold, FoldedThenFusedNetComputesTheTrainedScores) {
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load(test_network("fold_small_resnet.yaml"));
  Net trained(spec, *backend, kBatch, 11);
  train(trained, spec.classes(), 10);
  FoldedSpec f = fold_batch_norm(spec);
  Net folded(f.spec, *backend, kBatch, 12);
  copy_folded_weights(trained, f, folded);
  FusedSpec fu = fuse_epilogues(f.spec);
  const auto residual =
      std::find_if(fu.fused.begin(), fu.fused.end(), [](const FusedEpilogue& e) { return e.layer == "conv3"; });
  ASSERT_NE(residual, fu.fused.end());
  EXPECT_EQ(residual->absorbed, (std::vector<std::string>{"sum1", "relu3"}));
  for (const LayerInfo& l : fu.spec.layers()) EXPECT_NE(l.type, "ReLU") << l.name;
  // No layer moved (every addend exists where its layer stands): the same flat layout.
  Net fused(fu.spec, *backend, kBatch, 13);
  ASSERT_EQ(fused.flat_params().numel(), folded.flat_params().numel());
  backend->copy(folded.flat_params(), fused.flat_params());
  const auto from = folded.state(), to = fused.state();
  ASSERT_EQ(from.size(), to.size());
  for (size_t i = 0; i < from.size(); ++i) backend->copy(from[i].second, to[i].second);

  const std::vector<float> want = scores(folded, spec.classes(), "fc2", 999);
  EXPECT_EQ(scores(fused, spec.classes(), "fc2", 999), want);
  const std::vector<float> expected = scores(trained, spec.classes(), "fc2", 999);
  EXPECT_LE(max_abs_diff(want, expected), score_tolerance(spec, max_abs(expected)));
}

// BatchNorm's default eps (1e-5) is the one the fold uses: with running variances of the same
// size, eps decides the scale, and a fold with any other eps misses.
TEST(Fold, DefaultEpsMatchesBatchNorms) {
  const std::string yaml =
      "name: default_eps\n"
      "input: {shape: [2, 6, 6], classes: 4}\n"
      "layers:\n"
      "  - {name: conv, type: Convolution, bottom: data, top: conv, num_output: 6, kernel: 3, bias: false}\n"
      "  - {name: bn, type: BatchNorm, bottom: conv, top: bn, shift_filler: {type: gaussian, std: 0.5}}\n"
      "  - {name: fc, type: InnerProduct, bottom: bn, top: fc, num_output: 4}\n"
      "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n";
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load_string(yaml, "default_eps.yaml");
  Net trained(spec, *backend, kBatch, 5);
  // Running variances between 1e-6 and 1e-5 and means of order 1, set directly.
  const Layer& bn = layer_named(trained, "bn");
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> tiny(1e-6f, 1e-5f), centre(-1.0f, 1.0f);
  std::vector<float> mean(6), var(6);
  for (size_t c = 0; c < 6; ++c) {
    mean[c] = centre(rng);
    var[c] = tiny(rng);
  }
  from_host(*backend, mean, bn.state()[0]);
  from_host(*backend, var, bn.state()[1]);

  FoldedSpec f = fold_batch_norm(spec);
  ASSERT_EQ(f.folded.size(), 1u);
  Net folded(f.spec, *backend, kBatch, 6);
  copy_folded_weights(trained, f, folded);
  const std::vector<float> expected = scores(trained, spec.classes(), "fc", 7);
  const double tolerance = score_tolerance(spec, max_abs(expected));
  EXPECT_LE(max_abs_diff(scores(folded, spec.classes(), "fc", 7), expected), tolerance);
  write_fold_by_hand(trained, f, folded, {.add_eps = false});
  EXPECT_GT(max_abs_diff(scores(folded, spec.classes(), "fc", 7), expected), 10 * tolerance);
}

TEST(Fold, MismatchedNetsAreRefused) {
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load(test_network("fold_small_resnet.yaml"));
  FoldedSpec f = fold_batch_norm(spec);
  Net trained(spec, *backend, 2, 1);
  Net unfolded(spec, *backend, 2, 2);
  EXPECT_THROW(copy_folded_weights(trained, f, unfolded), RuntimeError);
  Net folded(f.spec, *backend, 2, 3);
  EXPECT_THROW(copy_folded_weights(folded, f, folded), RuntimeError);
}

}  // namespace
}  // namespace cnnscale
