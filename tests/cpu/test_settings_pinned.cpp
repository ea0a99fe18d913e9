// Identities that must not move when train's settings come from their table: the configuration train
// records (hashed into its run id) and a sweep's run ids, each pinned as the code before the table
// computed them; and the seeds of repeats (varied by default, one seed with seeds: fixed).
#include <gtest/gtest.h>

#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/report_data.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

// A 1-iteration LeNet run with `args`, its recorded configuration line ("run: {...}").
std::string recorded_run_line(const TempDir& dir, const std::string& id, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"train",         "--net",       "lenet", "--data",  "synthetic",   "--iterations",
                                  "1",             "--batch",     "4",     "--results", dir.str(),   "--experiment",
                                  "e",             "--run-id",    id,      "--min-window", "0", "--timing-warmup",
                                  "0"};
  all.insert(all.end(), args.begin(), args.end());
  const CliResult r = run_cnnscale(all);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_run_results(dir.str() + "/e/" + id).config_text;
  const size_t at = text.find("\nrun: ");
  return at == std::string::npos ? text : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(SettingsPinned, RecordedConfigurationsAreThoseOfBeforeTheTable) {
  TempDir dir;
  const std::string common =
      R"j("batch":4,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
      R"j("net_file":"networks/lenet.yaml",)j";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{},
       R"j("run_id":"r1","seed":1,"solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed",)j"
       R"j("synthetic_fill":"gaussian","train_samples":1024})j"},
      {{"--seed", "7"},
       R"j("run_id":"r2","seed":7,"solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed",)j"
       R"j("synthetic_fill":"gaussian","train_samples":1024})j"},
      {{"--seed", "3", "--lr", "0.1", "--momentum", "0.8", "--weight-decay", "0.001", "--lr-policy", "step", "--gamma",
        "0.5", "--step", "2"},
       R"j("run_id":"r3","seed":3,"solver":"lr 0.1 momentum 0.8 weight decay 0.001 policy step(gamma 0.5, every 2 )j"
       R"j(epochs)","synthetic_fill":"gaussian","train_samples":1024})j"},
      {{"--lr-policy", "multistep", "--milestones", "1,2", "--warmup", "0.5", "--warmup-start-factor", "0.2",
        "--lr-scaling", "linear", "--lr-base-batch", "32"},
       R"j("run_id":"r4","seed":1,"solver":"lr 0.01 scaled linearly from batch 32 momentum 0.9 weight decay 0.0005 )j"
       R"j(policy multistep(gamma 0.1 at epochs 1,2), warm-up 0.5 epochs from x0.2","synthetic_fill":"gaussian",)j"
       R"j("train_samples":1024})j"},
      {{"--lr-policy", "poly", "--power", "2", "--warmup-iterations", "3", "--lr", "1e-05"},
       R"j("run_id":"r5","seed":1,"solver":"lr 1e-05 momentum 0.9 weight decay 0.0005 policy poly(power 2), warm-up )j"
       R"j(3 iterations from x0.1","synthetic_fill":"gaussian","train_samples":1024})j"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string id = "r" + std::to_string(i + 1);
    EXPECT_EQ(recorded_run_line(dir, id, cases[i].first), "run: {" + common + cases[i].second) << id;
  }
  // The flags recorded only where they differ from their defaults, beside the solver's.
  EXPECT_EQ(recorded_run_line(dir, "r6",
                              {"--no-graph", "--no-phase-marks", "--no-fuse", "--deterministic", "--conv-search",
                               "legacy", "--lr-policy", "exp", "--gamma", "0.99"}),
            R"j(run: {"batch":4,"classes":10,"conv_search":"legacy","cuda_graph":false,"data":"synthetic",)j"
            R"j("deterministic":true,"device":"cpu","fused_epilogues":false,"input_shape":[1,28,28],"net":"lenet",)j"
            R"j("net_file":"networks/lenet.yaml","phase_marks":false,"run_id":"r6","seed":1,"solver":"lr 0.01 )j"
            R"j(momentum 0.9 weight decay 0.0005 policy exp(gamma 0.99 per epoch)","synthetic_fill":"gaussian",)j"
            R"j("train_samples":1024})j");
}

