// train's augmentation (train.crop_pad, train.mirror and their axes) sweeps, is recorded and groups the
// report's rows; its flags stay accepted in extra_args where a file gives neither key. The entries of
// train alone (Setting::no_key: the checkpoint and resume options, --batch-per-rank,
// --one-rank-exchange) are in train's --help but no experiment key or axis, each saying why.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/report_data.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

TEST(TrainOptions, ASweepOverTheAugmentationShowsEachPointInTheReport) {
  TempDir dir;
  const std::string file = dir.file("augment.yaml");
  std::ofstream(file) << "name: augment\ndataset: synthetic\niterations: 2\n"
                         "matrix:\n  network: [lenet]\n  batch: [4]\n  repeats: 1\n  crop_pad: [0, 2]\n"
                         "  mirror: [false, true]\n";
  const CliResult sweep = run_cnnscale({"sweep", file, "--results", dir.str() + "/res"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str() + "/res");
  ASSERT_EQ(runs.size(), 4u);
  std::set<std::string> described;
  for (const report::RunRecord& r : runs) described.insert(r.run_config.value("augment", std::string("none")));
  EXPECT_EQ(described, (std::set<std::string>{"none", "mirror", "random crop, pad 2", "random crop, pad 2, mirror"}));
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 4u);
  const report::VaryingKeys varying = report::varying_keys(groups);
  std::set<std::string> labels;
  for (const report::ConfigGroup& g : groups) labels.insert(report::variant_label(g, varying));
  EXPECT_EQ(labels, (std::set<std::string>{"crop_pad=0 mirror=false", "crop_pad=0 mirror=true",
                                           "crop_pad=2 mirror=false", "crop_pad=2 mirror=true"}));
}

TEST(TrainOptions, TheAugmentationReadsBackFromItsDescription) {
  const TrainSetting& pad = *find_train_setting("crop_pad");
  const TrainSetting& mirror = *find_train_setting("mirror");
  EXPECT_EQ(recorded_setting(pad, {{"augment", "random crop, pad 5, mirror"}}), 5);
  EXPECT_EQ(recorded_setting(mirror, {{"augment", "random crop, pad 5, mirror"}}), true);
  EXPECT_EQ(recorded_setting(pad, {{"augment", "mirror"}}), 0);
  EXPECT_EQ(recorded_setting(mirror, {{"augment", "random crop, pad 12"}}), false);
  // A run from before, or without augmentation, records none: the defaults.
  EXPECT_EQ(recorded_setting(pad, nlohmann::json::object()), 0);
  EXPECT_EQ(recorded_setting(mirror, nlohmann::json::object()), false);
  EXPECT_EQ(pad.experiment_key(), "train.crop_pad");
  EXPECT_EQ(mirror.arguments(true), std::vector<std::string>{"--mirror"});
}

TEST(TrainOptions, AugmentationFlagsInExtraArgsAreAcceptedUnlessTheFileGivesTheKey) {
  const std::string base = kBaseExperiment + "  repeats: 1\n";
  const Experiment e = parse(base + "extra_args: [--crop-pad, 2, --mirror]\n");
  for (const RunSpec& r : expand_runs(e)) EXPECT_EQ(flag_value(train_arguments(e, r, "/r"), "--crop-pad"), "2");
  expect_error(base + "train: {crop_pad: 1}\nextra_args: [--crop-pad, 2]\n",
               {"'--crop-pad' is set by train.crop_pad (or matrix.crop_pad)"});
  expect_error(base + "  mirror: [false, true]\nextra_args: [--mirror]\n", {"'--mirror' is set by train.mirror"});
}

TEST(TrainOptions, OptionsOfTrainAloneAreNoExperimentKeys) {
  const CliResult help = run_cnnscale({"train", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  std::set<std::string> alone;
  for (const TrainSetting& s : train_settings()) {
    if (s.in_experiments()) continue;
    alone.insert(s.name);
    EXPECT_NE(help.out.find(s.flag), std::string::npos) << s.flag;
    EXPECT_EQ(sweep_train_flags().count(s.flag), 0u) << s.flag;
    EXPECT_TRUE(s.report_label.empty() || s.report_label == "one_rank_exchange") << s.name;
    // Neither a key (top-level or train's) nor an axis.
    const std::string v = s.type == SettingType::Switch ? "true" : "1";
    expect_error(kBaseExperiment, {"matrix." + s.name, "unknown key"}, {fmt::format("matrix.{}=[{}]", s.name, v)});
    expect_error(kBaseExperiment, {s.name, "unknown key"}, {fmt::format("train.{}={}", s.name, v)});
    expect_error(kBaseExperiment, {s.name, "unknown key"}, {fmt::format("{}={}", s.name, v)});
  }
  EXPECT_EQ(alone, (std::set<std::string>{"checkpoint_dir", "checkpoint_every", "resume", "resume_allow_changes",
                                          "batch_per_rank", "one_rank_exchange"}));
  // One rank kept on the data-parallel path is a configuration of its own, recorded where it does so.
  const TrainSetting& one = *find_train_setting("one_rank_exchange");
  EXPECT_TRUE(one.applies_to({.gpu = true, .world_size = 1, .exchanges = true}));
  EXPECT_FALSE(one.applies_to({.gpu = true, .world_size = 1}));
  EXPECT_FALSE(one.applies_to({.gpu = true, .world_size = 2, .exchanges = true}));
  EXPECT_TRUE(one.records(true));
  // The sweep's 1-GPU runs are its baselines: extra_args refuses it, saying so.
  expect_error(kBaseExperiment + "extra_args: [--one-rank-exchange]\n", {"'--one-rank-exchange' would make"});
}

}  // namespace
}  // namespace cnnscale::testing
