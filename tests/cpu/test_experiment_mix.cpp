// Unequal ranks in experiment files: the split axis, gpu_mix entries with SM partitions and cpu_mix
// slowdowns; each bad value's one-line error (file:line:col: key.path), the runs they expand to (ids,
// hashes, tags and the train arguments the sweep builds) and --only on the new keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment.hpp"
#include "experiment/sweep.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale {
namespace {

using testing::kBase;

// The same without matrix.gpus: the rank sets come from the lines appended.
const std::string kNoRanks =
    "name: t\n"             // 1
    "dataset: synthetic\n"  // 2
    "iterations: 4\n"       // 3
    "matrix:\n"             // 4
    "  network: [lenet]\n"  // 5
    "  batch: [8]\n"        // 6
    "  repeats: 1\n";       // 7

using testing::cpu_host;
using testing::expect_error;
using testing::flag_value;
using testing::gpu_host;
using testing::parse;

bool has_tag(const std::vector<std::string>& args, const std::string& tag) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--tag" && args[i + 1] == tag) return true;
  return false;
}

const RunSpec& find_run(const std::vector<RunSpec>& runs, const std::string& id_part) {
  auto it = std::find_if(runs.begin(), runs.end(), [&](const RunSpec& r) { return r.id.find(id_part) != r.id.npos; });
  if (it == runs.end()) throw std::runtime_error("no run with " + id_part);
  return *it;
}

TEST(ExperimentSplit, ParsesWithEvenAsTheDefault) {
  Experiment plain = parse(kBase);
  EXPECT_EQ(plain.splits, std::vector<std::string>{"even"});
  EXPECT_FALSE(plain.split_given);
  // energy and edp choose by a GPU's joules: GPU ranks (test_settings_apply.cpp refuses them on the CPU).
  Experiment e = parse("device: gpu\n" + kBase + "  split: [even, proportional, auto, energy, edp]\n", {}, gpu_host(2));
  EXPECT_EQ(e.splits, (std::vector<std::string>{"even", "proportional", "auto", "energy", "edp"}));
  EXPECT_TRUE(e.split_given);
  EXPECT_EQ(parse(kBase + "  split: auto\n").splits, std::vector<std::string>{"auto"});  // a scalar is one value
}

TEST(ExperimentSplit, BadValuesNameTheirLocation) {
  expect_error(kBase + "  split: [even, manual]\n",
               {"t.yaml:8:17: matrix.split[1]: 'manual' is no matrix value: it needs per-rank shares"});
  expect_error(kBase + "  split: [fast]\n",
               {"t.yaml:8:11: matrix.split[0]: expected one of auto, edp, energy, even, proportional, got 'fast'"});
  expect_error(kBase + "  split: [auto, auto]\n", {"t.yaml:8:17: matrix.split[1]: 'auto' is listed twice"});
  expect_error(kBase + "  split: []\n", {"t.yaml:8:10: matrix.split: must not be empty"});
  expect_error(kBase, {"command line 'matrix.split=[manual]':1:2: matrix.split[0]: 'manual' is no matrix value"},
               {"matrix.split=[manual]"});
}

TEST(ExperimentSplit, ExpansionIdsHashesAndTrainArguments) {
  const auto plain = expand_runs(parse(kBase));
  const Experiment e = parse(kBase + "  split: [even, auto]\n");
  const auto runs = expand_runs(e);
  // Per repeat: 2 batches x (1 rank: one run + 2 ranks: two policies) = 6.
  ASSERT_EQ(runs.size(), 18u);
  std::set<std::string> ids;
  for (const auto& r : runs) ids.insert(r.id);
  EXPECT_EQ(ids.size(), runs.size());
  // Policy innermost: even then auto of one rank set.
  EXPECT_EQ(runs[1].split, "even");
  EXPECT_EQ(runs[2].split, "auto");
  EXPECT_EQ(runs[2].ranks, 2);
  EXPECT_NE(runs[2].id.find("lenet-b8-g2-fp32-ov-split-auto-r1-"), std::string::npos) << runs[2].id;
  // even is train's default: the run made before the axis existed (same id, same hash), still done.
  EXPECT_EQ(runs[1].id, plain[1].id);
  EXPECT_EQ(runs[1].config_hash, plain[1].config_hash);
  EXPECT_NE(runs[2].config_hash, runs[1].config_hash);
  EXPECT_EQ(runs[2].config.at("split"), "auto");
  EXPECT_FALSE(runs[1].config.contains("split"));

  // The axis is written: every multi-rank run names its policy to train, even included.
  EXPECT_EQ(flag_value(train_arguments(e, runs[1], "/r"), "--split"), "even");
  const auto auto_args = train_arguments(e, runs[2], "/r");
  EXPECT_EQ(flag_value(auto_args, "--split"), "auto");
  EXPECT_TRUE(has_tag(auto_args, "split=auto"));
  // One rank splits nothing: no flag, the tag says so, and no other policy's run of it.
  EXPECT_EQ(runs[0].ranks, 1);
  const auto single = train_arguments(e, runs[0], "/r");
  EXPECT_EQ(flag_value(single, "--split"), "<absent>");
  EXPECT_TRUE(has_tag(single, "split=single"));
  // Without the axis nothing is passed (train as before it had --split), only the tag.
  const Experiment old = parse(kBase);
  const auto old_args = train_arguments(old, plain[1], "/r");
  EXPECT_EQ(flag_value(old_args, "--split"), "<absent>");
  EXPECT_TRUE(has_tag(old_args, "split=even"));
}

