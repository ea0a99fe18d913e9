// The settings the experiment reads in forms of its own (experiment/train_settings_top.cpp): the
// network, the run's length, the device, the precision, the measure mode and the whole-training
// figures' size are entries of train's table like the rest: each is found in train's --help, the
// sweep's command lines by its flag, extra_args' refusals naming its place, the experiment's range
// (the same as the command line's), and the configuration a run records.
#include <gtest/gtest.h>

#include <map>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/report_data.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_run.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

const std::map<std::string, std::string> kTopPlaces = {{"network", "matrix.network"},
                                                       {"epochs", "epochs (or iterations)"},
                                                       {"iterations", "iterations (or epochs, iteration_scale)"},
                                                       {"device", "device"},
                                                       {"precision", "matrix.precision"},
                                                       {"measure", "measure"},
                                                       {"whole_epochs", "whole_epochs"},
                                                       {"whole_samples", "whole_samples"}};

TEST(SettingsTop, TheExperimentsOwnKeysAreTrainsEntries) {
  const CliResult help = run_cnnscale({"train", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const auto& [name, place] : kTopPlaces) {
    const TrainSetting* s = find_train_setting(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->part_of, name);  // read by the experiment's own code, not as a generic key
    EXPECT_NE(help.out.find(s->flag), std::string::npos) << s->flag;
    EXPECT_NE(help.out.find(s->help.substr(0, 30)), std::string::npos) << s->flag;
    EXPECT_EQ(s->experiment_place(), place);
    EXPECT_EQ(sweep_train_flags().at(s->flag), place) << s->flag;
    // The sweep writes it: extra_args may not repeat it.
    expect_error(kBaseExperiment + "extra_args: ['" + s->flag + "=1']", {fmt::format("'{}' is set by {}", s->flag, place)});
  }
  EXPECT_EQ(find_train_setting("network")->flag, "--net");
}

TEST(SettingsTop, TheRunsCommandLineGivesEachByItsFlag) {
  const Experiment e = parse(
      "name: t\ndataset: synthetic\nepochs: 2\nmeasure: phases\nwhole_epochs: 90\nwhole_samples: 1281167\n"
      "matrix:\n  network: [lenet]\n  batch: [8]\n  gpus: [1]\n  repeats: 1\n");
  const RunSpec r = expand_runs(e).at(0);
  const std::vector<std::string> args = train_arguments(e, r, "/r");
  const std::map<std::string, std::string> expected = {{"network", r.network_path}, {"epochs", "2"},
                                                       {"iterations", "<absent>"},  {"device", "cpu"},
                                                       {"precision", "fp32"},       {"measure", "phases"},
                                                       {"whole_epochs", "90"},      {"whole_samples", "1281167"}};
  for (const auto& [name, value] : expected) EXPECT_EQ(flag_value(args, find_train_setting(name)->flag), value) << name;
  // The length by iterations instead; the figures' size left to train.
  const Experiment it = parse(kBaseExperiment);
  const std::vector<std::string> it_args = train_arguments(it, expand_runs(it).at(0), "/r");
  EXPECT_EQ(flag_value(it_args, "--iterations"), "4");
  EXPECT_EQ(flag_value(it_args, "--epochs"), "<absent>");
  EXPECT_EQ(flag_value(it_args, "--whole-epochs"), "<absent>");
  EXPECT_EQ(flag_value(it_args, "--measure"), "steady");
}

TEST(SettingsTop, TheExperimentAndTheCommandLineCheckOneRange) {
  for (const char* name : {"epochs", "whole_epochs"}) {
    const TrainSetting& s = *find_train_setting(name);
    const std::string above = std::to_string(static_cast<int64_t>(s.max) + 1);
    expect_error(kBaseExperiment.substr(0, kBaseExperiment.find("iterations:")) + name + ": " + above + "\n" +
                     kBaseExperiment.substr(kBaseExperiment.find("matrix:")),
                 {name, s.range_error(s.max + 1)});
    const CliResult r = run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--no-results", s.flag, above});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(s.flag + ": " + s.range_error(s.max + 1)), std::string::npos) << r.err;
  }
  // The measure modes are the entry's choices, in the experiment too.
  expect_error(kBaseExperiment + "measure: kernels\n", {"measure"});
  TrainArgs a = default_train_args();
  EXPECT_EQ(a.measure_mode, "steady");
  a.measure_mode = "kernels";  // what the command line's choices keep out, refused by the run's checks too
  a.data = "synthetic";
  a.measure.no_results = true;
  EXPECT_THROW(validate_train_args(a), ConfigError);
}

TEST(SettingsTop, ARunRecordsTheDeviceItWasBoundToAndThePrecisionOffItsDefault) {
  TempDir dir;
  const CliResult r = run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "1", "--batch", "4",
                                    "--results", dir.str(), "--experiment", "e", "--run-id", "cpu1", "--min-window",
                                    "0", "--timing-warmup", "0", "--measure", "phases", "--phase-window", "0.01",
                                    "--phase-repeats", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str());
  ASSERT_EQ(runs.size(), 1u);
  const nlohmann::json& config = runs[0].run_config;
  EXPECT_EQ(recorded_setting(*find_train_setting("device"), config), "cpu");
  EXPECT_EQ(config.at("device"), "cpu");
  // fp32, the default: not recorded (the runs before precisions existed keep their ids).
  EXPECT_FALSE(config.contains("precision"));
  EXPECT_EQ(recorded_setting(*find_train_setting("precision"), config), "fp32");
  // How the run was measured and how long it ran are no part of its identity.
  for (const char* name : {"measure", "iterations", "epochs", "whole_epochs", "whole_samples", "network"})
    EXPECT_FALSE(config.contains(name)) << name;
  EXPECT_EQ(runs[0].text("measure"), "phases");
}

}  // namespace
}  // namespace cnnscale::testing
