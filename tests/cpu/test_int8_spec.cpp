// The int8 form of a network (net/int8_spec.hpp) on the CPU backend: which layers run in int8,
// which keep the net's precision (a 3-channel stem), which convolutions hand their output on as int8
// (every reader an int8 convolution, as input with one scale or as a residual addend) and which do
// not (a pooling reader, a reader outside the table), and that the int8 network computes what the
// fp32 one does to within int8's resolution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/layer_harness.hpp"
#include "common/net_batch.hpp"
#include "core/error.hpp"
#include "net/int8_spec.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

using testing::to_host;

// tests/data/int8_chain.yaml: a 3-channel stem (kept), a -> b -> c -> d with a read by d as an
// addend and the stem's output added in c, a pooling reader of d, a fully connected classifier.
NetSpec chain() {
  return NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/int8_chain.yaml");
}

const std::map<std::string, std::string> kInputOf{{"stem", "data"}, {"a", "stem"}, {"b", "a"},
                                                  {"c", "b"},       {"d", "c"},    {"fc", "pool"}};

std::string key_of(const NetSpec& spec, const std::string& layer, const std::string& key) {
  const std::string yaml = spec.resolved_yaml();
  const size_t at = yaml.find("name: " + layer + ",");
  if (at == std::string::npos) return "";
  const size_t end = yaml.find('\n', at);
  const std::string line = yaml.substr(at, end - at);
  const size_t k = line.find(key + ": ");
  if (k == std::string::npos) return "";
  return line.substr(k + key.size() + 2, line.find_first_of(",}", k) - k - key.size() - 2);
}

TEST(Int8Spec, ActivationsStayInt8BetweenInt8Convolutions) {
  NetSpec spec = chain();
  // Binary fractions, which the rewritten YAML prints as written.
  const std::map<std::string, double> scales{{"stem", 0.125}, {"a", 0.25},  {"b", 0.375},
                                             {"c", 0.5},      {"d", 0.625}, {"fc", 0.75}};
  Int8Spec q = with_int8_scales(spec, scales);
  EXPECT_EQ(q.int8, (std::vector<std::string>{"a", "b", "c", "d", "fc"}));
  EXPECT_EQ(q.kept, (std::vector<std::string>{"stem"}));            // 3 input channels: padding to 16 costs more
  EXPECT_EQ(q.outputs, (std::vector<std::string>{"a", "b", "c"}));  // d's reader is a pooling layer
  EXPECT_EQ(key_of(q.spec, "a", "int8_output_scale"), "0.375");     // its input reader b's scale
  EXPECT_EQ(key_of(q.spec, "d", "int8_addend_scale"), "0.375");     // and d reads it as an addend
  EXPECT_EQ(key_of(q.spec, "b", "int8_output_scale"), "0.5");
  EXPECT_EQ(key_of(q.spec, "c", "int8_output_scale"), "0.625");  // beside a floating-point addend
  EXPECT_EQ(key_of(q.spec, "c", "int8_addend_scale"), "");
  EXPECT_EQ(key_of(q.spec, "d", "int8_output_scale"), "");
  EXPECT_EQ(key_of(q.spec, "stem", "int8_input_scale"), "");

  // Where int8 activations cannot run (a GPU net of NCHW activations) no output stays int8: each
  // int8 layer quantises its own input and may fall back alone.
  EXPECT_TRUE(with_int8_scales(spec, scales, /*int8_activations=*/false).outputs.empty());
  EXPECT_EQ(with_int8_scales(spec, scales, false).int8, q.int8);

  // d outside the table: neither c's output nor a's (which d reads as its addend) stays int8.
  std::map<std::string, double> no_d = scales;
  no_d.erase("d");
  Int8Spec q2 = with_int8_scales(spec, no_d);
  EXPECT_EQ(q2.outputs, (std::vector<std::string>{"b"}));
  // b outside: a's input reader is no int8 convolution; a's output stays floating point, and d's
  // addend with it.
  std::map<std::string, double> no_b = scales;
  no_b.erase("b");
  Int8Spec q3 = with_int8_scales(spec, no_b);
  EXPECT_EQ(q3.outputs, (std::vector<std::string>{"c"}));
  EXPECT_EQ(key_of(q3.spec, "d", "int8_addend_scale"), "");

  EXPECT_THROW(with_int8_scales(spec, {{"pool", 0.1}}), ConfigError);
  EXPECT_THROW(with_int8_scales(spec, {{"a", 0.0}}), ConfigError);
}

