// A key given twice in one mapping of a network or experiment file (or a command-line override) is
// an error naming both places, file:line:col each; yaml-cpp alone would keep the first silently.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.hpp"
#include "core/config.hpp"
#include "core/yaml_unique_keys.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

// The ConfigError message of `load`, or a test failure when it throws none.
template <typename F>
std::string config_error(F load) {
  try {
    load();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

TEST(YamlDuplicateKeys, NetworkFileNamesBothPlaces) {
  const std::string text =
      "name: t\n"                                // 1
      "input: {shape: [1, 8, 8], classes: 3}\n"  // 2
      "layers:\n"                                // 3
      "  - name: fc\n"                           // 4
      "    type: InnerProduct\n"                 // 5
      "    bottom: data\n"                       // 6
      "    top: fc\n"                            // 7
      "    num_output: 3\n"                      // 8
      "    num_output: 30\n";                    // 9
  const std::string msg = config_error([&] { NetSpec::load_string(text, "net.yaml"); });
  EXPECT_EQ(msg, "net.yaml:9:5: layers[0].num_output: duplicate key 'num_output' (first at net.yaml:8:5)");
}

TEST(YamlDuplicateKeys, FlowMappingsAndTopLevelKeys) {
  const std::string flow = "name: t\ninput: {shape: [1, 8, 8], classes: 3, classes: 4}\nlayers: []\n";
  EXPECT_EQ(config_error([&] { NetSpec::load_string(flow, "n.yaml"); }),
            "n.yaml:2:39: input.classes: duplicate key 'classes' (first at n.yaml:2:27)");
  const std::string top = "name: a\ninput: {shape: [1, 8, 8], classes: 3}\nname: b\nlayers: []\n";
  EXPECT_EQ(config_error([&] { NetSpec::load_string(top, "n.yaml"); }),
            "n.yaml:3:1: name: duplicate key 'name' (first at n.yaml:1:1)");
}

TEST(YamlDuplicateKeys, ExperimentFileAndOverride) {
  // Line 6 is kBaseExperiment's `batch: [8, 16]`, line 8 the second batch.
  testing::expect_error(testing::kBaseExperiment + "  batch: [32]\n",
                        {"t.yaml:8:3: matrix.batch: duplicate key 'batch' (first at t.yaml:6:3)"});
  testing::expect_error(testing::kBaseExperiment,
                        {"command line 'solver={lr: 0.1, lr: 0.2}':1:11: solver.lr: duplicate key 'lr' "
                         "(first at command line 'solver={lr: 0.1, lr: 0.2}':1:2)"},
                        {"solver={lr: 0.1, lr: 0.2}"});
}

TEST(YamlDuplicateKeys, EqualKeysInDifferentMappingsAndAliasesAreFine) {
  // `name` in every layer, and one anchored mapping used twice: no key is given twice in one mapping.
  const std::string text =
      "a: &p {x: 1, y: 2}\n"
      "b: *p\n"
      "c: [{name: l1}, {name: l2}]\n"
      "d: {a: {a: 1}}\n";
  EXPECT_NO_THROW(ConfigNode::load_string(text, "ok.yaml"));
}

TEST(YamlDuplicateKeys, NestedDeeplyAndInsideSequences) {
  const std::string text = "a:\n  - b:\n      c: 1\n      d: 2\n      c: 3\n";
  EXPECT_EQ(config_error([&] { ConfigNode::load_string(text, "x.yaml"); }),
            "x.yaml:5:7: a[0].b.c: duplicate key 'c' (first at x.yaml:3:7)");
  // A deep nesting (as deep as yaml-cpp itself reads) is walked without recursion, and a duplicate at
  // the bottom is found.
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  deep += "{k: 1, k: 2}";
  for (int i = 0; i < 300; ++i) deep += "]";
  YAML::Node node;
  try {
    node = YAML::Load(deep);
  } catch (const YAML::Exception&) {
    GTEST_SKIP() << "this yaml-cpp refuses a nesting of 300 itself";
  }
  EXPECT_NE(config_error([&] { check_unique_keys(node, "deep.yaml"); }).find("duplicate key 'k'"), std::string::npos);
}

// Through the executable: `netinfo` of a network file with a repeated key exits 2 with one line.
TEST(YamlDuplicateKeys, CliRefusesTheNetworkFile) {
  testing::TempDir dir;
  const std::string net = dir.file("dup.yaml");
  std::ofstream(net) << "name: dup\ninput: {shape: [1, 8, 8], classes: 3}\nlayers:\n"
                        "  - {name: fc, type: InnerProduct, bottom: data, top: fc, num_output: 3}\n"
                        "layers: []\n";
  testing::expect_usage_error({"netinfo", net},
                              {net + ":5:1: layers: duplicate key 'layers' (first at " + net + ":3:1)"});
}

}  // namespace
}  // namespace cnnscale
