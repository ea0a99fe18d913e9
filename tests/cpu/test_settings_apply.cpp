// A setting that does not apply to a run (Setting::applies: auto_start off split auto, graph_copies
// on a CPU run) changes nothing that run computes: it is no part of the run's identity, nor does an
// axis over it multiply the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

// kBaseExperiment with one repeat and matrix.split: 1-rank runs (even) and 2-rank runs of each policy.
std::string splits_experiment(const std::string& splits) {
  return kBaseExperiment + "  repeats: 1\n  split: " + splits + "\nseeds: fixed\n";
}

// Each run's id, by the point it stands for (batch, ranks, split).
std::map<std::string, std::string> ids_by_split_point(const Experiment& e) {
  std::map<std::string, std::string> ids;
  for (const RunSpec& r : expand_runs(e)) ids[fmt::format("b{}-g{}-{}", r.batch, r.ranks, r.split)] = r.id;
  return ids;
}

TEST(SettingsApply, AFixedKeyLeavesTheIdsOfRunsItDoesNotApplyTo) {
  const std::map<std::string, std::string> plain = ids_by_split_point(parse(splits_experiment("[even, auto]")));
  const std::map<std::string, std::string> started =
      ids_by_split_point(parse(splits_experiment("[even, auto]") + "train: {auto_start: even}\n"));
  ASSERT_EQ(plain.size(), 6u);  // per batch: 1 rank, 2 ranks even, 2 ranks auto
  ASSERT_EQ(started.size(), plain.size());
  for (const auto& [point, id] : plain) {
    // The auto runs take it (another configuration); the others are the runs they were without it.
    if (point.ends_with("-auto"))
      EXPECT_NE(started.at(point), id) << point;
    else
      EXPECT_EQ(started.at(point), id) << point;
  }
  // graph_copies applies to an NCCL job replaying a CUDA graph: none of a CPU experiment's runs.
  EXPECT_EQ(ids_by_split_point(parse(splits_experiment("[even, auto]") + "train: {graph_copies: 2}\n")), plain);
  // A setting that applies keeps its place in the identity.
  EXPECT_NE(ids_by_split_point(parse(splits_experiment("[even, auto]") + "train: {fuse: false}\n")), plain);
}

// --only on a setting selects the runs it applies to: auto_start=probe (its default) is no value of a
// run of another split, which train would refuse it on.
TEST(SettingsApply, OnlySelectsTheRunsASettingAppliesTo) {
  const Experiment e = parse(splits_experiment("[even, auto]"));
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 6u);
  for (const char* start : {"auto_start=probe", "auto_start=probe|even"}) {
    const OnlyFilter only = parse_only({start});
    for (const RunSpec& r : runs) EXPECT_EQ(only.matches(r), r.ranks > 1 && r.split == "auto") << start << " " << r.id;
  }
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [](const RunSpec& r) { return parse_only({"auto_start=even"}).matches(r); }), 0);
  // graph_copies applies to no run of a CPU experiment; a setting that applies everywhere matches all.
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [](const RunSpec& r) { return parse_only({"graph_copies=1"}).matches(r); }), 0);
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [](const RunSpec& r) { return parse_only({"display=50"}).matches(r); }), 6);
}

// An axis over a setting multiplies only the runs it applies to; each other run is made once, its id
// the one it has without the axis.
TEST(SettingsApply, AnAxisMultipliesOnlyTheRunsItAppliesTo) {
  const std::string base = splits_experiment("[even]");
  const std::map<std::string, std::string> plain = ids_by_split_point(parse(base));
  // bucket_mb: the 2-rank runs (buckets of an exchange), not the 1-rank ones.
  const std::vector<RunSpec> buckets = expand_runs(parse(base, {"matrix.bucket_mb=[1, 25]"}));
  ASSERT_EQ(buckets.size(), 2u * (1 + 2));
  for (const RunSpec& r : buckets) {
    if (r.ranks > 1) {
      EXPECT_NE(r.id.find("-bucket_mb"), std::string::npos) << r.id;
      continue;
    }
    EXPECT_EQ(r.id, plain.at(fmt::format("b{}-g1-even", r.batch)));
    EXPECT_FALSE(r.settings.contains("bucket_mb")) << r.id;
    EXPECT_EQ(flag_value(train_arguments(parse(base, {"matrix.bucket_mb=[1, 25]"}), r, "/r"), "--bucket-mb"), "<absent>");
  }
  // Settings that apply to none of these runs: the runs as without the axis.
  for (const char* axis : {"matrix.graph_copies=[1, 2]",     // an NCCL job's CUDA graph: CPU runs have none
                           "matrix.phase_repeats=[2, 3]",    // measure phases only (this is steady)
                           "matrix.mfu_window=[0.1, 0.2]",   // with --mfu only
                           "matrix.probe_seconds=[0.1, 1]",  // splits that probe only
                           "matrix.rebalance_every=[5, 0]"})   // splits that refine online only
    EXPECT_EQ(ids_by_split_point(parse(base, {axis})), plain) << axis;
  // Where they apply, they multiply.
  EXPECT_EQ(expand_runs(parse("measure: phases\n" + base, {"matrix.phase_repeats=[2, 3]"})).size(), 8u);
  EXPECT_EQ(expand_runs(parse("train: {mfu: true}\n" + base, {"matrix.mfu_window=[0.1, 0.2]"})).size(), 8u);
  EXPECT_EQ(expand_runs(parse(splits_experiment("[auto]"), {"matrix.probe_seconds=[0.1, 1]"})).size(), 2u * (1 + 2));
}

