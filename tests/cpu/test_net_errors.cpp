// Bad network files: every mistake is a ConfigError naming the file, the line:column of the
// offending key or value and its key path, also when the mistake sits inside an expanded block.
#include <gtest/gtest.h>

#include <regex>

#include "net/net.hpp"

namespace cnnscale {
namespace {

// "line:col" (1-based) of the `nth` occurrence of `needle` in `text`.
std::string position(const std::string& text, const std::string& needle, int nth = 0) {
  size_t at = text.find(needle);
  for (int i = 0; i < nth && at != std::string::npos; ++i) at = text.find(needle, at + 1);
  if (at == std::string::npos) throw std::runtime_error("test bug: '" + needle + "' not in text");
  size_t line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// Loads `text` as "net.yaml" and returns the ConfigError message (fails the test when none).
std::string load_error(const std::string& text, const NetOptions& options = {}) {
  try {
    NetSpec::load_string(text, "net.yaml", options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return "";
}

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

const std::string kNetTop = "name: t\ninput: {shape: [2, 8, 8], classes: 3}\n";

TEST(NetErrors, MalformedYaml) {
  std::string text = kNetTop + "layers:\n  - {name: conv1, type: Convolution, bottom: data\n  - oops\n";
  std::string msg = load_error(text);
  expect_contains(msg, {"YAML syntax error"});
  // yaml-cpp reports where it noticed the problem (the end of the text here).
  EXPECT_TRUE(std::regex_search(msg, std::regex("^net\\.yaml:[0-9]+:[0-9]+: "))) << msg;
}

TEST(NetErrors, UnknownLayerType) {
  std::string text = kNetTop + "layers:\n  - {name: conv1, type: Convolutoin, bottom: data, top: conv1}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "Convolutoin"), "layers[0].type",
                                     "unknown layer type 'Convolutoin'", "Convolution"});
}

TEST(NetErrors, UnknownKeyNamesItsPath) {
  std::string text = kNetTop +
                     "layers:\n"
                     "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3}\n"
                     "  - {name: relu1, type: ReLU, bottom: conv1, top: relu1}\n"
                     "  - {name: pool1, type: Pooling, bottom: relu1, top: pool1, kernal: 2}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "kernal"), "layers[2].kernal", "unknown key 'kernal'"});
}

TEST(NetErrors, UnknownTopLevelAndRepeatKeys) {
  std::string text = kNetTop + "layer:\n  - {name: a, type: ReLU, bottom: data, top: a}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "layer:"), "unknown key 'layer'"});
  std::string repeat = kNetTop +
                       "blocks:\n  b: {output: r, layers: [{name: r, type: ReLU, bottom: \"${in}\", top: r}]}\n"
                       "layers:\n  - repeat: {block: b, prefix: p, tims: 2}\n";
  expect_contains(load_error(repeat), {"net.yaml:" + position(repeat, "tims"), "layers[0].repeat.tims"});
}

TEST(NetErrors, BlobThatDoesNotExist) {
  std::string text = kNetTop +
                     "layers:\n"
                     "  - {name: relu1, type: ReLU, bottom: data, top: relu1}\n"
                     "  - {name: sum, type: Eltwise, bottom: [relu1, relu9], top: sum}\n";
  expect_contains(load_error(text),
                  {"net.yaml:" + position(text, "relu9"), "layers[1].bottom[1]", "blob 'relu9' does not exist"});
  // A layer may not read a blob that a later layer produces.
  std::string later = kNetTop +
                      "layers:\n"
                      "  - {name: a, type: ReLU, bottom: b, top: a}\n"
                      "  - {name: b, type: ReLU, bottom: data, top: b}\n";
  expect_contains(load_error(later), {"net.yaml:" + position(later, "b, top"), "layers[0].bottom", "'b'"});
}

TEST(NetErrors, MismatchedShapes) {
  std::string text = kNetTop +
                     "layers:\n"
                     "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3}\n"
                     "  - {name: conv2, type: Convolution, bottom: data, top: conv2, num_output: 4, kernel: 1}\n"
                     "  - {name: sum, type: Eltwise, bottom: [conv1, conv2], top: sum}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "{name: sum"), "layers[2]", "(1, 4, 6, 6)",
                                     "(1, 4, 8, 8)"});
}

TEST(NetErrors, DuplicateLayerNamesAndTops) {
  std::string names = kNetTop +
                      "layers:\n"
                      "  - {name: a, type: ReLU, bottom: data, top: a}\n"
                      "  - {name: a, type: ReLU, bottom: data, top: b}\n";
  expect_contains(load_error(names), {"net.yaml:" + position(names, "a, type", 1), "layers[1].name",
                                      "duplicate layer name 'a'", "net.yaml:" + position(names, "a, type")});
  std::string tops = kNetTop +
                     "layers:\n"
                     "  - {name: a, type: ReLU, bottom: data, top: x}\n"
                     "  - {name: b, type: ReLU, bottom: x, top: x}\n";
  expect_contains(load_error(tops), {"net.yaml:" + position(tops, "x}", 1), "layers[1].top",
                                     "already produced by layer 'a'"});
  std::string input = kNetTop + "layers:\n  - {name: a, type: ReLU, bottom: data, top: label}\n";
  expect_contains(load_error(input), {"layers[0].top", "network input"});
}

TEST(NetErrors, BottomAndTopCounts) {
  std::string text = kNetTop + "layers:\n  - {name: loss, type: SoftmaxWithLoss, bottom: data, top: loss}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "data, top"), "layers[0].bottom",
                                     "SoftmaxWithLoss takes 2 bottom(s), got 1"});
  std::string no_top = kNetTop + "layers:\n  - {name: a, type: ReLU, bottom: data}\n";
  expect_contains(load_error(no_top), {"net.yaml:" + position(no_top, "{name: a"), "layers[0]", "'top'"});
}

