// time_network (experiment/time_network.hpp): what `cnnscale time` times, as a library call.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "experiment/time_network.hpp"
#include "measure/layer_timing.hpp"
#include "net/fold.hpp"
#include "net/fuse.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

NetSpec test_net(const std::string& name) { return NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/" + name); }

TimeRequest small_request(const std::string& net) {
  TimeRequest r{.spec = test_net(net), .options = {}, .fuse = true, .fold = true, .calibration = ""};
  r.options.batch = 2;
  r.options.iterations = 1;
  r.options.warmup = 0;
  return r;
}

TEST(TimeNetwork, RefusesInferenceOnlyChoicesForATrainingTiming) {
  TimeRequest r = small_request("fold_small_resnet.yaml");
  r.fold = false;
  EXPECT_THROW(check_time_request(r), ConfigError);
  r.fold = true;
  r.calibration = "scales.json";
  EXPECT_THROW(check_time_request(r), ConfigError);
  r.options.inference = true;
  r.fold = false;
  EXPECT_NO_THROW(check_time_request(r));
}

// As training runs it: every layer of the fused net timed, forward and backward and the update.
TEST(TimeNetwork, TimesTheFusedNetAsTrainingRunsIt) {
  auto backend = make_backend("cpu");
  const TimeRequest r = small_request("fold_small_resnet.yaml");
  const TimedNetwork t = time_network(r, *backend);
  const FusedSpec fused = fuse_epilogues(r.spec);
  ASSERT_GT(fused.fused.size(), 0u);
  EXPECT_EQ(t.fused_epilogues, fused.fused.size());
  EXPECT_EQ(t.folded_batch_norms, 0u);
  EXPECT_FALSE(t.result.layers.empty());
  EXPECT_GT(t.result.backward_ms, 0.0);
  EXPECT_GT(t.result.update_ms, 0.0);
  TimeRequest apart = small_request("fold_small_resnet.yaml");
  apart.fuse = false;
  const TimedNetwork u = time_network(apart, *backend);
  EXPECT_EQ(u.fused_epilogues, 0u);
  // The ReLUs (and residual sums) the fused net folds into its layers are rows of their own.
  EXPECT_LT(t.result.layers.size(), u.result.layers.size());
}

// As infer runs it: batch norms folded first, then epilogues fused; forward passes alone.
TEST(TimeNetwork, TimesTheFoldedNetAsInferRunsIt) {
  auto backend = make_backend("cpu");
  TimeRequest r = small_request("fold_small_resnet.yaml");
  r.options.inference = true;
  const TimedNetwork t = time_network(r, *backend);
  const FoldedSpec folded = fold_batch_norm(r.spec);
  ASSERT_GT(folded.folded.size(), 0u);
  EXPECT_EQ(t.folded_batch_norms, folded.folded.size());
  EXPECT_EQ(t.fused_epilogues, fuse_epilogues(folded.spec).fused.size());
  EXPECT_EQ(t.result.backward_ms, 0.0);
  EXPECT_GT(t.result.forward_ms, 0.0);
}

// Li et al.'s Fig. 2: the rows summed per type, largest first, shares of the sum over all layers.
TEST(TimeByType, SumsEachTypesLayersLargestFirst) {
  auto row = [](const char* type, double f, double b) {
    LayerTime t;
    t.type = type;
    t.forward_ms = f;
    t.backward_ms = b;
    return t;
  };
  const std::vector<LayerTime> layers = {row("Convolution", 4, 8), row("ReLU", 0.5, 0.5), row("Pooling", 1, 1),
                                         row("Convolution", 2, 2), row("ReLU", 0.5, 0.5), row("LRN", 0, 0)};
  const std::vector<TypeTime> types = time_by_type(layers);
  ASSERT_EQ(types.size(), 4u);
  EXPECT_EQ(types[0].type, "Convolution");
  EXPECT_EQ(types[0].layers, 2);
  EXPECT_DOUBLE_EQ(types[0].forward_ms, 6.0);
  EXPECT_DOUBLE_EQ(types[0].backward_ms, 10.0);
  EXPECT_DOUBLE_EQ(types[0].share, 16.0 / 20.0);
  // ReLU and Pooling tie at 2 ms: the one met first in the rows comes first.
  EXPECT_EQ(types[1].type, "ReLU");
  EXPECT_EQ(types[1].layers, 2);
  EXPECT_EQ(types[2].type, "Pooling");
  EXPECT_DOUBLE_EQ(types[2].share, 0.1);
  EXPECT_EQ(types[3].type, "LRN");
  EXPECT_EQ(types[3].share, 0.0);
  EXPECT_TRUE(time_by_type({}).empty());
  EXPECT_EQ(time_by_type({row("ReLU", 0, 0)}).at(0).share, 0.0);  // nothing timed: no division by 0
}

}  // namespace
}  // namespace cnnscale
