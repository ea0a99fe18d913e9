// Every experiment file shipped in experiments/ parses and expands into runs with distinct ids, on a
// node whose GPUs are unknown and on one with 4; the unequal-rank examples give train the flags
// their comments promise.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "cpu/experiment_test_util.hpp"
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
  for (const auto& f : files) {
    for (const HostInfo& host : {testing::cpu_host(), gpu_host(4)}) {
      SCOPED_TRACE(f.string());
      Experiment e;
      ASSERT_NO_THROW(e = load_experiment(f.string(), {}, host));
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

TEST(ExperimentFiles, OverlapCtasCrossesCtasAndDtypeOnFourGpus) {
  Experiment e;
  const auto runs = load_runs("overlap_ctas.yaml", &e);
  // 2 networks x 2 per-GPU batches x (1 GPU + 6 exchanges on 4) x 2 repeats.
  ASSERT_EQ(runs.size(), 56u);
  std::multiset<std::string> variants;
  for (const auto& r : runs) {
    const auto args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, "--precision"), "bf16");
    if (r.ranks == 1) continue;
    EXPECT_EQ(r.ranks, 4);
    variants.insert(flag_value(args, "--allreduce-max-ctas") + "/" + flag_value(args, "--allreduce-dtype"));
  }
  for (const char* v : {"<absent>/<absent>", "4/<absent>", "8/<absent>", "16/<absent>", "<absent>/compute",
                        "8/compute"})
    EXPECT_EQ(variants.count(v), 8u) << v;
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
