// experiments/table1_ctc.yaml, the study's CTC conclusion on the networks that reproduce its Table 1:
// on GPUs, the four networks at global batch 256 on 1, 2 and 4 GPUs in fp32; with the CPU overrides
// its header gives (CI runs six of them for real: tests/mpi/test_sweep_table1_ctc.cpp), the same
// twelve points on CPU ranks, which `sweep --dry-run` plans.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

const std::string kFile =
    (fs::path(CNNSCALE_TEST_DATA).parent_path().parent_path() / "experiments" / "table1_ctc.yaml").string();

// What the file's header gives for CPU ranks.
const std::vector<std::string> kCpuOverrides = {"device=cpu", "iterations=2", "matrix.batch=[4]", "measure=steady",
                                                "matrix.repeats=1"};

const std::set<std::string> kNetworks = {"caffenet", "resnet_gait_study", "cnn2d_gait_study", "resnetim_study"};

TEST(Table1CtcExperiment, FourNetworksAtBatch256OnOneTwoAndFourGpus) {
  Experiment e = load_experiment(kFile, {}, testing::gpu_host(4));
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 4u * 3u * 3u);  // networks x GPU counts x repeats
  std::set<std::string> networks;
  std::set<int64_t> ranks;
  for (const auto& r : runs) {
    networks.insert(r.network);
    ranks.insert(r.ranks);
    EXPECT_EQ(r.batch, 256) << r.id;
    EXPECT_EQ(r.precision, "fp32") << r.id;
    const auto args = train_arguments(e, r, "/r");
    EXPECT_EQ(testing::flag_value(args, "--device"), "gpu") << r.id;
    EXPECT_EQ(testing::flag_value(args, "--measure"), "phases") << r.id;
  }
  EXPECT_EQ(networks, kNetworks);
  EXPECT_EQ(ranks, (std::set<int64_t>{1, 2, 4}));
}

TEST(Table1CtcExperiment, CpuRanksPlanTheSameTwelvePoints) {
  Experiment e = load_experiment(kFile, kCpuOverrides, testing::cpu_host());
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 12u);
  for (const auto& r : runs) {
    EXPECT_EQ(r.batch, 4) << r.id;
    EXPECT_EQ(r.iterations, 2) << r.id;
    EXPECT_EQ(testing::flag_value(train_arguments(e, r, "/r"), "--device"), "cpu") << r.id;
  }
  std::vector<std::string> args = {"sweep", kFile, "--dry-run", "--results",
                                   (fs::temp_directory_path() / "cnnscale_table1_ctc_dry").string()};
  args.insert(args.end(), kCpuOverrides.begin(), kCpuOverrides.end());
  testing::CliResult r = testing::run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& n : kNetworks) EXPECT_NE(r.out.find(n), std::string::npos) << n << "\n" << r.out;
}

}  // namespace
}  // namespace cnnscale
