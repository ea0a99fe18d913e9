// Identities that must not move as the data-parallel settings (the allreduce mode's fields, the
// split and its options, the bucket size, the watchdog) and the measurement and dataset options come
// from train's table: the configuration a one-rank train records (its run id's hash), and a sweep's
// run ids and the allreduce and split words of its runs' command lines, each pinned as the code
// before the table computed them. The configurations of jobs of 2 ranks are pinned in
// tests/mpi/test_settings_pinned_mpi.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

// A 1-iteration LeNet run on synthetic data with `args`, its recorded configuration line ("run: {...}").
std::string synthetic_line(const TempDir& dir, const std::string& id, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"train",    "--net",   "lenet",      "--data", "synthetic",    "--iterations",
                                  "1",        "--batch", "4",          "--results", dir.str(), "--experiment",
                                  "e",        "--run-id", id,          "--min-window", "0"};
  all.insert(all.end(), args.begin(), args.end());
  const CliResult r = run_cnnscale(all);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_run_results(dir.str() + "/e/" + id).config_text;
  const size_t at = text.find("\nrun: ");
  return at == std::string::npos ? text : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

const std::string kPlain =
    R"j("solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed",)j";

TEST(SettingsPinned, OneRankDataParallelMeasurementAndDatasetOptionsRecordAsBeforeTheTable) {
  TempDir dir;
  // The exchange's dtype and the split are recorded on one rank too; the exchange's other fields,
  // the bucket size, the watchdog and the probe's length never.
  EXPECT_EQ(synthetic_line(dir, "p1", {"--allreduce-dtype", "fp16", "--split", "proportional", "--timing-warmup", "0"}),
            R"j(run: {"allreduce_dtype":"fp16","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","run_id":"p1","seed":1,)j" +
                kPlain + R"j("split":"proportional","synthetic_fill":"gaussian","train_samples":1024})j");
  EXPECT_EQ(synthetic_line(dir, "s1",
                          {"--split", "auto", "--rebalance-every", "7", "--timing-warmup", "2", "--bucket-mb", "0.5",
                           "--watchdog-timeout", "100", "--allreduce-algo", "tree", "--no-overlap",
                           "--update-per-bucket", "false", "--gather-gradients", "true", "--probe-seconds", "0.2"}),
            R"j(run: {"auto_start":"probe","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","rebalance_every":7,)j"
            R"j("run_id":"s1","seed":1,)j" +
                kPlain + R"j("split":"auto","synthetic_fill":"gaussian","train_samples":1024})j");
  EXPECT_EQ(synthetic_line(dir, "s2",
                          {"--timing-warmup", "0", "--train-samples", "64", "--classes", "5", "--input-shape",
                           "1,28,28", "--synthetic-fill", "constant"}),
            R"j(run: {"batch":4,"classes":5,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
            R"j("net_file":"networks/lenet.yaml","run_id":"s2","seed":1,)j" +
                kPlain + R"j("synthetic_fill":"constant","train_samples":64})j");
  EXPECT_EQ(synthetic_line(dir, "s4", {"--timing-warmup", "0", "--split", "auto", "--auto-start", "even"}),
            R"j(run: {"auto_start":"even","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","rebalance_every":20,)j"
            R"j("run_id":"s4","seed":1,)j" +
                kPlain + R"j("split":"auto","synthetic_fill":"gaussian","train_samples":1024})j");
}

