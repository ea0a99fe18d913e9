// The report's variant label names a train setting only where it applied to the runs and varies
// among those compared: auto_start is no variant of an even split, a setting a run left untagged reads
// as its default rather than "none", and the 1-rank baseline of a sweep over a setting that does not
// apply to one rank (bucket_mb) is found.
#include <gtest/gtest.h>

#include <set>

#include "experiment/report_data.hpp"

namespace cnnscale::testing {
namespace {

// A run as a sweep's results hold it: one CPU rank or two, a split, the recorded configuration and
// the tags the sweep wrote.
report::RunRecord recorded_run(const std::string& id, int ranks, const std::string& split, nlohmann::json config,
                      std::map<std::string, std::string> tags) {
  report::RunRecord r;
  r.run_id = id;
  r.summary.net = std::string("lenet");
  r.summary.data = std::string("synthetic");
  r.summary.device = std::string("cpu");
  r.summary.precision = std::string("fp32");
  r.summary.measure = std::string("steady");
  r.summary.global_batch = 8;
  r.summary.world_size = ranks;
  if (ranks > 1) r.summary.split = split;
  r.summary.tags = std::move(tags);
  r.run_config = std::move(config);
  return r;
}

std::set<std::string> variant_labels(const std::vector<report::ConfigGroup>& groups) {
  const report::VaryingKeys varying = report::varying_keys(groups);
  std::set<std::string> out;
  for (const report::ConfigGroup& g : groups) out.insert(report::variant_label(g, varying));
  return out;
}

TEST(ReportVariantSettings, ASettingThatDidNotApplyIsNoVariantAndAnUntaggedOneIsItsDefault) {
  // A sweep of split [even, auto] on 2 ranks, one of its runs tagged display=1 (train.display's axis,
  // which the other point left at its default).
  const std::vector<report::RunRecord> runs = {
      recorded_run("even", 2, "even", nlohmann::json::object(), {{"display", "1"}}),
      recorded_run("auto", 2, "auto", {{"auto_start", "probe"}}, {}),
  };
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 2u);
  // Not "split=even display=1 auto_start=none": auto_start applied to the auto run alone.
  EXPECT_EQ(variant_labels(groups), (std::set<std::string>{"split=even display=1", "split=auto from even display=50"}));
}

TEST(ReportVariantSettings, ProbeSecondsIsNoVariantOfAnAutoSplitFromEvenShares) {
  // matrix.auto_start: [probe, even] x matrix.probe_seconds: [1, 2] on 2 ranks of split auto: the run
  // from even shares probes nothing, so it is made once, untagged.
  const std::vector<report::RunRecord> runs = {
      recorded_run("probe-1", 2, "auto", {{"auto_start", "probe"}}, {{"probe_seconds", "1"}}),
      recorded_run("probe-2", 2, "auto", {{"auto_start", "probe"}}, {{"probe_seconds", "2"}}),
      recorded_run("even", 2, "auto", {{"auto_start", "even"}}, {}),
  };
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 3u);
  // Not "probe_seconds=0.5" (its default) for the run from even shares: it did not apply there.
  EXPECT_EQ(variant_labels(groups), (std::set<std::string>{"auto_start=probe probe_seconds=1",
                                                           "auto_start=probe probe_seconds=2", "auto_start=even"}));
}

TEST(ReportVariantSettings, TheOneRankBaselineOfASweepOverAnExchangeSettingIsFound) {
  // matrix.bucket_mb: [1, 25] makes the 1-rank run once, untagged (bucket_mb does not apply to it).
  const std::vector<report::RunRecord> runs = {
      recorded_run("one", 1, "", nlohmann::json::object(), {}),
      recorded_run("two-1", 2, "even", nlohmann::json::object(), {{"bucket_mb", "1"}}),
      recorded_run("two-25", 2, "even", nlohmann::json::object(), {{"bucket_mb", "25"}}),
  };
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 3u);
  for (const report::ConfigGroup& g : groups) {
    if (g.world_size() == 1) continue;
    const report::ConfigGroup* base = report::baseline_of(g, groups);
    ASSERT_NE(base, nullptr) << g.runs.front()->run_id;
    EXPECT_EQ(base->runs.front()->run_id, "one");
  }
  // Results from before, with a 1-rank run per value: each 2-rank run's own value's.
  std::vector<report::RunRecord> older = runs;
  older[0] = recorded_run("one-1", 1, "", nlohmann::json::object(), {{"bucket_mb", "1"}});
  older.push_back(recorded_run("one-25", 1, "", nlohmann::json::object(), {{"bucket_mb", "25"}}));
  const std::vector<report::ConfigGroup> old_groups = report::group_runs(older);
  for (const report::ConfigGroup& g : old_groups) {
    if (g.world_size() != 2) continue;
    EXPECT_EQ(report::baseline_of(g, old_groups)->runs.front()->run_id,
              "one-" + g.runs.front()->summary.tags.at("bucket_mb"));
  }
}

}  // namespace
}  // namespace cnnscale::testing
