// A setting's key written without a value (YAML null: `display: ~`, or nothing after the colon) would
// be read as a key left out, its default run without a word: refused at its key path, in every place
// an experiment gives a setting, unless the table says what null means for it.
#include <gtest/gtest.h>

#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment_reader.hpp"

namespace cnnscale::testing {
namespace {

TEST(SettingsNull, ANullSettingIsRefusedAtItsKeyPath) {
  expect_error(kBaseExperiment + "train: {display: ~}\n",
               {"t.yaml:8:", "train.display", "no value (null)", "leave the key out for its default (50)"});
  expect_error(kBaseExperiment + "train:\n  display:\n  fuse: false\n", {"train.display", "no value (null)"});
  expect_error(kBaseExperiment + "solver: {lr: null}\n", {"solver.lr", "no value (null)"});
  expect_error("seed: ~\n" + kBaseExperiment, {"t.yaml:1:", "seed", "no value (null)"});
  expect_error(kBaseExperiment + "  lr: ~\n", {"matrix.lr", "no value (null)"});
  expect_error(kBaseExperiment + "  allreduce: [{overlap: true, dtype: ~}]\n",
               {"matrix.allreduce[0].dtype", "no value (null)"});
  std::string data = kBaseExperiment;
  data.replace(data.find("dataset: synthetic"), 18, "dataset: {name: synthetic, classes: ~}");
  expect_error(data, {"dataset.classes", "no value (null)"});
  // As an override too.
  expect_error(kBaseExperiment, {"train.display", "no value (null)"}, {"train.display=~"});
  // An inference experiment's settings alike.
  expect_error("name: i\nmode: infer\ndevice: cpu\ninfer: {batch: [1], seconds: ~}\nmatrix: {network: [lenet]}\n",
               {"infer.seconds", "no value (null)"});
}

// An entry that says what null means for it takes null: the reader leaves it to the code using it.
TEST(SettingsNull, AnEntryThatGivesNullAMeaningTakesIt) {
  SettingTable table = {number_setting("window", 1.0, "a window", 0, 10)};
  const ConfigNode root = ConfigNode::load_string("window: ~\n", "t.yaml");
  const ExperimentReader r(root, {});
  try {
    refuse_null_settings(r, r.root(), table, {"window"});
    ADD_FAILURE() << "null taken without a meaning";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("t.yaml:1:"), std::string::npos) << e.what();
  }
  table[0].null_means = "no window";
  EXPECT_NO_THROW(refuse_null_settings(r, r.root(), table, {"window"}));
}

}  // namespace
}  // namespace cnnscale::testing