TEST(NetErrors, PhaseMismatch) {
  std::string text = kNetTop +
                     "layers:\n"
                     "  - {name: a, type: ReLU, bottom: data, top: a, phase: test}\n"
                     "  - {name: b, type: ReLU, bottom: a, top: b}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "a, top: b"), "layers[1].bottom",
                                     "produced only in phase test"});
  std::string bad = kNetTop + "layers:\n  - {name: a, type: ReLU, bottom: data, top: a, phase: training}\n";
  expect_contains(load_error(bad), {"net.yaml:" + position(bad, "training"), "layers[0].phase"});
}

TEST(NetErrors, BadInputSection) {
  std::string text = "name: t\ninput: {shape: [2, 8], classes: 3}\nlayers:\n  - {name: a, type: ReLU, bottom: data, top: a}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "[2, 8]"), "input.shape", "[channels, height, width]"});
  std::string classes = "name: t\ninput: {shape: [2, 8, 8], classes: many}\nlayers: []\n";
  expect_contains(load_error(classes), {"net.yaml:" + position(classes, "many"), "input.classes"});
}

TEST(NetErrors, Variables) {
  std::string text = kNetTop +
                     "vars: {w: 4}\n"
                     "layers:\n"
                     "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: \"${widht*2}\", kernel: 3}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "\"${widht"), "layers[0].num_output",
                                     "unknown variable 'widht'"});
  std::string open = kNetTop + "layers:\n  - {name: a, type: InnerProduct, bottom: data, top: a, num_output: \"${classes\"}\n";
  expect_contains(load_error(open), {"net.yaml:" + position(open, "\"${classes"), "layers[0].num_output", "unterminated"});
  std::string reserved = kNetTop + "vars: {classes: 4}\nlayers: []\n";
  expect_contains(load_error(reserved), {"vars.classes", "built-in"});
  std::string division = kNetTop + "vars: {w: \"${classes/0}\"}\nlayers: []\n";
  expect_contains(load_error(division), {"net.yaml:" + position(division, "\"${classes/0}"), "division by zero"});
  // INT64_MIN / -1 trapped (SIGFPE) and -INT64_MIN wrapped; both are overflows like a * b's.
  for (const char* expr : {"(0-9223372036854775807-1)/(0-1)", "(0-9223372036854775807-1)%(0-1)",
                           "-(0-9223372036854775807-1)"}) {
    std::string wrap = kNetTop + "vars: {w: \"${" + expr + "}\"}\nlayers: []\n";
    expect_contains(load_error(wrap), {"net.yaml:" + position(wrap, "\"${"), "vars.w", "integer overflow"});
  }
}