// probe_seconds times the start-up probe: split auto has one only where it starts from it (auto_start
// probe, the default); from even shares it probes nothing, and an axis over probe_seconds leaves its
// runs as they are without the axis.
TEST(SettingsApply, ProbeSecondsAppliesToTheRunsThatProbe) {
  const TrainSetting& probe = *find_train_setting("probe_seconds");
  const RunContext pair{.world_size = 2, .exchanges = true};
  auto of_split = [&](const std::string& split, const std::string& start) {
    RunContext c = pair;
    c.split = split;
    c.auto_start = start;
    return probe.applies_to(c);
  };
  EXPECT_TRUE(of_split("auto", "probe"));
  EXPECT_FALSE(of_split("auto", "even"));
  for (const char* split : {"proportional", "energy", "edp"}) EXPECT_TRUE(of_split(split, "probe")) << split;
  for (const char* split : {"even", "manual"}) EXPECT_FALSE(of_split(split, "probe")) << split;

  const std::string from_even = splits_experiment("[auto]") + "train: {auto_start: even}\n";
  const std::map<std::string, std::string> plain = ids_by_split_point(parse(from_even));
  EXPECT_EQ(ids_by_split_point(parse(from_even, {"matrix.probe_seconds=[0.1, 1]"})), plain);
  // Crossed with matrix.auto_start: the probe's values multiply the runs that start from it alone.
  // Per batch: the 1-rank run, the auto run from even, and the auto run from the probe per value.
  const std::vector<RunSpec> crossed = expand_runs(
      parse(splits_experiment("[auto]"), {"matrix.auto_start=[probe, even]", "matrix.probe_seconds=[0.1, 1]"}));
  ASSERT_EQ(crossed.size(), 2u * (1 + 1 + 2));
  for (const RunSpec& r : crossed) {
    const bool probes = r.ranks > 1 && r.settings.value("auto_start", "") == "probe";
    EXPECT_EQ(r.settings.contains("probe_seconds"), probes) << r.id;
    EXPECT_EQ(r.id.find("-probe_seconds") != std::string::npos, probes) << r.id;
  }
  // --only on it (its default here) selects the runs that probe.
  const OnlyFilter only = parse_only({"probe_seconds=0.5"});
  const std::vector<RunSpec> fixed = expand_runs(
      parse(splits_experiment("[auto]"), {"matrix.auto_start=[probe, even]"}));
  for (const RunSpec& r : fixed)
    EXPECT_EQ(only.matches(r), r.ranks > 1 && r.settings.value("auto_start", "") == "probe") << r.id;
}

// A value train takes on GPU runs only, in an experiment on the CPU, would fail every run as it
// starts: refused when the file is read, at its key path.
TEST(SettingsApply, GpuOnlyValuesAreRefusedInACpuExperiment) {
  expect_error(kBaseExperiment + "train: {layout: nhwc}\n",
               {"t.yaml:8:", "train.layout", "train takes --layout nhwc only on GPU runs", "runs on the CPU"});
  expect_error(kBaseExperiment + "train: {host_decode: true}\n",
               {"t.yaml:8:", "train.host_decode", "train takes --host-decode only on GPU runs"});
  expect_error(kBaseExperiment + "  batchnorm: [auto, cudnn]\n",
               {"t.yaml:8:", "matrix.batchnorm[1]", "train takes --batchnorm cudnn only on GPU runs"});
  // The splits that choose by each GPU's joules: train refuses them on CPU ranks.
  expect_error(kBaseExperiment + "  split: [even, energy]\n",
               {"t.yaml:8:17: matrix.split[1]: train takes --split energy only on GPU runs", "runs on the CPU"});
  expect_error(kBaseExperiment + "  split: edp\n", {"t.yaml:8:10: matrix.split: train takes --split edp only on GPU runs"});
  expect_error(kBaseExperiment, {"matrix.split[1]: train takes --split edp only on GPU runs"},
               {"matrix.split=[auto, edp]"});
  EXPECT_NO_THROW(parse(kBaseExperiment + "  split: [even, proportional, auto]\n"));
  // The values a CPU run takes, and the same values on GPUs, are read as before.
  EXPECT_NO_THROW(parse(kBaseExperiment + "train: {layout: nchw, batchnorm: auto, host_decode: false}\n"));
  EXPECT_NO_THROW(parse("device: gpu\n" + kBaseExperiment + "  batchnorm: [auto, cudnn]\n  layout: [nhwc]\n"
                        "train: {host_decode: true}\n",
                        {}, gpu_host(2)));
  EXPECT_NO_THROW(parse("device: gpu\n" + kBaseExperiment + "  split: [energy, edp]\n", {}, gpu_host(2)));
}

}  // namespace
}  // namespace cnnscale::testing