// Every spelling of the allreduce modes and the split axis: the run ids and the words between
// --measure and --results on each 2-rank run's command line, as the sweep wrote them before the table.
TEST(SettingsPinned, AllreduceModesAndSplitsKeepTheirIdsAndCommandLines) {
  const std::string text = kBaseExperiment.substr(0, kBaseExperiment.find("  batch:")) +
                           "  batch: [8]\n  gpus: [1, 2]\n  repeats: 1\n  split: [even, proportional, auto]\n"
                           "  allreduce:\n    - overlap\n    - no-overlap\n"
                           "    - {overlap: false, algo: tree, dtype: bf16}\n"
                           "    - {overlap: true, algo: ring, dtype: fp32, update: after_exchange, gather: true}\n"
                           "    - {overlap: true, update: per_bucket, gather: false, dtype: compute}\n";
  const std::vector<std::pair<std::string, std::string>> pinned = {
      {"lenet-b8-g1-fp32-single-r1-ce6f58f1", ""},
      {"lenet-b8-g2-fp32-ov-r1-8d1b6f67", "--split even"},
      {"lenet-b8-g2-fp32-ov-split-proportional-r1-250cdbe6", "--split proportional"},
      {"lenet-b8-g2-fp32-ov-split-auto-r1-d9be611e", "--split auto"},
      {"lenet-b8-g2-fp32-noov-r1-74842d9c", "--no-overlap --split even"},
      {"lenet-b8-g2-fp32-noov-split-proportional-r1-fe23ae44", "--no-overlap --split proportional"},
      {"lenet-b8-g2-fp32-noov-split-auto-r1-fe178edd", "--no-overlap --split auto"},
      {"lenet-b8-g2-fp32-noov-tree-bf16-r1-2b1b8738",
       "--no-overlap --allreduce-algo tree --allreduce-dtype bf16 --split even"},
      {"lenet-b8-g2-fp32-noov-tree-bf16-split-proportional-r1-12a02765",
       "--no-overlap --allreduce-algo tree --allreduce-dtype bf16 --split proportional"},
      {"lenet-b8-g2-fp32-noov-tree-bf16-split-auto-r1-68728fca",
       "--no-overlap --allreduce-algo tree --allreduce-dtype bf16 --split auto"},
      {"lenet-b8-g2-fp32-ov-ring-fp32-upafter-gather-r1-cdd7c9e3",
       "--allreduce-algo ring --allreduce-dtype fp32 --update-per-bucket false --gather-gradients true --split even"},
      {"lenet-b8-g2-fp32-ov-ring-fp32-upafter-gather-split-proportional-r1-9afde35b",
       "--allreduce-algo ring --allreduce-dtype fp32 --update-per-bucket false --gather-gradients true --split "
       "proportional"},
      {"lenet-b8-g2-fp32-ov-ring-fp32-upafter-gather-split-auto-r1-6e423894",
       "--allreduce-algo ring --allreduce-dtype fp32 --update-per-bucket false --gather-gradients true --split auto"},
      {"lenet-b8-g2-fp32-ov-compute-r1-39d6aabb", "--allreduce-dtype compute --split even"},
      {"lenet-b8-g2-fp32-ov-compute-split-proportional-r1-58740602", "--allreduce-dtype compute --split proportional"},
      {"lenet-b8-g2-fp32-ov-compute-split-auto-r1-9c9f62cb", "--allreduce-dtype compute --split auto"},
  };
  const Experiment e = parse(text);
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), pinned.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].id, pinned[i].first);
    const std::vector<std::string> args = train_arguments(e, runs[i], "/r");
    const auto from = std::find(args.begin(), args.end(), "--measure") + 2;
    const auto to = std::find(args.begin(), args.end(), "--results");
    std::string words;
    for (auto it = from; it < to; ++it) words += (words.empty() ? "" : " ") + *it;
    EXPECT_EQ(words, pinned[i].second) << runs[i].id;
  }
}

// A one-rank run's straggler emulation, as recorded before they came from train's table.
TEST(SettingsPinned, OneRankSlowdownRecordsAsBeforeTheTable) {
  TempDir dir;
  EXPECT_EQ(synthetic_line(dir, "k1", {"--timing-warmup", "0", "--slowdown", "2.5"}),
            R"j(run: {"batch":4,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
            R"j("net_file":"networks/lenet.yaml","run_id":"k1","seed":1,"slowdown":[2.5],)j" +
                kPlain + R"j("synthetic_fill":"gaussian","train_samples":1024})j");
}

