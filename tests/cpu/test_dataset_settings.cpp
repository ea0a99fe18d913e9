// The data set's settings, train's entries of section `dataset` (train_settings_data.cpp): a fixed key
// and a matrix axis reach the runs' command lines, their configurations and ids, and the report; the
// keys that are no axis say why; an axis that a network's data takes no part in is refused.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/report_data.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

const std::string kSynthetic =
    "name: t\ndataset: {name: synthetic, synthetic_fill: constant}\niterations: 1\n"
    "matrix:\n  network: [lenet]\n  batch: [4]\n  repeats: 1\n";

TEST(DatasetSettings, AnAxisIsTheRunsDataWhereTheFixedKeyStands) {
  const Experiment axis = parse(kSynthetic + "  train_samples: [32, 64]\n");
  const std::vector<RunSpec> runs = expand_runs(axis);
  ASSERT_EQ(runs.size(), 2u);
  for (const RunSpec& r : runs) {
    const int64_t n = r.settings.at("train_samples").get<int64_t>();
    EXPECT_NE(r.id.find(fmt::format("-train_samples{}-", n)), std::string::npos) << r.id;
    EXPECT_EQ(r.config["data"]["train_samples"], n);
    const std::vector<std::string> args = train_arguments(axis, r, "/r");
    EXPECT_EQ(flag_value(args, "--train-samples"), std::to_string(n));
    EXPECT_EQ(flag_value(args, "--synthetic-fill"), "constant");  // the fixed key beside it
    EXPECT_EQ(std::count(args.begin(), args.end(), "--train-samples"), 1);
    // The same configuration as the fixed key's: only the id's axis part tells them apart.
    const Experiment fixed = parse(kSynthetic, {fmt::format("dataset.train_samples={}", n)});
    const RunSpec f = expand_runs(fixed).at(0);
    EXPECT_EQ(f.config_hash, r.config_hash);
    EXPECT_EQ(f.dataset.arguments(), r.dataset.arguments());
    EXPECT_EQ(f.id, r.id.substr(0, r.id.find("-train_samples")) + r.id.substr(r.id.find("-r1-")));
  }
  // --only selects by the point's value.
  EXPECT_TRUE(parse_only({"train_samples=32"}).matches(runs[0]));
  EXPECT_FALSE(parse_only({"train_samples=32"}).matches(runs[1]));
}

TEST(DatasetSettings, AnEpochIsTheAxissTrainingSamples) {
  const Experiment e = parse(
      "name: t\ndataset: synthetic\nepochs: 1\nmatrix:\n  network: [lenet]\n  batch: [8]\n"
      "  repeats: 1\n  train_samples: [16, 64]\n");
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].iterations, 2);
  EXPECT_EQ(runs[1].iterations, 8);
}

TEST(DatasetSettings, SyntheticKeysAsAxesNeedEveryNetworksDataSynthetic) {
  const std::string plain =
      "name: t\ndataset: synthetic\niterations: 1\nmatrix:\n  network: [lenet]\n  batch: [4]\n"
      "  repeats: 1\n";
  const Experiment e = parse(plain +
                             "  synthetic_fill: [gaussian, constant]\n  classes: [5, 7]\n"
                             "  input_shape: [[1, 28, 28], [1, 32, 32]]\n");
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 8u);
  std::set<std::string> words;
  for (const RunSpec& r : runs) {
    const std::vector<std::string> args = train_arguments(e, r, "/r");
    words.insert(flag_value(args, "--synthetic-fill") + " " + flag_value(args, "--classes") + " " +
                 flag_value(args, "--input-shape"));
    EXPECT_NE(r.id.find("-input_shape1_"), std::string::npos) << r.id;
  }
  EXPECT_EQ(words.size(), 8u);
  EXPECT_TRUE(words.count("constant 7 1,32,32"));
  // One list is one shape; a shape is three extents.
  EXPECT_EQ(expand_runs(parse(kSynthetic + "  input_shape: [1, 28, 28]\n")).size(), 1u);
  expect_error(kSynthetic + "  input_shape: [[1, 28]]\n", {"matrix.input_shape[0]", "expected [C, H, W]"});
  // Fashion-MNIST has no fill, classes or shape to choose.
  const std::string fmnist =
      "name: t\ndataset: fashion-mnist\niterations: 1\nmatrix:\n  network: [lenet]\n"
      "  batch: [4]\n";
  expect_error(
      fmnist + "  synthetic_fill: [gaussian, constant]\n",
      {"t.yaml:7:", "matrix.synthetic_fill", "applies to synthetic data only", "lenet trains on fashion-mnist"});
  expect_error(fmnist + "  classes: [5]\n", {"matrix.classes", "synthetic data only"});
  EXPECT_EQ(expand_runs(parse(fmnist + "  repeats: 1\n  train_samples: [100, 200]\n")).size(), 2u);
  // A network's own data giving the key the axis sweeps.
  expect_error(
      kSynthetic + "  train_samples: [32]\nnetworks:\n  lenet:\n    dataset: {name: synthetic, train_samples: 8}\n",
      {"matrix.train_samples", "given twice", "networks.lenet.dataset.train_samples"});
}

