// The settings of one split, which train refuses with another (--auto-start without --split auto,
// --shares without --split manual): keys and axes of the experiment written only on the runs of that
// split, refused in an experiment that has none; and train's measurement options as keys and axes.
#include <gtest/gtest.h>

#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/report_data.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

// kBaseExperiment with one repeat and matrix.split (2-rank runs of each policy, the 1-rank ones even).
std::string with_splits(const std::string& splits) {
  return kBaseExperiment + "  repeats: 1\n  split: " + splits + "\nseeds: fixed\n";
}

TEST(SplitSettings, ApplyToTheirSplitOnly) {
  const TrainSetting& start = *find_train_setting("auto_start");
  const TrainSetting& shares = *find_train_setting("shares");
  EXPECT_TRUE(start.applies_to({.world_size = 2, .exchanges = true, .split = "auto"}));
  EXPECT_FALSE(start.applies_to({.world_size = 2, .exchanges = true, .split = "proportional"}));
  EXPECT_TRUE(shares.applies_to({.world_size = 2, .exchanges = true, .split = "manual"}));
  EXPECT_FALSE(shares.applies_to({.split = "even"}));
  EXPECT_TRUE(start.refused_elsewhere() && shares.refused_elsewhere());
  // The others are written on every run, where they apply or not (train ignores them there).
  EXPECT_FALSE(find_train_setting("rebalance_every")->refused_elsewhere());
  EXPECT_FALSE(find_train_setting("graph_copies")->refused_elsewhere());
  EXPECT_EQ(start.experiment_key(), "train.auto_start");
  EXPECT_EQ(shares.experiment_key(), "train.shares");
}

// A fixed train.auto_start goes on the command lines of the auto runs only: train refuses it elsewhere.
TEST(SplitSettings, AFixedAutoStartIsWrittenOnTheAutoRunsOnly) {
  const Experiment e = parse(with_splits("[even, auto]") + "train: {auto_start: even}\n");
  size_t auto_runs = 0;
  for (const RunSpec& r : expand_runs(e)) {
    const std::vector<std::string> args = train_arguments(e, r, "/r");
    const bool is_auto = r.ranks > 1 && r.split == "auto";
    EXPECT_EQ(flag_value(args, "--auto-start"), is_auto ? "even" : "<absent>") << r.id;
    auto_runs += is_auto;
  }
  EXPECT_EQ(auto_runs, 2u);  // batch 8 and 16 on 2 ranks
}

// matrix.auto_start multiplies the auto runs only: every other run is made once, without it (in its
// command line and its id), instead of once per value with a flag train would refuse.
TEST(SplitSettings, AnAutoStartAxisMultipliesTheAutoRunsOnly) {
  const Experiment e = parse(with_splits("[even, auto]"), {"matrix.auto_start=[probe, even]"});
  const std::vector<RunSpec> runs = expand_runs(e);
  // Per batch: one 1-rank run, one even 2-rank run, and the auto 2-rank run once per value.
  ASSERT_EQ(runs.size(), 2u * (1 + 1 + 2));
  std::set<std::string> ids, starts;
  for (const RunSpec& r : runs) {
    ids.insert(r.id);
    const std::string given = flag_value(train_arguments(e, r, "/r"), "--auto-start");
    if (r.ranks > 1 && r.split == "auto") {
      EXPECT_NE(r.id.find("-auto_start" + given + "-"), std::string::npos) << r.id;
      starts.insert(given);
    } else {
      EXPECT_EQ(given, "<absent>") << r.id;
      EXPECT_EQ(r.id.find("auto_start"), std::string::npos) << r.id;
      EXPECT_FALSE(r.settings.contains("auto_start")) << r.id;
    }
  }
  EXPECT_EQ(ids.size(), runs.size());
  EXPECT_EQ(starts, (std::set<std::string>{"probe", "even"}));
  // --only selects by it, as by any setting.
  const OnlyFilter only = parse_only({"auto_start=even"});
  size_t selected = 0;
  for (const RunSpec& r : runs) selected += only.matches(r) && r.split == "auto" && r.ranks > 1;
  EXPECT_EQ(selected, 2u);
}

// A key or axis of a split's setting in an experiment none of whose runs has that split would be
// dropped from every run, or fail every run: refused at its key path.
TEST(SplitSettings, AKeyForASplitTheExperimentNeverRunsIsRefusedAtItsPath) {
  expect_error(with_splits("[even, proportional]") + "train: {auto_start: even}\n",
               {"t.yaml:11:", "train.auto_start", "train takes --auto-start only on runs of split auto"});
  expect_error(with_splits("[even]"), {"matrix.auto_start", "--auto-start only on runs of split auto"},
               {"matrix.auto_start=[probe, even]"});
  // Split auto on one rank only is no auto run (one rank splits nothing).
  expect_error("name: t\ndataset: synthetic\niterations: 4\nmatrix:\n  network: [lenet]\n  batch: [8]\n"
               "  gpus: [1]\n  split: [auto]\ntrain: {auto_start: even}\n",
               {"t.yaml:9:", "train.auto_start", "split auto"});
  // No experiment has split manual (matrix.split cannot name it): its shares are always refused.
  expect_error(with_splits("[even, auto]") + "train: {shares: [4, 4]}\n",
               {"train.shares", "train takes --shares only on runs of split manual"});
  expect_error(kBaseExperiment, {"matrix.shares", "--shares only on runs of split manual"},
               {"matrix.shares=[[4, 4]]"});
  // A value train refuses is refused by the file too, at the key.
  expect_error(with_splits("[auto]") + "train: {auto_start: later}\n", {"train.auto_start", "probe", "even"});
  // Nor through extra_args, which every run gets.
  expect_error(with_splits("[auto]") + "extra_args: [--auto-start, even]\n",
               {"'--auto-start' is set by train.auto_start (or matrix.auto_start)"});
  expect_error(with_splits("[auto]") + "extra_args: [--shares, '4,4']\n",
               {"'--shares' is set by train.shares (or matrix.shares)"});
}

