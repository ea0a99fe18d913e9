// The networks Li et al. (Fig. 2) and NVIDIA's inference whitepaper use besides AlexNet: GoogLeNet,
// VGG-16 and OverFeat (fast). Each one's shapes, parameter count and forward multiply-adds against
// its publication (the expected figures are computed here from the papers' tables, independently
// of the network files), GoogLeNet's auxiliary losses weighted into the training loss, and each one
// trained, timed, run for inference and benchmarked by `bench conv --net` on the CPU at a reduced
// input (the full-size nets take seconds per step on a CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "common/layer_harness.hpp"
#include "cpu/cli_runner.hpp"
#include "infer/inference_engine.hpp"
#include "net/bench_problems.hpp"
#include "net/net.hpp"

namespace cnnscale::testing {
namespace {

std::string network_file(const std::string& name) {
  return std::string(CNNSCALE_SOURCE_DIR) + "/networks/" + name + ".yaml";
}

const LayerInfo& layer_named(const NetSpec& spec, const std::string& name) {
  for (const auto& l : spec.layers())
    if (l.name == name) return l;
  throw std::runtime_error("no layer " + name);
}

using Dims = std::vector<int64_t>;

Dims out_shape(const NetSpec& spec, const std::string& name) {
  const Shape& s = layer_named(spec, name).top_shapes.at(0);
  return Dims(s.dims().begin() + 1, s.dims().end());
}

// A convolution's (or fully connected layer's, k = 1 at 1x1) weights and bias, and its multiply-adds
// per sample at an out x out output.
struct Cost {
  int64_t params = 0, macs = 0;
  Cost& operator+=(const Cost& o) {
    params += o.params;
    macs += o.macs;
    return *this;
  }
};
Cost conv(int64_t in, int64_t out, int64_t k, int64_t extent) {
  return {in * out * k * k + out, in * out * k * k * extent * extent};
}

bool auxiliary(const std::string& layer) { return layer.rfind("loss1_", 0) == 0 || layer.rfind("loss2_", 0) == 0; }

// Szegedy et al. 2015, Table 1: per inception module the input channels and the widths #1x1,
// #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj, at the module's resolution.
struct Inception {
  const char* name;
  int64_t in, a, b_reduce, b, c_reduce, c, pool_proj, extent;
};
constexpr Inception kInceptions[] = {
    {"inception_3a", 192, 64, 96, 128, 16, 32, 32, 28},    {"inception_3b", 256, 128, 128, 192, 32, 96, 64, 28},
    {"inception_4a", 480, 192, 96, 208, 16, 48, 64, 14},   {"inception_4b", 512, 160, 112, 224, 24, 64, 64, 14},
    {"inception_4c", 512, 128, 128, 256, 24, 64, 64, 14},  {"inception_4d", 512, 112, 144, 288, 32, 64, 64, 14},
    {"inception_4e", 528, 256, 160, 320, 32, 128, 128, 14}, {"inception_5a", 832, 256, 160, 320, 32, 128, 128, 7},
    {"inception_5b", 832, 384, 192, 384, 48, 128, 128, 7}};

TEST(SourceNetworks, GoogLeNetAsSzegedyTable1) {
  NetSpec spec = NetSpec::load(network_file("googlenet"));
  EXPECT_EQ(spec.input_shape(), Dims({3, 224, 224}));
  EXPECT_EQ(out_shape(spec, "conv1_7x7_s2"), Dims({64, 112, 112}));
  EXPECT_EQ(out_shape(spec, "pool1_norm1"), Dims({64, 56, 56}));
  EXPECT_EQ(out_shape(spec, "conv2_norm2"), Dims({192, 56, 56}));
  EXPECT_EQ(out_shape(spec, "pool2_3x3_s2"), Dims({192, 28, 28}));
  EXPECT_EQ(out_shape(spec, "pool3_3x3_s2"), Dims({480, 14, 14}));
  EXPECT_EQ(out_shape(spec, "pool4_3x3_s2"), Dims({832, 7, 7}));
  EXPECT_EQ(out_shape(spec, "pool5_7x7_s1"), Dims({1024, 1, 1}));
  EXPECT_EQ(out_shape(spec, "loss3_classifier"), Dims({1000}));
  // The auxiliary heads read 4a's (512) and 4d's (528) outputs, pooled 5x5/3 to 4x4.
  EXPECT_EQ(out_shape(spec, "loss1_ave_pool"), Dims({512, 4, 4}));
  EXPECT_EQ(out_shape(spec, "loss2_ave_pool"), Dims({528, 4, 4}));

  // The main path from Table 1's widths: conv1 7x7/2 (64), conv2 1x1 (64) and 3x3 (192) at 56x56,
  // the nine modules (their outputs a + b + c + pool_proj channels), the 1024 -> 1000 classifier.
  Cost main = conv(3, 64, 7, 112);
  main += conv(64, 64, 1, 56);
  main += conv(64, 192, 3, 56);
  for (const Inception& m : kInceptions) {
    SCOPED_TRACE(m.name);
    Cost module = conv(m.in, m.a, 1, m.extent);
    module += conv(m.in, m.b_reduce, 1, m.extent);
    module += conv(m.b_reduce, m.b, 3, m.extent);
    module += conv(m.in, m.c_reduce, 1, m.extent);
    module += conv(m.c_reduce, m.c, 5, m.extent);
    module += conv(m.in, m.pool_proj, 1, m.extent);
    main += module;
    EXPECT_EQ(out_shape(spec, std::string(m.name) + "_output"),
              Dims({m.a + m.b + m.c + m.pool_proj, m.extent, m.extent}));
  }
  main += conv(1024, 1000, 1, 1);
  Cost counted;
  for (const LayerInfo& l : spec.layers())
    if (!auxiliary(l.name)) counted += {l.params, l.cost.forward_macs};
  EXPECT_EQ(counted.params, main.params);
  EXPECT_EQ(counted.macs, main.macs);
  EXPECT_EQ(main.params, 6998552);
  EXPECT_EQ(main.macs, 1582671872);
  // Table 1's own columns sum to 6.8 M parameters and 1.50 G operations; they round each layer and
  // give conv1 34 M operations where 7 x 7 x 3 x 64 x 112^2 is 118 M (so 1.59 G with that
  // corrected), and they leave the biases out (8,280 here). The exact count is within 3 % of both.
  EXPECT_NEAR(static_cast<double>(main.params), 6.8e6, 0.03 * 6.8e6);
  EXPECT_NEAR(static_cast<double>(main.macs), 1.586e9, 0.01 * 1.586e9);
  // Each auxiliary head (Section 5): 1x1 conv to 128 on 4x4, fully connected 2048 -> 1024 and
  // 1024 -> 1000; the BVLC train net's, so the file's totals count them.
  const Cost aux1 = [] {
    Cost c = conv(512, 128, 1, 4);
    c += conv(128 * 16, 1024, 1, 1);
    c += conv(1024, 1000, 1, 1);
    return c;
  }();
  const Cost aux2 = [] {
    Cost c = conv(528, 128, 1, 4);
    c += conv(128 * 16, 1024, 1, 1);
    c += conv(1024, 1000, 1, 1);
    return c;
  }();
  EXPECT_EQ(spec.total_params(), main.params + aux1.params + aux2.params);
  EXPECT_EQ(spec.total_params(), 13378280);
  EXPECT_EQ(spec.forward_macs(), main.macs + aux1.macs + aux2.macs);
}

TEST(SourceNetworks, Vgg16AsConfigurationD) {
  NetSpec spec = NetSpec::load(network_file("vgg16"));
  EXPECT_EQ(out_shape(spec, "conv1_2_conv"), Dims({64, 224, 224}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({64, 112, 112}));
  EXPECT_EQ(out_shape(spec, "conv5_3_conv"), Dims({512, 14, 14}));
  EXPECT_EQ(out_shape(spec, "pool5"), Dims({512, 7, 7}));
  EXPECT_EQ(out_shape(spec, "fc8"), Dims({1000}));
  // Simonyan & Zisserman, Table 1 column D: stages of 2, 2, 3, 3, 3 3x3 convolutions of 64, 128,
  // 256, 512, 512 filters at 224, 112, 56, 28, 14; FC-4096, FC-4096, FC-1000 on 7 x 7 x 512.
  const int64_t convs[] = {2, 2, 3, 3, 3}, filters[] = {64, 128, 256, 512, 512};
  Cost d;
  int64_t in = 3, extent = 224, conv_layers = 0;
  for (int s = 0; s < 5; ++s, extent /= 2)
    for (int i = 0; i < convs[s]; ++i, ++conv_layers) {
      d += conv(in, filters[s], 3, extent);
      in = filters[s];
    }
  d += conv(512 * 7 * 7, 4096, 1, 1);
  d += conv(4096, 4096, 1, 1);
  d += conv(4096, 1000, 1, 1);
  EXPECT_EQ(conv_layers, 13);
  // Table 2 of the paper: 138 M parameters for D; exactly 138,357,544 (torchvision's vgg16 too).
  EXPECT_EQ(d.params, 138357544);
  EXPECT_EQ(spec.total_params(), d.params);
  // 15.35 G in the convolutions and 0.12 G in the fully connected layers: the 15.5 G usually quoted.
  EXPECT_EQ(spec.forward_macs(), d.macs);
  EXPECT_NEAR(static_cast<double>(d.macs), 15.5e9, 0.01 * 15.5e9);
}

TEST(SourceNetworks, OverFeatFastAsSermanetTable1) {
  NetSpec spec = NetSpec::load(network_file("overfeat"));
  EXPECT_EQ(spec.input_shape(), Dims({3, 231, 231}));
  // Table 1 (fast model): 56x56, 24x24 (pooled to 28, then 12), 12x12 thrice, pooled to 6x6.
  EXPECT_EQ(out_shape(spec, "conv1_conv"), Dims({96, 56, 56}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({96, 28, 28}));
  EXPECT_EQ(out_shape(spec, "conv2_conv"), Dims({256, 24, 24}));
  EXPECT_EQ(out_shape(spec, "pool2"), Dims({256, 12, 12}));
  EXPECT_EQ(out_shape(spec, "conv5_conv"), Dims({1024, 12, 12}));
  EXPECT_EQ(out_shape(spec, "pool5"), Dims({1024, 6, 6}));
  EXPECT_EQ(out_shape(spec, "fc6"), Dims({3072}));
  EXPECT_EQ(out_shape(spec, "fc7"), Dims({4096}));
  Cost fast = {96 * 3 * 11 * 11 + 96, 96 * 3 * 11 * 11 * 56 * 56};  // 11x11 stride 4
  fast += conv(96, 256, 5, 24);
  fast += conv(256, 512, 3, 12);
  fast += conv(512, 1024, 3, 12);
  fast += conv(1024, 1024, 3, 12);
  fast += conv(1024 * 6 * 6, 3072, 1, 1);
  fast += conv(3072, 4096, 1, 1);
  fast += conv(4096, 1000, 1, 1);
  EXPECT_EQ(fast.params, 145920872);
  EXPECT_EQ(fast.macs, 2801403904);
  EXPECT_EQ(spec.total_params(), fast.params);
  EXPECT_EQ(spec.forward_macs(), fast.macs);
  // The paper's Table 4: 145 M parameters and 2,810 M connections for the fast model.
  EXPECT_NEAR(static_cast<double>(fast.params), 145e6, 0.01 * 145e6);
  EXPECT_NEAR(static_cast<double>(fast.macs), 2.81e9, 0.01 * 2.81e9);
}

// The BVLC train net's total loss: the classifier's plus 0.3 times each auxiliary classifier's.
// The test phase runs the main path alone (the heads are `phase: train`).
TEST(SourceNetworks, GoogLeNetWeighsItsAuxiliaryLosses) {
  NetOptions small;
  small.input_shape = Dims{3, 96, 96};  // the smallest multiple of 32 whose 4a output (6x6) fits the 5x5 pool
  small.classes = 10;
  NetSpec spec = NetSpec::load(network_file("googlenet"), small);
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 7);
  fill_uniform(*backend, net.input(), 3, -1, 1);
  backend->fill(net.labels(), 4.0f);
  net.forward(Phase::Train, 0);
  const float main = to_host(*backend, net.blob("loss")).at(0), aux1 = to_host(*backend, net.blob("loss1")).at(0),
              aux2 = to_host(*backend, net.blob("loss2")).at(0), total = to_host(*backend, net.loss()).at(0);
  EXPECT_GT(aux1, 0.0f);
  EXPECT_GT(aux2, 0.0f);
  // Three fp32 terms of about ln 10 summed: a few ulps of 4.
  EXPECT_NEAR(total, main + 0.3f * aux1 + 0.3f * aux2, 1e-5f);
  net.forward(Phase::Test, 0);
  EXPECT_NEAR(to_host(*backend, net.loss()).at(0), to_host(*backend, net.blob("loss")).at(0), 1e-6f);
}

// Reduced inputs that keep every layer: GoogLeNet's auxiliary pools need 4a at 6x6 (96), VGG's five
// poolings 32, OverFeat's conv1 11x11/4 and three poolings 71 (conv1 16, pool1 8, conv2 4, pool5 1).
struct Small {
  const char* net;
  int64_t side;
  std::string shape() const { return "3," + std::to_string(side) + "," + std::to_string(side); }
};
constexpr Small kSmall[] = {{"googlenet", 96}, {"vgg16", 32}, {"overfeat", 71}};

TEST(SourceNetworks, EachTrainsAndIsTimedOnTheCpu) {
  for (const Small& s : kSmall) {
    SCOPED_TRACE(s.net);
    CliResult train = run_cnnscale({"train", "--net", s.net, "--data", "synthetic", "--input-shape", s.shape(),
                                    "--classes", "10", "--iterations", "2", "--batch", "2", "--timing-warmup", "1",
                                    "--lr", "0.001", "--min-window", "0", "--no-results", "--json"});
    ASSERT_EQ(train.exit_code, 0) << train.err;
    EXPECT_TRUE(std::isfinite(nlohmann::json::parse(train.out)["final_loss"].get<double>())) << train.out;
    for (bool inference : {false, true}) {
      std::vector<std::string> args = {"time",  s.net,         "--input-shape", s.shape(), "--batch", "1",
                                       "--iterations", "1", "--warmup",      "0",     "--json"};
      if (inference) args.push_back("--inference");
      CliResult time = run_cnnscale(args);
      ASSERT_EQ(time.exit_code, 0) << time.err;
      const nlohmann::json j = nlohmann::json::parse(time.out);
      EXPECT_EQ(j["net"], s.net);
      EXPECT_GT(j["forward_ms"].get<double>(), 0.0);
      EXPECT_EQ(j["backward_ms"].get<double>() > 0.0, !inference);
      // The roll-up by layer type (Li et al.'s Fig. 2): every layer in one type's row, shares summing
      // to 1 (each a ratio of sums of the same doubles: a few ulps).
      double share = 0;
      int64_t rows = 0;
      std::vector<std::string> types;
      std::vector<double> shares;
      for (const auto& t : j["by_type"]) {
        share += t["share"].get<double>();
        rows += t["layers"].get<int64_t>();
        types.push_back(t["type"]);
        shares.push_back(t["share"].get<double>());
      }
      EXPECT_NEAR(share, 1.0, 1e-12);
      EXPECT_EQ(rows, static_cast<int64_t>(j["layers"].size()));
      // Largest first. Which type that is depends on a single iteration without warm-up on a shared CI
      // machine (on a loaded one, OverFeat's fully connected layers once came out ahead), so the
      // order is checked, not the winner.
      EXPECT_TRUE(std::is_sorted(shares.rbegin(), shares.rend())) << time.out;
      EXPECT_NE(std::find(types.begin(), types.end(), "Convolution"), types.end());
      if (std::string(s.net) == "googlenet") {
        for (const char* type : {"Concat", "LRN", "Pooling", "InnerProduct"})
          EXPECT_NE(std::find(types.begin(), types.end(), type), types.end()) << type;
      }
    }
  }
  // The table: one row per type instead of one per layer.
  CliResult table = run_cnnscale({"time", "overfeat", "--input-shape", "3,71,71", "--batch", "1", "--iterations", "1",
                                  "--warmup", "0", "--by-type"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("type                 layers"), std::string::npos) << table.out;
  const size_t fc = table.out.find("\nInnerProduct ");
  ASSERT_NE(fc, std::string::npos) << table.out;
  std::istringstream row(table.out.substr(fc + 1));
  std::string type;
  int64_t layers = 0;
  row >> type >> layers;
  EXPECT_EQ(layers, 3);  // fc6, fc7, fc8
  EXPECT_EQ(table.out.find("conv1_conv"), std::string::npos) << table.out;
}

// What `infer` runs (its engine: batch norms folded, epilogues fused, a net built for inference,
// forward passes in the test phase) at the reduced inputs: a CLI `infer` at full size times at least
// 20 batches, seconds of CPU for GoogLeNet and far more for VGG-16. The GPU runs are in the note.
TEST(SourceNetworks, EachRunsInTheInferenceEngineAndItsConvolutionsInBench) {
  auto backend = make_backend("cpu");
  for (const Small& s : kSmall) {
    SCOPED_TRACE(s.net);
    NetOptions small;
    small.input_shape = Dims{3, s.side, s.side};
    const NetSpec spec = NetSpec::load(network_file(s.net), small);
    infer::InferenceEngine engine(spec, *backend, {});
    engine.run(1);
    engine.synchronize();
    EXPECT_EQ(engine.net(1).use(), NetUse::Inference);
    const std::string scores = std::string(s.net) == "googlenet" ? "loss3_classifier" : "fc8";
    for (float v : to_host(*backend, engine.net(1).blob(scores))) EXPECT_TRUE(std::isfinite(v));
  }
  // bench conv --net: each distinct ungrouped convolution once. GoogLeNet: 3 stem convolutions, 6
  // per module (54), 2 auxiliary 1x1s; VGG-16's 13 are 9 shapes (conv1_2 ... repeat within a stage
  // at one width); OverFeat's 5 are all distinct.
  int total = 0;
  const NetProblems googlenet = net_problems("googlenet", 1);
  for (const std::string& n : googlenet.conv_names) {
    const size_t x = n.find("(x");
    total += x == std::string::npos ? 1 : std::stoi(n.substr(x + 2));
  }
  EXPECT_EQ(total, 3 + 6 * 9 + 2);
  EXPECT_TRUE(googlenet.skipped.empty());
  EXPECT_EQ(net_problems("vgg16", 1).convs.size(), 9u);
  EXPECT_EQ(net_problems("overfeat", 1).convs.size(), 5u);
  CliResult bench = run_cnnscale({"bench", "conv", "--device", "cpu", "--net", "overfeat", "--batch", "1", "--limit",
                                  "1", "--pass", "fwd", "--json", "--no-peak", "--quiet", "--no-results", "--repeats",
                                  "1", "--warmup", "0"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const nlohmann::json j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j["source"], "overfeat at batch 1 (problems 1 to 1 of 5)");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["label"].get<std::string>().rfind("conv1_conv: n=1 c=3 231x231 k=96", 0), 0u) << j["rows"][0];
}

}  // namespace
}  // namespace cnnscale::testing