// Blocks: the error points at the key inside `blocks:` and says which instance was being built.
TEST(NetErrors, InsideABlockFromAFile) {
  const std::string file = std::string(CNNSCALE_TEST_DATA) + "/bad_network.yaml";
  try {
    NetSpec::load(file);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"bad_network.yaml:15:9", "blocks.plain.layers[0].kernal", "unknown key 'kernal'",
                               "instance stage_1", "layers[0].repeat"});
  }
}

TEST(NetErrors, BlockArguments) {
  std::string blocks = kNetTop +
                       "blocks:\n"
                       "  b:\n"
                       "    params: {filters: ~}\n"
                       "    output: r\n"
                       "    layers: [{name: r, type: ReLU, bottom: \"${in}\", top: r}]\n";
  std::string missing = blocks + "layers:\n  - repeat: {block: b, prefix: p}\n";
  expect_contains(load_error(missing), {"net.yaml:" + position(missing, "{block: b"), "layers[0].repeat",
                                        "needs argument 'filters'"});
  std::string unknown = blocks + "layers:\n  - repeat: {block: b, prefix: p, args: {filters: 2, widht: 3}}\n";
  expect_contains(load_error(unknown), {"net.yaml:" + position(unknown, "3}}"), "layers[0].repeat.args.widht",
                                        "no parameter 'widht'"});
  std::string no_block = blocks + "layers:\n  - repeat: {block: c, prefix: p}\n";
  expect_contains(load_error(no_block), {"net.yaml:" + position(no_block, "c, prefix"), "unknown block 'c'"});
  std::string bad_output = kNetTop +
                           "blocks:\n  b: {output: q, layers: [{name: r, type: ReLU, bottom: \"${in}\", top: r}]}\n"
                           "layers:\n  - repeat: {block: b, prefix: p}\n";
  expect_contains(load_error(bad_output), {"net.yaml:" + position(bad_output, "q, layers"), "blocks.b.output",
                                           "'q' is not a top"});
}

TEST(NetErrors, OptionsOverrides) {
  std::string text = kNetTop + "layers:\n  - {name: a, type: ReLU, bottom: data, top: a}\n";
  NetOptions zero;
  zero.classes = 0;
  expect_contains(load_error(text, zero), {"--classes"});
  NetOptions two;
  two.input_shape = std::vector<int64_t>{3, 4};
  expect_contains(load_error(text, two), {"--input-shape"});
}

// Sizes from a network file are computed in 64 bits without overflow and bounded (one extent at most
// 2^31 - 1, one tensor and all parameters at most 2^40 elements: core/checked_math.hpp) while the
// shapes are inferred, before anything is allocated (NetSpec allocates nothing). Before, most of
// these loaded silently (LeNet with pad 2147483645 trained on an 18x18 output), the pooling one
// failed as "does not fit" and the repeat ran for hours.
TEST(NetErrors, PadNearIntMaxIsRefusedAtThePad) {
  const std::string conv = kNetTop +
                           "layers:\n  - {name: c, type: Convolution, bottom: data, top: c, num_output: 4, kernel: 5, "
                           "pad: 2147483645}\n";
  // 8 + 2 x 2147483645 - 5 + 1 = 4294967294 a side; `2 * pad` in int wrapped to -6 (LeNet: 28 -> 18).
  expect_contains(load_error(conv), {"net.yaml:" + position(conv, "2147483645"), "layers[0].pad",
                                     "output of 4294967294x4294967294", "more than 2147483647 a side"});
  const std::string pool = kNetTop +
                           "layers:\n  - {name: p, type: Pooling, bottom: data, top: p, kernel: 2147483647, "
                           "pad: 2147483646, stride: 1}\n";
  // 8 + 2 x 2147483646 - 2147483647 + 1 = 2147483654 a side (the wrapped pad made it "does not fit").
  expect_contains(load_error(pool), {"net.yaml:" + position(pool, "2147483646"), "layers[0].pad",
                                     "output of 2147483654x2147483654"});
}