// energy and edp refine their shares online at train's default interval: that is part of their
// configuration, so runs from before they did (which kept the probe's shares) have other hashes and
// ids and are not taken as done. auto always refined: it has no refine_every. All three carry how
// the refinement reads a measurement (refine_model), which changed for each; even and proportional
// neither, so their runs keep their ids.
TEST(ExperimentSplit, EnergyAndEdpRunsCarryTheirRefinementInTheirHash) {
  const auto runs = expand_runs(
      parse("device: gpu\n" + kBase + "  split: [even, proportional, auto, energy, edp]\n", {}, gpu_host(2)));
  std::set<std::string> seen;
  for (const RunSpec& r : runs) {
    if (r.ranks < 2) continue;
    seen.insert(r.split);
    const bool refines = r.split == "auto" || r.split == "energy" || r.split == "edp";
    if (r.split == "energy" || r.split == "edp")
      EXPECT_EQ(r.config.at("refine_every"), kDefaultRebalanceEvery) << r.id;
    else
      EXPECT_FALSE(r.config.contains("refine_every")) << r.id;
    if (refines)
      EXPECT_EQ(r.config.at("refine_model"), kRefineModel) << r.id;
    else
      EXPECT_FALSE(r.config.contains("refine_model")) << r.id;
  }
  EXPECT_EQ(seen.size(), 5u);  // every policy on more than one rank
}

TEST(ExperimentGpuMix, PerRankMappingsWithSmPartitions) {
  const Experiment e = parse(kNoRanks +
                                 "  gpu_mix: [[{gpu: 0, sms: 132}, {gpu: 1, sms: 66}], [0, 1], [{gpu: 2}, 3]]\n"
                                 "device: gpu\n",
                             {}, gpu_host(4));
  ASSERT_EQ(e.gpu_mixes.size(), 3u);
  EXPECT_EQ(e.gpu_mixes[0], (GpuMix{{0, 1}, {132, 66}}));
  EXPECT_EQ(e.gpu_mixes[1], (GpuMix{{0, 1}, {}}));
  EXPECT_EQ(e.gpu_mixes[2], (GpuMix{{2, 3}, {}}));  // mappings without sms: whole GPUs
  EXPECT_EQ(e.gpu_mixes[0].label(), "0@132.1@66");
  EXPECT_EQ(e.gpu_mixes[1].label(), "0.1");
  EXPECT_EQ(e.resolved_json()["matrix"]["gpu_mix"][0][1], (nlohmann::json{{"gpu", 1}, {"sms", 66}}));
  EXPECT_EQ(e.resolved_json()["matrix"]["gpu_mix"][1], (nlohmann::json{0, 1}));

  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 3u);
  // '@' is no run-id character: the id spells the partition with 's'.
  EXPECT_NE(runs[0].id.find("lenet-b8-g2-m0s132.1s66-fp32-ov-r1-"), std::string::npos) << runs[0].id;
  EXPECT_NE(runs[1].id.find("lenet-b8-g2-m0.1-fp32-ov-r1-"), std::string::npos) << runs[1].id;
  const auto part = train_arguments(e, runs[0], "/r");
  EXPECT_EQ(flag_value(part, "--gpus"), "0,1");
  EXPECT_EQ(flag_value(part, "--sm-counts"), "132,66");
  EXPECT_TRUE(has_tag(part, "gpu_mix=0@132.1@66"));
  const auto whole = train_arguments(e, runs[1], "/r");
  EXPECT_EQ(flag_value(whole, "--gpus"), "0,1");
  EXPECT_EQ(flag_value(whole, "--sm-counts"), "<absent>");
  EXPECT_TRUE(has_tag(whole, "gpu_mix=0.1"));

  // A plain mix hashes as it did before mappings existed; a partition is another configuration.
  const auto before = expand_runs(parse(kNoRanks + "  gpu_mix: [[0, 1]]\ndevice: gpu\n", {}, gpu_host(4)));
  EXPECT_EQ(before[0].id, runs[1].id);
  EXPECT_NE(runs[0].config_hash, runs[1].config_hash);
  // A partitioned mix is placed like any gpu_mix: one node, GPUs up to its highest index.
  EXPECT_EQ(run_resources(e, runs[0], 4).gpus_per_node, 2);
}

