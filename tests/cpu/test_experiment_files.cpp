// Every experiment file shipped in experiments/ parses and expands into runs with distinct ids, on a
// node whose GPUs are unknown and on one with 4; the unequal-rank examples give train the flags
// their comments promise.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/experiment_test_util.hpp"
#include "data/shard_convert.hpp"
#include "experiment/experiment.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

const fs::path kExperiments = fs::path(CNNSCALE_TEST_DATA).parent_path().parent_path() / "experiments";

using testing::flag_value;
using testing::gpu_host;

std::vector<RunSpec> load_runs(const std::string& name, Experiment* e = nullptr) {
  Experiment x = load_experiment((kExperiments / name).string(), {}, gpu_host(4));
  auto runs = expand_runs(x);
  if (e) *e = x;
  return runs;
}

TEST(ExperimentFiles, EveryShippedFileParsesAndExpands) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kExperiments))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  ASSERT_GE(files.size(), 5u) << kExperiments;
  // accuracy.yaml and gait_flow.yaml read shard folders the user converts first
  // (results/shards/fashion-mnist, results/shards/gait-flow): here a small folder of the same shape
  // and classes stands in for each, given as an override (the gait one a manifest alone: parsing
  // reads nothing more).
  testing::TempDir tmp;
  const std::string shards = tmp.file("fm"), gait = tmp.file("gait");
  publish_shard_folder(shards, [](const std::string& dir) {
    ShardManifest m;
    m.name = "fashion-mnist";
    m.sample_shape = {1, 28, 28};
    m.classes = 10;
    m.mean = {0.286f};
    m.stddev = {0.353f};
    m.chunk_samples = 16;
    ShardWriter w(dir, "train", m.sample_shape, 1000, 16);
    const std::vector<uint8_t> image(784, 7);
    for (int i = 0; i < 640; ++i) w.add(image.data(), i % 10);
    m.splits["train"] = w.finish();
    write_shard_manifest(dir, m);
  });
  fs::create_directories(gait);
  ShardManifest flow;
  flow.name = "gait";
  flow.sample_shape = {50, 60, 60};
  flow.classes = 150;
  flow.mean.assign(50, 0.5f);
  flow.stddev.assign(50, 0.1f);
  flow.chunk_samples = 5;
  flow.splits["train"] = ShardSplit{3000, {ShardInfo{"train-00000.h5", 3000, 0, 0}}};
  write_shard_manifest(gait, flow);
  const std::map<std::string, std::pair<std::string, std::string>> converted = {
      {"accuracy.yaml", {"results/shards/fashion-mnist", shards}}, {"gait_flow.yaml", {"results/shards/gait-flow", gait}}};
  for (const auto& f : files) {
    std::vector<std::string> overrides;
    if (auto c = converted.find(f.filename().string()); c != converted.end()) {
      if (!fs::exists(kExperiments.parent_path() / c->second.first)) {
        // Not converted yet: the file says what is missing, by line and key path.
        try {
          load_experiment(f.string(), {}, testing::cpu_host());
          ADD_FAILURE() << f << " parsed without its shard folder";
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("dataset.name: shard folder"), std::string::npos) << e.what();
        }
      }
      overrides.push_back("dataset.name=hdf5:" + c->second.second);
    }
    for (const HostInfo& host : {testing::cpu_host(), gpu_host(4)}) {
      SCOPED_TRACE(f.string());
      Experiment e;
      ASSERT_NO_THROW(e = load_experiment(f.string(), overrides, host));
      const auto runs = expand_runs(e);
      EXPECT_FALSE(runs.empty());
      std::set<std::string> ids;
      for (const auto& r : runs) ids.insert(r.id);
      EXPECT_EQ(ids.size(), runs.size());
      for (const auto& r : runs) EXPECT_NO_THROW(train_arguments(e, r, "/r"));
    }
  }
}

TEST(ExperimentFiles, SeedStudyHeteroIsSmPartitionsTimesPolicies) {
  Experiment e;
  const auto runs = load_runs("seed_study_hetero.yaml", &e);
  // 4 networks x 3 batches x 2 mixes x 5 policies x 3 repeats.
  ASSERT_EQ(runs.size(), 360u);
  std::set<std::string> sms, splits;
  for (const auto& r : runs) {
    EXPECT_EQ(r.ranks, 4);
    const auto args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, "--gpus"), "0,1,2,3");
    sms.insert(flag_value(args, "--sm-counts"));
    splits.insert(flag_value(args, "--split"));
  }
  EXPECT_EQ(sms, (std::set<std::string>{"132,132,66,66", "132,66,66,66"}));
  EXPECT_EQ(splits, (std::set<std::string>{"even", "proportional", "auto", "energy", "edp"}));
  // The same fixed part as the study's homogeneous runs.
  Experiment homogeneous = load_experiment((kExperiments / "seed_study.yaml").string(), {}, HostInfo{4, "x", true});
  nlohmann::json a = e.fixed_json(), b = homogeneous.fixed_json();
  a.erase("name");
  b.erase("name");
  EXPECT_EQ(a, b);
}

