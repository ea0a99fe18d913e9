// Network-file expansion: variables and integer expressions, block instances with prefixed layer
// and blob names, the repeat's output blob, `first:` overrides, ${last} and the resolved YAML.
#include <gtest/gtest.h>

#include "net/net.hpp"

namespace cnnscale {
namespace {

std::vector<std::string> layer_names(const NetSpec& spec) {
  std::vector<std::string> out;
  for (const auto& l : spec.layers()) out.push_back(l.name);
  return out;
}

const LayerInfo& layer(const NetSpec& spec, const std::string& name) {
  for (const auto& l : spec.layers())
    if (l.name == name) return l;
  throw std::runtime_error("no layer " + name);
}

const std::string kBlocks = R"(name: blocks
input: {shape: [4, 8, 8], classes: 7}
vars: {base: 6, wide: "${base*2+1}"}
blocks:
  unit:
    params: {filters: ~, stride: 1, kernel: 3}
    output: out
    layers:
      - {name: conv, type: Convolution, bottom: "${in}", top: conv, num_output: "${filters}", kernel: "${kernel}", stride: "${stride}", pad: "${(kernel-1)/2}"}
      - {name: relu, type: ReLU, bottom: conv, top: out}
  widen:
    params: {filters: ~, stride: 1}
    output: out
    layers:
      - {name: conv, type: Convolution, bottom: "${in}", top: conv, num_output: "${filters*2}", kernel: 1, stride: "${stride}"}
      - {name: relu, type: ReLU, bottom: "${last}", top: out}
layers:
  - {name: stem, type: Convolution, bottom: data, top: stem, num_output: "${wide}", kernel: 1}
  - repeat: {block: unit, times: 3, prefix: s1, args: {filters: "${base}"}, first: {block: widen, args: {stride: 2}}}
  - repeat: {block: unit, prefix: single, input: stem, args: {filters: 5, kernel: 1}}
  - {name: fc, type: InnerProduct, bottom: "${last}", top: fc, num_output: "${classes}"}
  - {name: fc_s1, type: InnerProduct, bottom: s1, top: fc_s1, num_output: "${classes}"}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";

TEST(NetBlocks, NamesAndWiring) {
  NetSpec spec = NetSpec::load_string(kBlocks, "blocks.yaml");
  EXPECT_EQ(layer_names(spec),
            (std::vector<std::string>{"stem", "s1_1_conv", "s1_1_relu", "s1_2_conv", "s1_2_relu", "s1_3_conv",
                                      "s1_3_relu", "single_conv", "single_relu", "fc", "fc_s1", "loss"}));
  // vars: wide = 6 * 2 + 1.
  EXPECT_EQ(layer(spec, "stem").top_shapes[0], Shape({1, 13, 8, 8}));
  // First instance: the `widen` block with stride 2 and filters 2 x 6; ${last} inside a block is
  // the previous layer's (prefixed) top.
  EXPECT_EQ(layer(spec, "s1_1_conv").bottom_shapes[0], Shape({1, 13, 8, 8}));
  EXPECT_EQ(layer(spec, "s1_1_conv").top_shapes[0], Shape({1, 12, 4, 4}));
  EXPECT_EQ(layer(spec, "s1_1_relu").bottom_shapes[0], Shape({1, 12, 4, 4}));
  // Later instances: `unit`, 6 filters, 3x3 with pad (3 - 1) / 2 = 1, fed by the previous output.
  EXPECT_EQ(layer(spec, "s1_2_conv").bottom_shapes[0], Shape({1, 12, 4, 4}));
  EXPECT_EQ(layer(spec, "s1_2_conv").top_shapes[0], Shape({1, 6, 4, 4}));
  EXPECT_EQ(layer(spec, "s1_3_conv").params, 6 * 6 * 9 + 6);
  // times: 1 uses the plain prefix, its input was given explicitly, kernel 1 gives pad 0.
  EXPECT_EQ(layer(spec, "single_conv").top_shapes[0], Shape({1, 5, 8, 8}));
  // ${last} after a repeat is its output blob; the repeat's name is the last output blob too.
  EXPECT_EQ(layer(spec, "fc").bottom_shapes[0], Shape({1, 5, 8, 8}));
  EXPECT_EQ(layer(spec, "fc_s1").bottom_shapes[0], Shape({1, 6, 4, 4}));
  EXPECT_EQ(layer(spec, "fc").top_shapes[0], Shape({1, 7}));
}

TEST(NetBlocks, ResolvedYamlNamesEveryBlob) {
  NetSpec spec = NetSpec::load_string(kBlocks, "blocks.yaml");
  const std::string y = spec.resolved_yaml();
  for (const char* s : {"s1_1_conv", "bottom: s1_1_conv", "top: s1_2_out", "top: s1}", "bottom: s1_2_out",
                        "bottom: s1, top: fc_s1", "bottom: stem", "top: single}", "num_output: 13", "name: blocks"})
    EXPECT_NE(y.find(s), std::string::npos) << "'" << s << "' not in\n" << y;
  EXPECT_EQ(y.find("s1_3_out"), std::string::npos) << "the last output is named after the repeat";
  EXPECT_EQ(y.find("${"), std::string::npos);
  EXPECT_EQ(y.find("blocks:"), std::string::npos);
  // The source file is not modified by expansion: loading twice gives the same result.
  EXPECT_EQ(NetSpec::load_string(kBlocks, "blocks.yaml").resolved_yaml(), y);
}

TEST(NetBlocks, ExplicitRepeatOutputAndStringVariables) {
  const std::string text = R"(name: t
input: {shape: [2, 4, 4], classes: 3}
vars: {act: ReLU, tag: x}
blocks:
  b:
    output: r
    layers: [{name: r, type: "${act}", bottom: "${in}", top: r}]
layers:
  - repeat: {block: b, times: 2, prefix: "p${tag}", output: final}
  - {name: "fc_${tag}", type: InnerProduct, bottom: final, top: fc, num_output: 3}
)";
  NetSpec spec = NetSpec::load_string(text, "t.yaml");
  EXPECT_EQ(layer_names(spec), (std::vector<std::string>{"px_1_r", "px_2_r", "fc_x"}));
  EXPECT_EQ(layer(spec, "px_2_r").type, "ReLU");
  EXPECT_NE(spec.resolved_yaml().find("top: final"), std::string::npos) << spec.resolved_yaml();
}

TEST(NetBlocks, InputDimensionsAreVariables) {
  const std::string text = R"(name: t
input: {shape: [2, 6, 10], classes: 4}
layers:
  - {name: pool, type: Pooling, bottom: data, top: pool, pool: ave, kernel: ["${height}", "${width/2}"], stride: 1}
  - {name: fc, type: InnerProduct, bottom: pool, top: fc, num_output: "${classes*channels}"}
)";
  NetSpec spec = NetSpec::load_string(text, "t.yaml");
  EXPECT_EQ(layer(spec, "pool").top_shapes[0], Shape({1, 2, 1, 6}));
  EXPECT_EQ(layer(spec, "fc").top_shapes[0], Shape({1, 8}));
  NetOptions options;
  options.input_shape = std::vector<int64_t>{3, 4, 4};
  options.classes = 5;
  NetSpec other = NetSpec::load_string(text, "t.yaml", options);
  EXPECT_EQ(layer(other, "pool").top_shapes[0], Shape({1, 3, 1, 3}));
  EXPECT_EQ(layer(other, "fc").top_shapes[0], Shape({1, 15}));
}