// On train's command line as before the table: the same words refuse a split's setting off its split,
// --shares takes one count per rank (comma-separated or as several words), and --auto-start is
// recorded on every auto run, where the report groups by it.
TEST(SplitSettings, TrainTakesThemAsBeforeAndTheReportGroupsByAutoStart) {
  TempDir dir;
  const std::vector<std::string> run = {"train", "--net", "lenet", "--data", "synthetic", "--iterations", "1",
                                        "--batch", "4", "--min-window", "0", "--timing-warmup", "0"};
  auto train = [&](std::vector<std::string> more) {
    std::vector<std::string> all = run;
    all.insert(all.end(), more.begin(), more.end());
    return run_cnnscale(all);
  };
  CliResult r = train({"--no-results", "--shares", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--shares applies to --split manual only"), std::string::npos) << r.err;
  r = train({"--no-results", "--auto-start", "even", "--split", "proportional"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--auto-start applies to --split auto only"), std::string::npos) << r.err;
  r = train({"--no-results", "--split", "manual", "--shares", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--shares: the shares sum to 3, but the global batch (--batch) is 4"), std::string::npos)
      << r.err;
  r = train({"--no-results", "--split", "manual", "--shares", "2,2"});
  EXPECT_EQ(r.exit_code, 2);  // two shares for one rank
  EXPECT_NE(r.err.find("--shares: 2 share(s) for 1 rank(s)"), std::string::npos) << r.err;
  r = train({"--no-results", "--split", "manual", "--shares", "2", "2"});
  EXPECT_NE(r.err.find("--shares: 2 share(s) for 1 rank(s)"), std::string::npos) << r.err;
  r = train({"--no-results", "--auto-start", "later"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--auto-start: later not in {probe,even}"), std::string::npos) << r.err;
  for (const char* start : {"probe", "even"}) {
    r = train({"--results", dir.str(), "--experiment", "e", "--run-id", start, "--split", "auto", "--auto-start",
               start});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str());
  ASSERT_EQ(runs.size(), 2u);
  for (const report::RunRecord& record : runs) {
    EXPECT_EQ(record.run_config.at("auto_start"), record.run_id);
    EXPECT_EQ(record.text("auto_start"), record.run_id);
  }
  EXPECT_EQ(report::group_runs(runs).size(), 2u);
}

// train's measurement options are keys of section train and matrix axes (the one-place test covers
// each); their --help reads as before, --test-batch without a default (the rank's batch stands for it).
TEST(MeasureSettings, AreTrainKeysAndTheirHelpReadsAsBefore) {
  for (const char* name : {"display", "data_threads", "test_batch", "pool_batches", "power_hz", "min_window",
                           "phase_window", "phase_repeats", "mfu", "mfu_window", "timing_warmup"}) {
    const TrainSetting* s = find_train_setting(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->section, "train") << name;
    EXPECT_FALSE(s->identity()) << name;  // how a run is measured: no part of its configuration
    EXPECT_EQ(s->report_label, s->name) << name;  // the sweep's tag of a run that sets it
  }
  const CliResult help = run_cnnscale({"train", "--help"});
  for (const char* line : {"--display INT:INT>=1=50 ", "--data-threads INT:INT>=1=1 ", "--pool-batches INT:INT>=1=8 ",
                           "--power-hz FLOAT=10 ", "--min-window FLOAT=3 ", "--phase-window FLOAT=1 ",
                           "--phase-repeats INT=3 ", "--mfu-window FLOAT=0.2 ", "--test-batch INT:INT>=1 ",
                           "--auto-start TEXT:{probe,even}=probe", "--shares INT ..."})
    EXPECT_NE(help.out.find(line), std::string::npos) << line << "\n" << help.out;
  // Their ranges are the table's, checked on the command line as the experiment schema checks them.
  const std::vector<std::string> base = {"train", "--net", "lenet", "--data", "synthetic", "--no-results"};
  auto refused = [&](std::vector<std::string> more, const std::string& words) {
    std::vector<std::string> all = base;
    all.insert(all.end(), more.begin(), more.end());
    const CliResult r = run_cnnscale(all);
    EXPECT_EQ(r.exit_code, 2) << words;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  };
  refused({"--display", "0"}, "--display: must be at least 1, got 0");
  refused({"--test-batch", "0"}, "--test-batch: must be at least 1, got 0");
  refused({"--power-hz", "2000"}, "--power-hz: must be in [0, 1000], got 2000");
  refused({"--phase-repeats", "0"}, "--phase-repeats: must be at least 1, got 0");
  refused({"--mfu-window", "0"}, "--mfu-window: must be in (0, 3600], got 0");
  // A sweep's fixed key: on every run's command line, tagged for the report.
  const Experiment e = parse(kBaseExperiment + "train: {display: 2, mfu: true}\n");
  for (const RunSpec& r : expand_runs(e)) {
    const std::vector<std::string> args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, "--display"), "2");
    EXPECT_NE(std::find(args.begin(), args.end(), "--mfu"), args.end());
    EXPECT_NE(std::find(args.begin(), args.end(), "display=2"), args.end());
    EXPECT_NE(std::find(args.begin(), args.end(), "mfu=true"), args.end());
  }
}

}  // namespace
}  // namespace cnnscale::testing
