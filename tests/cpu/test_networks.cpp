// Every shipped network in networks/ loads (NetSpec only, no allocation), infers the standard
// output shapes, and has the standard parameter counts and forward MACs; command-line overrides
// of input shape and classes work; netinfo's JSON carries the totals.
#include <gtest/gtest.h>

#include <filesystem>

#include "net/net.hpp"
#include "net/netinfo.hpp"

namespace cnnscale {
namespace {

std::string network_file(const std::string& name) {
  return std::string(CNNSCALE_SOURCE_DIR) + "/networks/" + name + ".yaml";
}

const LayerInfo& layer_named(const NetSpec& spec, const std::string& name) {
  for (const auto& l : spec.layers())
    if (l.name == name) return l;
  throw std::runtime_error("no layer " + name);
}

// The per-sample output shape of a layer's first top, without the batch dimension.
std::vector<int64_t> out_shape(const NetSpec& spec, const std::string& name) {
  const Shape& s = layer_named(spec, name).top_shapes.at(0);
  EXPECT_EQ(s[0], 1) << name << " is inferred at batch 1";
  return std::vector<int64_t>(s.dims().begin() + 1, s.dims().end());
}

using Dims = std::vector<int64_t>;

TEST(Networks, EveryShippedNetworkLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(CNNSCALE_SOURCE_DIR) + "/networks")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    NetSpec spec = NetSpec::load(entry.path().string());
    EXPECT_GT(spec.total_params(), 0);
    EXPECT_GT(spec.forward_macs(), 0);
    // The classifier feeding the loss has one output per class.
    const LayerInfo& loss = layer_named(spec, "loss");
    EXPECT_EQ(loss.bottom_shapes.at(0), Shape({1, spec.classes()}));
    ++count;
  }
  EXPECT_GE(count, 8);
}