// The rank sets (matrix.gpus, gpu_mix with and without SM partitions, cpu_mix) and the batch axes
// (matrix.batch, batch_per_gpu): each run's id, and its --batch word and the words between --measure
// and --results, as the sweep wrote them before these options came from train's table.
TEST(SettingsPinned, RankSetsAndBatchesKeepTheirIdsAndCommandLines) {
  const std::string head = kBaseExperiment.substr(0, kBaseExperiment.find("  batch:")) + "  repeats: 1\n";
  const std::vector<std::pair<std::string, std::vector<std::string>>> pinned_experiments = {
      {head + "  batch: [8]\n  batch_per_gpu: [3]\n  gpus: [1, 2]\n  gpu_mix: [[1, 0], [{gpu: 0, sms: 66}, "
              "{gpu: 1, sms: 132}]]\ndevice: gpu\n",
       {"lenet-b8-g1-fp32-single-r1-e5e6671c: --batch 8", "lenet-b8-g2-fp32-ov-r1-d91ad01c: --batch 8",
        "lenet-b8-g2-m1.0-fp32-ov-r1-91b73ff7: --batch 8 --gpus 1,0",
        "lenet-b8-g2-m0s66.1s132-fp32-ov-r1-e6bd909f: --batch 8 --gpus 0,1 --sm-counts 66,132",
        "lenet-b3-g1-fp32-single-r1-27a707eb: --batch 3", "lenet-b6-g2-fp32-ov-r1-52a798e5: --batch 6",
        "lenet-b6-g2-m1.0-fp32-ov-r1-73af9b71: --batch 6 --gpus 1,0",
        "lenet-b6-g2-m0s66.1s132-fp32-ov-r1-0203733c: --batch 6 --gpus 0,1 --sm-counts 66,132"}},
      {head + "  batch: [8, 12]\n  cpu_mix: [[1, 3], [1, 1.5, 2]]\n",
       {"lenet-b8-g2-c1+3-fp32-ov-r1-deea35ae: --batch 8 --slowdown 1,3",
        "lenet-b8-g3-c1+1.5+2-fp32-ov-r1-7255b826: --batch 8 --slowdown 1,1.5,2",
        "lenet-b12-g2-c1+3-fp32-ov-r1-53a4ed4c: --batch 12 --slowdown 1,3",
        "lenet-b12-g3-c1+1.5+2-fp32-ov-r1-e65a3923: --batch 12 --slowdown 1,1.5,2"}},
  };
  for (const auto& [text, pinned] : pinned_experiments) {
    const Experiment e = parse(text, {}, gpu_host(4));
    std::vector<std::string> got;
    for (const RunSpec& r : expand_runs(e)) {
      const std::vector<std::string> args = train_arguments(e, r, "/r");
      std::string line = r.id + ": --batch " + flag_value(args, "--batch");
      for (auto it = std::find(args.begin(), args.end(), "--measure") + 2;
           it < std::find(args.begin(), args.end(), "--results"); ++it)
        line += " " + *it;
      got.push_back(line);
    }
    EXPECT_EQ(got, pinned);
  }
}