TEST(ExperimentGpuMix, BadEntriesNameTheirLocation) {
  const std::string gpu = "device: gpu\n";
  expect_error(kNoRanks + "  gpu_mix: [[{gpu: 0, sms: 66}, 1]]\n" + gpu,
               {"t.yaml:8:33: matrix.gpu_mix[0][1]: rank 1 (GPU 1) names no sms, but rank 0 does"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[{gpu: 0, sms: 66}, {gpu: 1}]]\n" + gpu,
               {"t.yaml:8:33: matrix.gpu_mix[0][1]: rank 1 (GPU 1) names no sms"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[{gpu: 0, sms: 0}, {gpu: 1, sms: 66}]]\n" + gpu,
               {"t.yaml:8:28: matrix.gpu_mix[0][0].sms: must be in [1, 1024], got 0"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[{gpu: 0, sm: 66}]]\n" + gpu,
               {"t.yaml:8:23: matrix.gpu_mix[0][0].sm: unknown key 'sm' (allowed: gpu, sms)"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[{sms: 66}]]\n" + gpu,
               {"t.yaml:8:14: matrix.gpu_mix[0][0]: missing required key 'gpu'"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[{gpu: 1, sms: 66}, {gpu: 1, sms: 66}]]\n" + gpu,
               {"t.yaml:8:39: matrix.gpu_mix[0][1].gpu: GPU 1 is listed twice"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[0, {gpu: 7, sms: 66}]]\n" + gpu,
               {"t.yaml:8:23: matrix.gpu_mix[0][1].gpu: GPU 7 does not exist: 4 visible"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[{gpu: x}]]\n" + gpu,
               {"t.yaml:8:20: matrix.gpu_mix[0][0].gpu: expected an integer, got 'x'"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  gpu_mix: [[0, 1, 2, 3, 4, 5, 6, 7, 8]]\n" + gpu,
               {"t.yaml:8:13: matrix.gpu_mix[0]: 9 ranks cannot split a global batch of 8"}, {}, gpu_host(16));
}

TEST(ExperimentCpuMix, SlowdownsMakeCpuRankSets) {
  const Experiment e =
      parse(kNoRanks + "  cpu_mix: [[1, 1], [1, 3], [1, 2.5, 1]]\n  split: [even, proportional, auto]\n");
  EXPECT_EQ(e.device, "cpu");
  EXPECT_TRUE(e.gpu_counts.empty());  // no 1-rank default beside the mixes
  ASSERT_EQ(e.cpu_mixes.size(), 3u);
  EXPECT_EQ(cpu_mix_label(e.cpu_mixes[1]), "1+3");
  EXPECT_EQ(cpu_mix_label(e.cpu_mixes[2]), "1+2.5+1");
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 9u);  // 3 mixes x 3 policies
  const RunSpec& slow_auto = find_run(runs, "-c1+3-");
  EXPECT_EQ(slow_auto.ranks, 2);
  const RunSpec& r = runs[5];
  EXPECT_NE(r.id.find("lenet-b8-g2-c1+3-fp32-ov-split-auto-r1-"), std::string::npos) << r.id;
  const auto args = train_arguments(e, r, "/r");
  EXPECT_EQ(flag_value(args, "--device"), "cpu");
  EXPECT_EQ(flag_value(args, "--slowdown"), "1,3");
  EXPECT_EQ(flag_value(args, "--split"), "auto");
  EXPECT_EQ(flag_value(args, "--gpus"), "<absent>");
  EXPECT_TRUE(has_tag(args, "cpu_mix=1+3"));
  EXPECT_TRUE(has_tag(args, "split=auto"));
  EXPECT_EQ(flag_value(train_arguments(e, runs[6], "/r"), "--slowdown"), "1,2.5,1");
  EXPECT_EQ(runs[6].ranks, 3);
  // Equal speeds and a straggler are different configurations.
  EXPECT_NE(runs[0].config_hash, runs[3].config_hash);
  LaunchEnv env;
  env.self = "/bin/cnnscale";
  env.cores = 4;
  const auto cmd = launch_command(e, r, "/r", env);
  EXPECT_EQ(std::vector<std::string>(cmd.begin(), cmd.begin() + 3), (std::vector<std::string>{"mpirun", "-np", "2"}));
  // device auto: slowdowns are for CPU ranks, whatever GPUs the node has.
  EXPECT_EQ(parse(kNoRanks + "  cpu_mix: [[1, 3]]\ndevice: auto\n", {}, gpu_host(4)).device, "cpu");
}