TEST(Int8Spec, LayerKeysAreChecked) {
  auto net = [](const std::string& conv) {
    return "name: bad\ninput: {shape: [16, 4, 4], classes: 2}\nlayers:\n"
           "  - {name: z, type: Convolution, bottom: data, top: z, num_output: 16, kernel: 1, relu: true}\n"
           "  - {name: a, type: Convolution, top: a, num_output: 16, kernel: 1, " +
           conv +
           "}\n"
           "  - {name: fc, type: InnerProduct, bottom: a, top: fc, num_output: 2}\n"
           "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n";
  };
  EXPECT_NO_THROW(NetSpec::load_string(
      net("bottom: [data, z], relu: true, int8_input_scale: 0.1, int8_output_scale: 0.5, int8_addend_scale: 0.2"),
      "good.yaml"));
  // An int8 output or addend without an int8 input scale; an int8 output without the ReLU; an addend
  // scale without an addend; a scale that is not positive.
  for (const char* bad : {"bottom: data, relu: true, int8_output_scale: 0.5",
                          "bottom: data, int8_input_scale: 0.1, int8_output_scale: 0.5",
                          "bottom: data, relu: true, int8_input_scale: 0.1, int8_addend_scale: 0.5",
                          "bottom: data, relu: true, int8_input_scale: 0.1, int8_output_scale: -1"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(NetSpec::load_string(net(bad), "bad.yaml"), ConfigError);
  }
}

// The int8 network against the fp32 one on random input, the table's scales taken as max |x| / 127
// of each int8 layer's input in the fp32 pass (calibration's `max` method). Each int8 tensor rounds
// by at most half a step, 1/254 of its range, and each filter row likewise; through five int8 layers
// (an int8 output beside a floating-point addend, an int8 addend) the logits move by a few per cent
// of their range. A scale not folded into the epilogue (or into the addend), or an int8 activation
// read with the wrong scale, moves them by a factor.
TEST(Int8Spec, Int8NetworkComputesTheFp32OneWithinInt8Resolution) {
  NetSpec spec = chain();
  auto backend = make_backend("cpu");
  const int64_t batch = 4;
  Net fp32(spec, *backend, batch, 21, DType::F32, NetUse::Inference);
  testing::feed_random_batch(fp32, 4, 5);
  fp32.forward(Phase::Test, 0);
  std::map<std::string, double> scales;
  for (const auto& [layer, input] : kInputOf) {
    const std::vector<float> v = to_host(*backend, fp32.blob(input));
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    scales[layer] = m / 127.0;
  }
  Int8Spec q = with_int8_scales(spec, scales);
  ASSERT_EQ(q.outputs.size(), 3u);
  Net int8(q.spec, *backend, batch, 21, DType::F32, NetUse::Inference);
  backend->copy(fp32.flat_params(), int8.flat_params());
  backend->copy(fp32.input(), int8.input());
  int8.forward(Phase::Test, 0);
  for (Layer* l : int8.layers()) {
    if (l->name() == "a" || l->name() == "b" || l->name() == "c")
      EXPECT_NE(l->implementation(*backend).find("int8 output scale"), std::string::npos) << l->name();
    if (l->name() == "fc") EXPECT_EQ(l->implementation(*backend).rfind("int8 (", 0), 0u);
  }
  EXPECT_EQ(int8.blob("b").dtype(), DType::I8);
  EXPECT_EQ(int8.blob("d").dtype(), DType::F32);
  const std::vector<float> want = to_host(*backend, fp32.blob("fc")), got = to_host(*backend, int8.blob("fc"));
  float range = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    range = std::max(range, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(want[i] - got[i]));
  }
  ASSERT_GT(range, 0.0f);
  EXPECT_LT(worst, 0.1f * range) << "worst " << worst << " of " << range;
  EXPECT_GT(worst, 0.0f);  // int8 rounding did happen
}

}  // namespace
}  // namespace cnnscale