// Every allreduce mode of experiments/ and each field's other values: the mode's label (run ids, tags)
// and --only's spelt-out label, the mode as the run's hashed configuration names it, and the run id,
// as the code before the table made them.
TEST(SettingsPinned, AllreduceModesKeepTheirLabelsAndHashedConfigurations) {
  struct Pin {
    std::string mode, label, long_label, hashed, id;
  };
  const std::vector<Pin> pinned = {
      {"overlap", "ov", "overlap", R"j({"algo":"","overlap":true})j", "lenet-b8-g2-fp32-ov-r1-d91ad01c"},
      {"no-overlap", "noov", "no-overlap", R"j({"algo":"","overlap":false})j", "lenet-b8-g2-fp32-noov-r1-dbfe2042"},
      {"{overlap: true, dtype: compute}", "ov-compute", "overlap-compute",
       R"j({"algo":"","dtype":"compute","overlap":true})j", "lenet-b8-g2-fp32-ov-compute-r1-1017a7ee"},
      {"{overlap: true, dtype: fp32}", "ov-fp32", "overlap-fp32", R"j({"algo":"","dtype":"fp32","overlap":true})j",
       "lenet-b8-g2-fp32-ov-fp32-r1-279d3517"},
      {"{overlap: true, dtype: compute, gather: true}", "ov-compute-gather", "overlap-compute-gather",
       R"j({"algo":"","dtype":"compute","gather":true,"overlap":true})j",
       "lenet-b8-g2-fp32-ov-compute-gather-r1-6f2f0ef6"},
      {"{overlap: true, max_ctas: 8}", "ov-c8", "overlap-c8", R"j({"algo":"","max_ctas":8,"overlap":true})j",
       "lenet-b8-g2-fp32-ov-c8-r1-8d9b710a"},
      {"{overlap: true, cta_policy: efficiency}", "ov-eff", "overlap-eff",
       R"j({"algo":"","cta_policy":"efficiency","overlap":true})j", "lenet-b8-g2-fp32-ov-eff-r1-655350f0"},
      {"{overlap: true, priority: low}", "ov-lowp", "overlap-lowp",
       R"j({"algo":"","overlap":true,"priority":"low"})j", "lenet-b8-g2-fp32-ov-lowp-r1-fa5334c3"},
      {"{overlap: true, dtype: compute, cta_policy: efficiency}", "ov-compute-eff", "overlap-compute-eff",
       R"j({"algo":"","cta_policy":"efficiency","dtype":"compute","overlap":true})j",
       "lenet-b8-g2-fp32-ov-compute-eff-r1-dfecbbaa"},
      {"{overlap: true, dtype: compute, priority: low}", "ov-compute-lowp", "overlap-compute-lowp",
       R"j({"algo":"","dtype":"compute","overlap":true,"priority":"low"})j",
       "lenet-b8-g2-fp32-ov-compute-lowp-r1-c1594c0b"},
      {"{overlap: true, update: after_exchange}", "ov-upafter", "overlap-upafter",
       R"j({"algo":"","overlap":true,"update":"after_exchange"})j", "lenet-b8-g2-fp32-ov-upafter-r1-ec751d6e"},
      {"{overlap: true, dtype: compute, update: after_exchange}", "ov-compute-upafter", "overlap-compute-upafter",
       R"j({"algo":"","dtype":"compute","overlap":true,"update":"after_exchange"})j",
       "lenet-b8-g2-fp32-ov-compute-upafter-r1-3e40acbf"},
      {"{overlap: false, algo: tree, dtype: bf16, max_ctas: 4, cta_policy: zero, priority: low, update: "
       "after_exchange, gather: true}",
       "noov-tree-bf16-c4-zero-lowp-upafter-gather", "no-overlap-tree-bf16-c4-zero-lowp-upafter-gather",
       R"j({"algo":"tree","cta_policy":"zero","dtype":"bf16","gather":true,"max_ctas":4,"overlap":false,)j"
       R"j("priority":"low","update":"after_exchange"})j",
       "lenet-b8-g2-fp32-noov-tree-bf16-c4-zero-lowp-upafter-gather-r1-6ff38bce"},
      {"{overlap: true, algo: auto, cta_policy: default, priority: high, update: per_bucket, gather: false}",
       "ov-auto", "overlap-auto", R"j({"algo":"auto","overlap":true})j", "lenet-b8-g2-fp32-ov-auto-r1-c6364f97"},
  };
  std::string text =
      kBaseExperiment.substr(0, kBaseExperiment.find("  batch:")) + "  batch: [8]\n  gpus: [2]\n  repeats: 1\n";
  text += "  allreduce:\n";
  for (const Pin& p : pinned) text += "    - " + p.mode + "\n";
  const Experiment e = parse(text + "device: gpu\n", {}, gpu_host(2));
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), pinned.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].allreduce.label(), pinned[i].label) << pinned[i].mode;
    EXPECT_EQ(runs[i].allreduce.long_label(), pinned[i].long_label) << pinned[i].mode;
    EXPECT_EQ(runs[i].config["allreduce"].dump(), pinned[i].hashed) << pinned[i].mode;
    EXPECT_EQ(e.resolved_json()["matrix"]["allreduce"][i].dump(), pinned[i].hashed) << pinned[i].mode;
    EXPECT_EQ(runs[i].id, pinned[i].id) << pinned[i].mode;
  }
  // The pins cover every mode the shipped experiments use (the shard folders of accuracy.yaml and
  // gait_flow.yaml, which the user converts first, are no part of their modes: synthetic data stands in).
  std::set<std::string> labels;
  for (const Pin& p : pinned) labels.insert(p.label);
  const auto experiments = std::filesystem::path(CNNSCALE_TEST_DATA).parent_path().parent_path() / "experiments";
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(experiments)) {
    if (f.path().extension() != ".yaml") continue;
    ++files;
    std::vector<std::string> overrides;
    if (f.path().filename() == "accuracy.yaml" || f.path().filename() == "gait_flow.yaml")
      overrides.push_back("dataset.name=synthetic");
    const Experiment x = load_experiment(f.path().string(), overrides, cpu_host());
    for (const AllreduceMode& m : x.allreduce) EXPECT_TRUE(labels.count(m.label())) << f.path() << ": " << m.label();
  }
  EXPECT_GE(files, 5);
}

}  // namespace
}  // namespace cnnscale::testing