// The run options recorded by their own rules before the table held them (layout, augmentation,
// synthetic fill) and those never recorded (data threads, and graph copies outside an NCCL job), as
// the code before the table recorded them. (--batchnorm and --host-decode are refused on the CPU.)
TEST(SettingsPinned, RecordedRunOptionsAreThoseOfBeforeTheTable) {
  TempDir dir;
  EXPECT_EQ(recorded_run_line(dir, "o1",
                              {"--layout", "nchw", "--graph-copies", "2", "--data-threads", "2", "--crop-pad", "2",
                               "--mirror", "--synthetic-fill", "constant"}),
            R"j(run: {"augment":"random crop, pad 2, mirror","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"layout":"nchw","net":"lenet","net_file":"networks/lenet.yaml","run_id":"o1",)j"
            R"j("seed":1,"solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed","synthetic_fill":"constant",)j"
            R"j("train_samples":1024})j");
  EXPECT_EQ(recorded_run_line(dir, "o2", {"--conv-search", "no-width", "--layout", "auto",
                                          "--display", "3", "--pool-batches", "2", "--test-batch", "2"}),
            R"j(run: {"batch":4,"classes":10,"conv_search":"no-width","data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","run_id":"o2","seed":1,)j"
            R"j("solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed","synthetic_fill":"gaussian",)j"
            R"j("train_samples":1024})j");
}

// The measurement options and the manual split's shares, never recorded, as the code before the table
// recorded them (the split itself is: a configuration of its own).
TEST(SettingsPinned, MeasurementOptionsAndSharesAreNotRecorded) {
  TempDir dir;
  EXPECT_EQ(recorded_run_line(dir, "m1",
                              {"--power-hz", "0", "--measure", "phases", "--phase-window", "0.05", "--phase-repeats",
                               "2", "--mfu", "--mfu-window", "0.01", "--display", "1", "--data-threads", "2"}),
            R"j(run: {"batch":4,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
            R"j("net_file":"networks/lenet.yaml","run_id":"m1","seed":1,"solver":"lr 0.01 momentum 0.9 weight decay )j"
            R"j(0.0005 policy fixed","synthetic_fill":"gaussian","train_samples":1024})j");
  EXPECT_EQ(recorded_run_line(dir, "m2", {"--split", "manual", "--shares", "4"}),
            R"j(run: {"batch":4,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
            R"j("net_file":"networks/lenet.yaml","run_id":"m2","seed":1,"solver":"lr 0.01 momentum 0.9 weight decay )j"
            R"j(0.0005 policy fixed","split":"manual","synthetic_fill":"gaussian","train_samples":1024})j");
}

const std::string kPinned = kBaseExperiment +
                            "  repeats: 2\n"
                            "seed: 5\n"
                            "solver: {lr: 0.05, momentum: 0.8, weight_decay: 0.001, lr_policy: multistep, "
                            "milestones: [1, 2], warmup_iterations: 2}\n";

// As the sweep computed them before seeds varied (its --dry-run).
const std::vector<std::string> kPinnedIds = {
    "lenet-b8-g1-fp32-single-r1-93d27d6e",  "lenet-b8-g2-fp32-ov-r1-6314faef",
    "lenet-b16-g1-fp32-single-r1-28066b65", "lenet-b16-g2-fp32-ov-r1-5fd306b8",
    "lenet-b8-g1-fp32-single-r2-93d27d6e",  "lenet-b8-g2-fp32-ov-r2-6314faef",
    "lenet-b16-g1-fp32-single-r2-28066b65", "lenet-b16-g2-fp32-ov-r2-5fd306b8"};