TEST(ExperimentCpuMix, BadEntriesAndCombinationsNameTheirLocation) {
  expect_error(kNoRanks + "  cpu_mix: [[1, 0.5]]\n",
               {"t.yaml:8:17: matrix.cpu_mix[0][1]: must be in [1, 1000], got 0.5"});
  expect_error(kNoRanks + "  cpu_mix: [1, 3]\n",
               {"t.yaml:8:13: matrix.cpu_mix[0]: expected a list of per-rank slowdown factors, e.g. [1, 3]"});
  expect_error(kNoRanks + "  cpu_mix: [[]]\n", {"t.yaml:8:13: matrix.cpu_mix[0]: must not be empty"});
  expect_error(kNoRanks + "  cpu_mix: [[1, fast]]\n", {"t.yaml:8:17: matrix.cpu_mix[0][1]: expected a number"});
  expect_error(kNoRanks + "  cpu_mix: [[1, 1, 1, 1, 1, 1, 1, 1, 1]]\n",
               {"t.yaml:8:13: matrix.cpu_mix[0]: 9 ranks cannot split a global batch of 8"});
  expect_error(kNoRanks + "  cpu_mix: [[1, 3]]\n  gpus: [2]\n",
               {"t.yaml:8:12: matrix.cpu_mix: cannot be combined with matrix.gpus"});
  expect_error(kNoRanks + "  cpu_mix: [[1, 3]]\n  gpu_mix: [[0, 1]]\ndevice: gpu\n",
               {"t.yaml:8:12: matrix.cpu_mix: cannot be combined with matrix.gpu_mix"}, {}, gpu_host(4));
  expect_error(kNoRanks + "  cpu_mix: [[1, 3]]\ndevice: gpu\n",
               {"t.yaml:8:12: matrix.cpu_mix: slowdown factors emulate stragglers on CPU ranks: needs device cpu"},
               {}, gpu_host(4));
  expect_error(kNoRanks, {"command line 'matrix.cpu_mix=[[1,0]]':1:5: matrix.cpu_mix[0][1]: must be in [1, 1000]"},
               {"matrix.cpu_mix=[[1,0]]"});
}

TEST(ExperimentOnly, FiltersOnSplitAndMixes) {
  const auto runs = expand_runs(parse(kBase + "  split: [even, proportional, auto]\n"));
  auto count = [](const std::vector<RunSpec>& rs, const std::vector<std::string>& exprs) {
    OnlyFilter f = parse_only(exprs);
    return std::count_if(rs.begin(), rs.end(), [&](const RunSpec& r) { return f.matches(r); });
  };
  // Per repeat: 2 batches x (1 + 3 policies) = 8.
  ASSERT_EQ(runs.size(), 24u);
  EXPECT_EQ(count(runs, {"split=auto"}), 12);  // the 1-rank runs split nothing: kept, as for allreduce
  EXPECT_EQ(count(runs, {"split=auto,gpus=2"}), 6);
  EXPECT_EQ(count(runs, {"split=even|auto,gpus=2,repeat=1"}), 4);
  EXPECT_EQ(count(runs, {"split=auto", "split=even"}), 6);  // nothing for 2 ranks, the 1-rank runs stay
  EXPECT_EQ(count(runs, {"cpu_mix=none"}), 24);

  const auto cpu = expand_runs(parse(kNoRanks + "  cpu_mix: [[1, 1], [1, 3]]\n  split: [even, auto]\n"));
  EXPECT_EQ(count(cpu, {"cpu_mix=1+3"}), 2);
  EXPECT_EQ(count(cpu, {"cpu_mix=1+3,split=auto"}), 1);
  const auto gpu =
      expand_runs(parse(kNoRanks + "  gpu_mix: [[{gpu: 0, sms: 132}, {gpu: 1, sms: 66}], [0, 1]]\ndevice: gpu\n", {},
                        gpu_host(2)));
  EXPECT_EQ(count(gpu, {"gpu_mix=0@132.1@66"}), 1);
  EXPECT_EQ(count(gpu, {"gpu_mix=0.1"}), 1);
  try {
    parse_only({"policy=auto"});
    ADD_FAILURE() << "unknown key accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_mix, precision, allreduce, split, repeat"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cnnscale
