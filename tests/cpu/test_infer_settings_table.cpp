// Every setting of infer's table (experiment/command_settings.hpp) is where the table says it goes in
// an inference experiment: a key of the infer: section (on each run's command line and, by its
// entry's rule, in the run's configuration), a matrix axis or a top-level key; infer's own (the
// scenarios') are refused in extra_args. --help is checked for every table in test_command_settings.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "cpu/experiment_test_util.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale::testing {
namespace {

// The words of `args` from `flag` on, as many as `expected` holds.
std::vector<std::string> words_at(const std::vector<std::string>& args, const std::vector<std::string>& expected) {
  const auto at = std::find(args.begin(), args.end(), expected.front());
  if (at == args.end() || args.end() - at < static_cast<ptrdiff_t>(expected.size())) return {};
  return {at, at + static_cast<ptrdiff_t>(expected.size())};
}

TEST(InferSettingsTable, EveryInferSectionEntryIsAKeyOnTheCommandLineAndInTheRecordedConfiguration) {
  const Experiment base = parse(kInferExperiment, {}, gpu_host(2));
  const RunSpec base_run = expand_runs(base).front();
  int keys = 0;
  for (const Setting& s : infer_settings()) {
    if (s.section != "infer" || s.name == "batch" || s.name == "calibration") continue;
    ++keys;
    const nlohmann::json v = other_value(s, base.infer.settings.at(s.name));
    const Experiment e = parse(kInferExperiment, {fmt::format("{}={}", s.experiment_key(), v.dump())}, gpu_host(2));
    const RunSpec r = expand_runs(e).front();
    const std::vector<std::string> expected = s.arguments(v);
    EXPECT_EQ(words_at(infer_arguments(e, r, "/r"), expected), expected) << s.name;
    EXPECT_EQ(r.config["infer"][s.name], v) << s.name;
    EXPECT_NE(r.id, base_run.id) << s.name;  // another value is another run
    // Given twice, as the key and in extra_args: refused, naming the key.
    expect_error(kInferExperiment + "extra_args: [" + s.flag + (s.type == SettingType::Switch ? "" : ", \"1\"") + "]",
                 {"is set by " + s.experiment_key()}, {fmt::format("{}={}", s.experiment_key(), v.dump())},
                 gpu_host(2));
  }
  EXPECT_GE(keys, 10);
  // The batch list and an int8 run's table: their own readers, on the command line and recorded.
  const Experiment b = parse(
      kInferExperiment, {"infer.batch=[2, 4]", "matrix.precision=[int8]", "infer.calibration=synthetic"}, gpu_host(2));
  const RunSpec r = expand_runs(b).front();
  const std::vector<std::string> args = infer_arguments(b, r, "/r");
  EXPECT_EQ(flag_value(args, find_setting(infer_settings(), "batch")->flag), "2,4");
  EXPECT_EQ(flag_value(args, find_setting(infer_settings(), "calibration")->flag), "synthetic");
  EXPECT_EQ(r.config["infer"]["batch"], nlohmann::json({"2", "4"}));
  EXPECT_EQ(r.config["infer"]["calibration"], "synthetic");
}

TEST(InferSettingsTable, NewKeysAtTheirDefaultsLeaveRunIdsAndCommandLinesAlone) {
  const Experiment base = parse(kInferExperiment, {}, gpu_host(2));
  const RunSpec base_run = expand_runs(base).front();
  for (const Setting& s : infer_settings()) {
    if (s.section != "infer" || s.record != Record::NotDefault || s.name == "calibration") continue;
    const Experiment e =
        parse(kInferExperiment, {fmt::format("infer.{}={}", s.name, s.default_value.dump())}, gpu_host(2));
    EXPECT_EQ(expand_runs(e).front().id, base_run.id) << s.name;
    EXPECT_FALSE(expand_runs(e).front().config["infer"].contains(s.name)) << s.name;
  }
  // Not given, such a flag may come from extra_args, as before the key existed.
  const Experiment e = parse(kInferExperiment + "extra_args: [--warmup, \"1\", --power-hz, \"0\"]\n", {}, gpu_host(2));
  EXPECT_EQ(flag_value(infer_arguments(e, expand_runs(e).front(), "/r"), "--warmup"), "1");
}

TEST(InferSettingsTable, MatrixAndTopLevelEntriesAreTheSweepsAndTheScenariosAreRefused) {
  for (const Setting& s : infer_settings()) {
    const Experiment e = parse(kInferExperiment, {}, gpu_host(2));
    const std::vector<std::string> args = infer_arguments(e, expand_runs(e).front(), "/r");
    if (s.section == "matrix" || (s.section.empty() && s.identity())) {
      // Written by the sweep from its key (gpu_mix: a job of 2+ ranks only), refused in extra_args.
      if (s.name != "gpu_mix") EXPECT_NE(flag_value(args, s.flag), "<absent>") << s.name;
      expect_error(kInferExperiment + "extra_args: [" + s.flag + ", \"1\"]", {"is set by"}, {}, gpu_host(2));
    } else if (s.section.empty() && s.name != "checkpoint") {
      expect_error(kInferExperiment + "extra_args: [" + s.flag + ", \"1\"]", {"offline scenario"}, {}, gpu_host(2));
    }
  }
  const Experiment two = parse(kInferExperiment, {"matrix.gpu_mix=[[0, 1]]"}, gpu_host(2));
  const RunSpec job = expand_runs(two).back();
  ASSERT_EQ(job.gpu_mix.size(), 2u);
  EXPECT_EQ(flag_value(infer_arguments(two, job, "/r"), "--gpus"), "0,1");
  const Experiment seeded = parse(kInferExperiment, {"seed=7"}, gpu_host(2));
  EXPECT_EQ(flag_value(infer_arguments(seeded, expand_runs(seeded).front(), "/r"), "--seed"), "7");
}

}  // namespace
}  // namespace cnnscale::testing