TEST(NetErrors, TensorsBeyondTheBoundAreRefusedAtTheirLayer) {
  const std::string big_in = "name: t\ninput: {shape: [1, 1024, 1024], classes: 3}\n";
  // (2147483647, 1048576) weights: 2^51 elements.
  const std::string fc =
      big_in + "layers:\n  - {name: f, type: InnerProduct, bottom: data, top: f, num_output: 2147483647}\n";
  expect_contains(load_error(fc), {"net.yaml:" + position(fc, "{name: f"), "layers[0]", "parameter 'weight'",
                                   "(2147483647, 1048576): more than 2^40 elements"});
  const std::string blob = big_in +
                           "layers:\n  - {name: c, type: Convolution, bottom: data, top: c, num_output: 2147483647, "
                           "kernel: 1}\n";
  expect_contains(load_error(blob), {"net.yaml:" + position(blob, "c, num_output"), "layers[0].top", "blob 'c'",
                                     "(1, 2147483647, 1024, 1024): more than 2^40 elements"});
  // Two 0.73 x 2^40 weight matrices: each fits, together they pass the bound of one flat buffer.
  const std::string total = big_in +
                            "layers:\n"
                            "  - {name: f, type: InnerProduct, bottom: data, top: f, num_output: 700000}\n"
                            "  - {name: g, type: InnerProduct, bottom: data, top: g, num_output: 700000}\n";
  expect_contains(load_error(total), {"net.yaml:" + position(total, "{name: g"), "layers[1]",
                                      "parameters add up to more than 2^40"});
  const std::string input = "name: t\ninput: {shape: [1048576, 1048576, 2], classes: 3}\nlayers: []\n";
  expect_contains(load_error(input), {"net.yaml:" + position(input, "[1048576"), "input.shape",
                                      "(1048576, 1048576, 2): more than 2^40 elements"});
  NetOptions wide;
  wide.input_shape = std::vector<int64_t>{1, 1, int64_t{1} << 32};
  expect_contains(load_error(kNetTop + "layers: []\n", wide), {"--input-shape", "an extent of 4294967296"});
  // 3 x 2^30 channels: a 32-bit extent no more.
  const std::string concat = "name: t\ninput: {shape: [1073741824, 1, 1], classes: 3}\n"
                             "layers:\n  - {name: k, type: Concat, bottom: [data, data, data], top: k}\n";
  expect_contains(load_error(concat), {"net.yaml:" + position(concat, "{name: k"), "layers[0]",
                                       "channels add up to more than 2147483647"});
}

TEST(NetErrors, HugeRepeatCountIsRefusedBeforeExpanding) {
  // Each instance re-parses the file: two billion of them ran for hours before the first check.
  const std::string text = kNetTop +
                           "blocks:\n  b: {output: r, layers: [{name: r, type: ReLU, bottom: \"${in}\", top: r}]}\n"
                           "layers:\n  - repeat: {block: b, prefix: p, times: 2000000000}\n";
  expect_contains(load_error(text), {"net.yaml:" + position(text, "2000000000"), "layers[0].repeat.times",
                                     "2000000000 instances of block 'b'", "more than 10000 layers"});
}

TEST(NetErrors, BatchBeyondTheBoundIsRefusedBeforeAllocating) {
  const NetSpec spec = NetSpec::load_string(
      kNetTop + "layers:\n  - {name: f, type: InnerProduct, bottom: data, top: f, num_output: 3}\n", "net.yaml");
  auto backend = make_backend("cpu");
  // 132 values a sample (128 of input, a label, 3 outputs) times 2^34 samples: past 2^40.
  try {
    Net net(spec, *backend, int64_t{1} << 34, 1);
    ADD_FAILURE() << "no error for a batch of 2^34";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"batch 17179869184", "net.yaml", "activation values per sample"});
  }
}

TEST(NetErrors, MissingFile) {
  try {
    NetSpec::load("/nonexistent/net.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/net.yaml"), std::string::npos);
  }
}

}  // namespace
}  // namespace cnnscale