TEST(SettingsPinned, FixedSeedsKeepEveryRunIdAndTheFirstRepeatKeepsItsIdWhenSeedsVary) {
  const std::vector<RunSpec> fixed = expand_runs(parse(kPinned, {"seeds=fixed"}));
  ASSERT_EQ(fixed.size(), kPinnedIds.size());
  for (size_t i = 0; i < fixed.size(); ++i) {
    EXPECT_EQ(fixed[i].id, kPinnedIds[i]);
    EXPECT_EQ(fixed[i].seed, 5);
    EXPECT_EQ(flag_value(train_arguments(parse(kPinned, {"seeds=fixed"}), fixed[i], "/r"), "--seed"), "5");
  }
  const Experiment e = parse(kPinned);  // seeds: vary, the default
  EXPECT_EQ(e.seeds, "vary");
  const std::vector<RunSpec> vary = expand_runs(e);
  ASSERT_EQ(vary.size(), kPinnedIds.size());
  for (size_t i = 0; i < vary.size(); ++i) {
    if (vary[i].repeat == 1) {
      EXPECT_EQ(vary[i].id, kPinnedIds[i]);
      EXPECT_EQ(vary[i].seed, 5);
    } else {
      EXPECT_NE(vary[i].id, kPinnedIds[i]);
      EXPECT_NE(vary[i].seed, 5);
      EXPECT_EQ(vary[i].config["seed"], vary[i].seed);  // part of the run's identity
    }
    const std::vector<std::string> args = train_arguments(e, vary[i], "/r");
    EXPECT_EQ(flag_value(args, "--seed"), std::to_string(vary[i].seed));
    EXPECT_NE(std::find(args.begin(), args.end(), "seed_base=5"), args.end());
    EXPECT_NE(std::find(args.begin(), args.end(), "seeds=vary"), args.end());
  }
  // The fixed part of the experiment (sweep.json's hash) is the same in both modes and as before.
  EXPECT_EQ(e.fixed_hash(), parse(kPinned, {"seeds=fixed"}).fixed_hash());
}

TEST(Seeds, RepeatsGetDistinctSeedsDerivedFromTheBase) {
  const Experiment e = parse(kBaseExperiment + "  repeats: 5\n");
  std::set<int64_t> seeds;
  for (const RunSpec& r : expand_runs(e)) {
    if (r.batch == 8 && r.ranks == 1) seeds.insert(r.seed);
    EXPECT_EQ(r.seed, repeat_seed(1, r.repeat));
    EXPECT_GE(r.seed, 0);
    EXPECT_LT(r.seed, int64_t(1) << 62);
  }
  EXPECT_EQ(seeds.size(), 5u);
  EXPECT_EQ(repeat_seed(1, 1), 1);
  EXPECT_NE(repeat_seed(1, 2), repeat_seed(2, 2));  // another base, other seeds
  std::set<int64_t> fixed;
  for (const RunSpec& r : expand_runs(parse(kBaseExperiment + "  repeats: 5\nseeds: fixed\n"))) fixed.insert(r.seed);
  EXPECT_EQ(fixed, std::set<int64_t>{1});
  expect_error(kBaseExperiment + "seeds: random\n", {"t.yaml:8:8: seeds:", "vary", "fixed"});
}

TEST(Seeds, ReportSaysWhetherRepeatsVariedTheirSeeds) {
  auto run_with = [](const std::string& mode) {
    report::RunRecord r;
    r.summary.tags["seeds"] = mode;
    return r;
  };
  EXPECT_EQ(report::seeds_mode({}), "");
  EXPECT_EQ(report::seeds_mode({run_with("vary"), run_with("vary")}), "seeds: vary");
  EXPECT_EQ(report::seeds_mode({run_with("fixed")}), "seeds: fixed");
  EXPECT_EQ(report::seeds_mode({run_with("fixed"), run_with("vary")}), "seeds: mixed");
}

}  // namespace
}  // namespace cnnscale::testing