// `${...}` needs no quotes in flow style, although braces are YAML syntax there; line and column
// numbers of later errors stay those of the file.
TEST(NetBlocks, UnquotedReferencesInFlowStyle) {
  const std::string text = R"(name: t
input: {shape: [2, 6, 6], classes: 4}
vars: {k: 3}
layers:
  - {name: conv, type: Convolution, bottom: data, top: conv, num_output: ${classes*2}, kernel: ${k}, pad: ${(k-1)/2}}
  - {name: fc, type: InnerProduct, bottom: ${last}, top: fc, num_output: ${classes}, bias: ${nope}}
)";
  try {
    NetSpec::load_string(text, "t.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("t.yaml:6:92: layers[1].bias: unknown variable 'nope'"), std::string::npos) << msg;
  }
  std::string fixed = text;
  fixed.replace(fixed.find("${nope}"), 7, "false");
  NetSpec spec = NetSpec::load_string(fixed, "t.yaml");
  EXPECT_EQ(layer(spec, "conv").top_shapes[0], Shape({1, 8, 6, 6}));
  EXPECT_EQ(layer(spec, "fc").top_shapes[0], Shape({1, 4}));
  EXPECT_EQ(layer(spec, "fc").params, 8 * 36 * 4);
  EXPECT_NE(spec.resolved_yaml().find("pad: 1"), std::string::npos) << spec.resolved_yaml();
}

}  // namespace
}  // namespace cnnscale