TEST(Networks, CaffeNet) {
  NetSpec spec = NetSpec::load(network_file("caffenet"));
  EXPECT_EQ(spec.input_shape(), Dims({3, 227, 227}));
  EXPECT_EQ(out_shape(spec, "conv1"), Dims({96, 55, 55}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({96, 27, 27}));
  EXPECT_EQ(out_shape(spec, "norm1"), Dims({96, 27, 27}));
  EXPECT_EQ(out_shape(spec, "conv2"), Dims({256, 27, 27}));
  EXPECT_EQ(out_shape(spec, "pool2"), Dims({256, 13, 13}));
  EXPECT_EQ(out_shape(spec, "conv5"), Dims({256, 13, 13}));
  EXPECT_EQ(out_shape(spec, "pool5"), Dims({256, 6, 6}));
  EXPECT_EQ(out_shape(spec, "fc6"), Dims({4096}));
  EXPECT_EQ(out_shape(spec, "fc8"), Dims({1000}));
  // BVLC reference CaffeNet: 60,965,224 parameters (conv2/4/5 in two groups).
  EXPECT_EQ(spec.total_params(), 60965224);
  EXPECT_EQ(layer_named(spec, "conv2").params, 256 * 48 * 25 + 256);
  // 105.4 M (conv1) + 223.9 M + 149.5 M + 112.1 M + 74.8 M + 37.7 M + 16.8 M + 4.1 M.
  EXPECT_EQ(spec.forward_macs(), 724406816);
  EXPECT_EQ(layer_named(spec, "accuracy").top_shapes.size(), 2u);
}

TEST(Networks, AlexNetNormalisesBeforePooling) {
  NetSpec spec = NetSpec::load(network_file("alexnet"));
  EXPECT_EQ(out_shape(spec, "norm1"), Dims({96, 55, 55}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({96, 27, 27}));
  EXPECT_EQ(out_shape(spec, "pool5"), Dims({256, 6, 6}));
  EXPECT_EQ(spec.total_params(), 60965224);
  EXPECT_EQ(spec.forward_macs(), 724406816);
}

TEST(Networks, Cnn2dGaitMatchesTorchAnchor) {
  NetSpec spec = NetSpec::load(network_file("cnn2d_gait"));
  EXPECT_EQ(spec.input_shape(), Dims({50, 60, 60}));
  EXPECT_EQ(out_shape(spec, "conv1"), Dims({96, 54, 54}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({96, 27, 27}));
  EXPECT_EQ(out_shape(spec, "conv2"), Dims({192, 12, 12}));
  EXPECT_EQ(out_shape(spec, "pool2"), Dims({192, 6, 6}));
  EXPECT_EQ(out_shape(spec, "conv3"), Dims({512, 4, 4}));
  EXPECT_EQ(out_shape(spec, "pool3"), Dims({512, 2, 2}));
  EXPECT_EQ(out_shape(spec, "conv4"), Dims({4096, 1, 1}));
  EXPECT_EQ(out_shape(spec, "fc7"), Dims({150}));
  // Sum of PyTorch's parameter counts for torch_anchor.py's cnn2d(150).
  EXPECT_EQ(spec.total_params(), 235296 + 460992 + 885248 + 8392704 + 16781312 + 8390656 + 307350);
}

TEST(Networks, ResNetGaitMatchesTorchAnchor) {
  NetSpec spec = NetSpec::load(network_file("resnet_gait"));
  EXPECT_EQ(out_shape(spec, "conv1"), Dims({64, 60, 60}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({64, 30, 30}));  // floor rounding, as PyTorch
  EXPECT_EQ(out_shape(spec, "res2_4_relu"), Dims({64, 30, 30}));
  EXPECT_EQ(out_shape(spec, "res3_1_relu"), Dims({128, 15, 15}));
  EXPECT_EQ(out_shape(spec, "res4_7_relu"), Dims({256, 8, 8}));
  EXPECT_EQ(out_shape(spec, "res5_2_relu"), Dims({512, 4, 4}));
  EXPECT_EQ(out_shape(spec, "pool5"), Dims({512, 1, 1}));
  EXPECT_EQ(out_shape(spec, "fc"), Dims({150}));
  // torch_anchor.py resnet((4, 6, 7, 2), 50, 150, 1), counted layer by layer (BN scale + shift).
  EXPECT_EQ(spec.total_params(), 18633878);
  EXPECT_EQ(spec.forward_macs(), 1859286016);
}

// ResNets against torchvision's parameter counts (exact: same layers, BN scale and shift counted)
// and the usual MAC figures (1.82 G, 3.6 G, 4.1 G) within 3 %.
struct ResNetCase {
  const char* name;
  int64_t params;
  double macs;
  int64_t conv_layers;
};

class ResNets : public ::testing::TestWithParam<ResNetCase> {};

TEST_P(ResNets, StandardCounts) {
  const ResNetCase& c = GetParam();
  NetSpec spec = NetSpec::load(network_file(c.name));
  EXPECT_EQ(out_shape(spec, "conv1"), Dims({64, 112, 112}));
  EXPECT_EQ(out_shape(spec, "pool1"), Dims({64, 56, 56}));
  EXPECT_EQ(out_shape(spec, "pool5")[1], 1);
  EXPECT_EQ(out_shape(spec, "fc"), Dims({1000}));
  EXPECT_EQ(spec.total_params(), c.params);
  EXPECT_NEAR(static_cast<double>(spec.forward_macs()), c.macs, 0.03 * c.macs);
  int64_t convs = 0;
  for (const auto& l : spec.layers()) convs += l.type == "Convolution";
  EXPECT_EQ(convs, c.conv_layers);
}

INSTANTIATE_TEST_SUITE_P(Standard, ResNets,
                         ::testing::Values(ResNetCase{"resnet18", 11689512, 1.82e9, 17 + 3},
                                           ResNetCase{"resnet34", 21797672, 3.6e9, 33 + 3},
                                           ResNetCase{"resnet50", 25557032, 4.1e9, 49 + 4}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Networks, ResNet50Shapes) {
  NetSpec spec = NetSpec::load(network_file("resnet50"));
  // Each stage's last ReLU produces the stage's output blob (res2 ... res5).
  EXPECT_EQ(out_shape(spec, "res2_3_relu"), Dims({256, 56, 56}));
  EXPECT_EQ(out_shape(spec, "res3_4_relu"), Dims({512, 28, 28}));
  EXPECT_EQ(out_shape(spec, "res4_6_relu"), Dims({1024, 14, 14}));
  EXPECT_EQ(out_shape(spec, "res5_3_relu"), Dims({2048, 7, 7}));
  EXPECT_EQ(layer_named(spec, "res3_1_conv2").params, 128 * 128 * 9);  // stride on the 3x3 (v1.5)
}

TEST(Networks, LeNet) {
  NetSpec spec = NetSpec::load(network_file("lenet"));
  EXPECT_EQ(out_shape(spec, "conv1"), Dims({20, 24, 24}));
  EXPECT_EQ(out_shape(spec, "pool2"), Dims({50, 4, 4}));
  EXPECT_EQ(out_shape(spec, "ip2"), Dims({10}));
  EXPECT_EQ(spec.total_params(), 520 + 25050 + 400500 + 5010);
}

TEST(Networks, OverridesOfClassesAndInputShape) {
  NetOptions options;
  options.classes = 10;
  NetSpec caffenet = NetSpec::load(network_file("caffenet"), options);
  EXPECT_EQ(caffenet.classes(), 10);
  EXPECT_EQ(out_shape(caffenet, "fc8"), Dims({10}));
  EXPECT_EQ(caffenet.total_params(), 60965224 - 4097000 + 4096 * 10 + 10);

  NetOptions small;
  small.input_shape = std::vector<int64_t>{3, 112, 112};
  small.classes = 100;
  NetSpec resnet = NetSpec::load(network_file("resnet18"), small);
  EXPECT_EQ(resnet.input_shape(), Dims({3, 112, 112}));
  EXPECT_EQ(out_shape(resnet, "res5_2_relu"), Dims({512, 4, 4}));
  EXPECT_EQ(out_shape(resnet, "pool5"), Dims({512, 1, 1}));  // global pooling follows the input
  EXPECT_EQ(out_shape(resnet, "fc"), Dims({100}));
  // The resolved YAML records the overridden input.
  EXPECT_NE(resnet.resolved_yaml().find("[3, 112, 112]"), std::string::npos) << resnet.resolved_yaml();

  NetOptions bad;
  bad.input_shape = std::vector<int64_t>{3, 224};
  EXPECT_THROW(NetSpec::load(network_file("resnet18"), bad), ConfigError);
  NetOptions too_small;  // conv1's 11x11 kernel cannot fit: a config error, not a crash
  too_small.input_shape = std::vector<int64_t>{3, 3, 3};
  EXPECT_THROW(NetSpec::load(network_file("caffenet"), too_small), ConfigError);
}

TEST(Networks, ResolvedYamlReloadsToTheSameNetwork) {
  for (const char* name : {"caffenet", "resnet50", "resnet_gait"}) {
    SCOPED_TRACE(name);
    NetSpec spec = NetSpec::load(network_file(name));
    std::string resolved = spec.resolved_yaml();
    EXPECT_EQ(resolved.find("${"), std::string::npos);
    EXPECT_EQ(resolved.find("repeat"), std::string::npos);
    NetSpec again = NetSpec::load_string(resolved, "resolved.yaml");
    ASSERT_EQ(again.layers().size(), spec.layers().size());
    for (size_t i = 0; i < spec.layers().size(); ++i) {
      EXPECT_EQ(again.layers()[i].name, spec.layers()[i].name);
      EXPECT_EQ(again.layers()[i].top_shapes, spec.layers()[i].top_shapes);
    }
    EXPECT_EQ(again.total_params(), spec.total_params());
    EXPECT_EQ(again.name(), spec.name());
  }
}

TEST(Networks, ResolveNetworkPath) {
  std::string path = resolve_network_path("caffenet");
  EXPECT_TRUE(std::filesystem::is_regular_file(path)) << path;
  EXPECT_EQ(std::filesystem::path(path).filename(), "caffenet.yaml");
  EXPECT_EQ(resolve_network_path(network_file("lenet")), network_file("lenet"));
  try {
    resolve_network_path("no_such_network");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_network.yaml"), std::string::npos) << e.what();
  }
}

TEST(Networks, NetinfoJsonAndTable) {
  NetSpec spec = NetSpec::load(network_file("caffenet"));
  nlohmann::json j = netinfo_json(spec, 256);
  EXPECT_EQ(j.at("params").get<int64_t>(), 60965224);
  EXPECT_EQ(j.at("forward_macs").get<int64_t>(), 724406816);
  ASSERT_EQ(j.at("layers").size(), spec.layers().size());
  EXPECT_EQ(j.at("layers")[0].at("name"), "conv1");
  EXPECT_EQ(j.at("layers")[0].at("forward_macs").get<int64_t>(), 105415200);
  EXPECT_EQ(j.at("gradient_bytes").get<int64_t>(), 4 * 60965224);
  // 6 x MACs x batch / (4 x params)
  EXPECT_NEAR(j.at("flops_per_gradient_byte").get<double>(), 6.0 * 724406816 * 256 / (4.0 * 60965224), 1e-6);
  // The study's Table 1 gives CaffeNet a CTC of 11.6 (727 M ops over 239.1 MB read); our layer
  // byte counts are the same formulas, so the ratio lands close to it.
  EXPECT_NEAR(j.at("ctc").get<double>(), 11.6, 0.6);
  std::string table = netinfo_table(spec, 256);
  for (const char* s : {"conv1", "(96, 55, 55)", "60965224", "CTC", "FLOPs per gradient byte"})
    EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;
}

}  // namespace
}  // namespace cnnscale