TEST(DatasetSettings, KeysThatAreNoAxisSayWhyAndTheirFlagsStayTheDatasetSections) {
  for (const char* name : {"name", "data_dir", "test_samples"}) {
    const TrainSetting& s = *find_train_setting(name);
    EXPECT_FALSE(s.no_axis.empty()) << name;
    expect_error(kSynthetic + fmt::format("  {}: [1]\n", name),
                 {fmt::format("matrix.{}", name), "a fixed key (dataset.", "no axis"});
  }
  for (const char* name : {"train_samples", "synthetic_fill", "classes", "input_shape"})
    EXPECT_TRUE(find_train_setting(name)->no_axis.empty()) << name;
  expect_error(kSynthetic + "extra_args: [--test-samples, '0']\n",
               {"extra_args[0]", "'--test-samples' is set by dataset.test_samples"});
  expect_error(kSynthetic + "extra_args: [--data-dir, /tmp]\n", {"'--data-dir' is set by dataset.data_dir"});
  expect_error(kSynthetic + "extra_args: [--train-samples, '8']\n",
               {"'--train-samples' is set by dataset.train_samples (or matrix.train_samples)"});
}

TEST(DatasetSettings, TheReportLeavesOutTheSizeARunChoseItself) {
  const TrainSetting& s = *find_train_setting("train_samples");
  ASSERT_TRUE(s.report_text);
  // Synthetic data is max(1024, batch) samples unless given; a named set is its whole training set.
  EXPECT_EQ(s.report_text(4096, {{"data", "synthetic"}, {"batch", 4096}}), "default");
  EXPECT_EQ(s.report_text(1024, {{"data", "synthetic"}, {"batch", 4}}), "default");
  EXPECT_EQ(s.report_text(64, {{"data", "synthetic"}, {"batch", 4}}), "64");
  EXPECT_EQ(s.report_text(60000, {{"data", "fashion-mnist"}, {"batch", 4}}), "default");
  EXPECT_EQ(s.report_text(1000, {{"data", "fashion-mnist"}, {"batch", 4}}), "1000");
  EXPECT_EQ(s.report_text(60000, {{"data", "hdf5:/x"}, {"batch", 4}}), "60000");  // its size is in its files
}

// A sweep over a dataset axis beside a dataset key: each run trains on its value, records it, and the
// report keeps the points apart under their values.
TEST(DatasetSettings, ASweepOverTheDataShowsEachPointInTheReport) {
  TempDir dir;
  const std::string file = dir.file("data.yaml");
  std::ofstream(file) << "name: data\ndataset: {name: synthetic, classes: 5}\niterations: 1\nseeds: fixed\n"
                         "matrix:\n  network: [lenet]\n  batch: [4]\n  repeats: 1\n  train_samples: [32, 64]\n"
                         "  synthetic_fill: [gaussian, constant]\n";
  const CliResult sweep = run_cnnscale({"sweep", file, "--results", dir.str() + "/res"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str() + "/res");
  ASSERT_EQ(runs.size(), 4u);
  for (const report::RunRecord& r : runs) {
    const int64_t n = r.run_config.at("train_samples").get<int64_t>();
    EXPECT_NE(r.run_id.find(fmt::format("-train_samples{}-", n)), std::string::npos) << r.run_id;
    EXPECT_EQ(r.run_config.at("classes"), 5);
    EXPECT_EQ(r.run_config.at("synthetic_fill") == "constant",
              r.run_id.find("-synthetic_fillconstant-") != std::string::npos);
  }
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 4u);
  std::set<std::string> labels;
  const report::VaryingKeys varying = report::varying_keys(groups);
  for (const report::ConfigGroup& g : groups) {
    EXPECT_EQ(g.key.at("classes"), "5");
    labels.insert(report::variant_label(g, varying));
  }
  EXPECT_EQ(labels, (std::set<std::string>{
                        "data=synthetic(gaussian) train_samples=32", "data=synthetic(gaussian) train_samples=64",
                        "data=synthetic(constant) train_samples=32", "data=synthetic(constant) train_samples=64"}));
  const CliResult rep = run_cnnscale({"report", dir.str() + "/res", "--no-plots"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  std::ifstream in(dir.str() + "/res/report/report.md");
  const std::string md((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(md.find("data=synthetic(constant) train_samples=64"), std::string::npos) << md;
}

// Two data sets differ in their size, classes and shape as much as in their names: the variant says
// the name alone; within one data set a swept size still shows.
TEST(DatasetSettings, TheVariantNamesTwoDataSetsByNameAndASizeSweptWithinOne) {
  using report::Identity;
  const Identity synthetic = {{"data", "synthetic(gaussian)"}, {"train_samples", "default"}, {"classes", "10"},
                              {"input_shape", "1,28,28"}};
  const Identity fmnist = {{"data", "fashion-mnist"}, {"train_samples", "250"}, {"classes", ""}, {"input_shape", ""}};
  report::VaryingKeys v = report::varying_keys({{"lenet", synthetic}, {"lenet", fmnist}});
  EXPECT_EQ(v["lenet"], std::vector<std::string>{"data"});
  Identity smaller = synthetic;
  smaller["train_samples"] = "64";
  v = report::varying_keys({{"lenet", synthetic}, {"lenet", fmnist}, {"lenet", smaller}});
  EXPECT_EQ(v["lenet"], (std::vector<std::string>{"data", "train_samples"}));
}

}  // namespace
}  // namespace cnnscale::testing