TEST(ExperimentFiles, OverlapCtasCrossesTheExchangeTunablesOnFourGpus) {
  Experiment e;
  const auto runs = load_runs("overlap_ctas.yaml", &e);
  // 2 networks x 2 per-GPU batches x (1 GPU + 7 exchanges on 4) x 2 repeats.
  ASSERT_EQ(runs.size(), 64u);
  std::multiset<std::string> variants;
  for (const auto& r : runs) {
    const auto args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, "--precision"), "bf16");
    if (r.ranks == 1) continue;
    EXPECT_EQ(r.ranks, 4);
    variants.insert(flag_value(args, "--allreduce-max-ctas") + "/" + flag_value(args, "--allreduce-cta-policy") + "/" +
                    flag_value(args, "--allreduce-priority") + "/" + flag_value(args, "--allreduce-dtype"));
  }
  for (const char* v :
       {"<absent>/<absent>/<absent>/<absent>", "8/<absent>/<absent>/<absent>", "<absent>/efficiency/<absent>/<absent>",
        "<absent>/<absent>/low/<absent>", "<absent>/<absent>/<absent>/compute", "<absent>/efficiency/<absent>/compute",
        "<absent>/<absent>/low/compute"})
    EXPECT_EQ(variants.count(v), 8u) << v;
}

// The NVIDIA inference whitepaper's networks (AlexNet, GoogLeNet) at its batch sizes (1 and 128) and
// formats (fp32, fp16) beside the study's three, whose runs keep the ids they had before.
TEST(ExperimentFiles, InferenceCoversTheWhitepapersNetworks) {
  Experiment e;
  const auto runs = load_runs("inference.yaml", &e);
  ASSERT_EQ(runs.size(), 5u * 5u * 3u);  // networks x precisions x repeats
  for (const char* b : {"1", "128"})  // every run measures the whole list
    EXPECT_NE(std::find(e.infer.batches.begin(), e.infer.batches.end(), b), e.infer.batches.end()) << b;
  std::set<std::string> ids, whitepaper;
  for (const auto& r : runs) {
    ids.insert(r.id);
    if ((r.network == "alexnet" || r.network == "googlenet") && (r.precision == "fp32" || r.precision == "fp16"))
      whitepaper.insert(r.network + " " + r.precision);
  }
  EXPECT_EQ(whitepaper, (std::set<std::string>{"alexnet fp16", "alexnet fp32", "googlenet fp16", "googlenet fp32"}));
  // The file's earlier matrix (three networks): the same runs, the same ids.
  Experiment before = load_experiment((kExperiments / "inference.yaml").string(),
                                      {"matrix.network=[resnet50,resnet34,caffenet]"}, gpu_host(4));
  const auto earlier = expand_runs(before);
  ASSERT_EQ(earlier.size(), 45u);
  for (const auto& r : earlier) EXPECT_EQ(ids.count(r.id), 1u) << r.id;
  EXPECT_EQ(earlier.front().id, "resnet50-infer-g1-fp32-r1-831baf4a");  // as the three-network file named it
  EXPECT_EQ(earlier.back().id, "caffenet-infer-g1-int8-r3-f0110bcb");
}

TEST(ExperimentFiles, CpuMixRunsWithoutAGpu) {
  Experiment e;
  const auto runs = load_runs("cpu_mix.yaml", &e);
  EXPECT_EQ(e.device, "cpu");
  ASSERT_EQ(runs.size(), 6u);  // 2 mixes x 3 policies
  std::set<std::string> seen;
  for (const auto& r : runs) {
    const auto args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, "--device"), "cpu");
    EXPECT_EQ(r.ranks, 2);
    seen.insert(flag_value(args, "--slowdown") + " " + flag_value(args, "--split"));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"1,1 even", "1,1 proportional", "1,1 auto", "1,3 even", "1,3 proportional",
                                         "1,3 auto"}));
}

TEST(ExperimentFiles, MixedClusterCrossesMixesWithPolicies) {
  Experiment e;
  const auto runs = load_runs("mixed_cluster.yaml", &e);
  // Per network and batch: the 1-rank run on GPU 0 and on GPU 2, then 2 mixes x 5 policies.
  ASSERT_EQ(runs.size(), 2u * 2u * (2u + 10u));
  const auto n = std::count_if(runs.begin(), runs.end(), [&](const RunSpec& r) {
    const auto args = train_arguments(e, r, "/r");
    return flag_value(args, "--gpus") == "0,2" && flag_value(args, "--split") == "edp";
  });
  EXPECT_EQ(n, 4);
}

}  // namespace
}  // namespace cnnscale
