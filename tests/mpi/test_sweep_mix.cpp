// A sweep over unequal CPU ranks and its report, end to end: experiments/cpu_mix.yaml's straggler mix
// (rank 1 three times slower, --slowdown) under the even, proportional and auto splits, each run
// recording its split and mix; the report's heterogeneous tables and figures made from them.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

TEST(SweepMix, StragglerMixUnderEachSplitIsSweptAndReported) {
  testing::TempDir dir;
  const std::string experiment = std::string(CNNSCALE_TEST_DATA) + "/../../experiments/cpu_mix.yaml";
  auto run = testing::run_job({CNNSCALE_BIN, "sweep", experiment, "--results", dir.str(), "--only", "cpu_mix=1+3"},
                              "OPENBLAS_NUM_THREADS=1", 600);
  ASSERT_EQ(run.exit_code, 0) << run.err;

  std::map<std::string, std::vector<int64_t>> shares;  // by split policy
  for (const auto& entry : fs::directory_iterator(fs::path(dir.str()) / "cpu_mix")) {
    if (!fs::exists(entry.path() / "summary.json")) continue;
    const auto j = nlohmann::json::parse(testing::slurp((entry.path() / "summary.json").string()));
    const auto& s = j["summary"];
    EXPECT_EQ(s["mix"], "slowdown 1+3") << entry.path();
    EXPECT_TRUE(s["imbalance"].is_number()) << entry.path();
    EXPECT_TRUE(s["efficiency"].is_number()) << entry.path();
    ASSERT_EQ(j["ranks"].size(), 2u);
    EXPECT_EQ(j["ranks"][1]["slowdown"], 3.0);
    EXPECT_TRUE(j["ranks"][1]["compute_s"].is_number());
    const std::string policy = s["split"].get<std::string>();
    const auto& changes = j["split"]["changes"];
    ASSERT_FALSE(changes.empty()) << policy;
    shares[policy] = changes.back()["shares"].get<std::vector<int64_t>>();
    if (policy == "proportional") {
      EXPECT_EQ(j["split"]["models"].size(), 2u);
    }
  }
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares["even"], (std::vector<int64_t>{64, 64}));
  // The slower rank gets clearly less under both balancing policies: about 32 of 128 for a 3x
  // straggler. On a busy 2-core host the ranks' loader threads compete with the other rank's
  // compute, so the measured ratio wanders (22 to 43 seen here); an even or inverted split, or a
  // starved rank, means the policy did not balance.
  for (const char* policy : {"proportional", "auto"}) {
    EXPECT_LE(shares[policy][1], 52) << policy;
    EXPECT_GE(shares[policy][1], 8) << policy;
  }

  auto rep = testing::run_cnnscale({"report", (fs::path(dir.str()) / "cpu_mix").string()});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const fs::path out = fs::path(dir.str()) / "cpu_mix" / "report";
  const std::string md = testing::slurp((out / "report.md").string());
  for (const std::string& name : report::kHeteroFigures) {
    EXPECT_TRUE(fs::exists(out / name)) << name << "\n" << md;
    EXPECT_NE(md.find("](" + name + ")"), std::string::npos) << name;
  }
  EXPECT_NE(md.find("slowdown 1+3"), std::string::npos) << md;
  for (const char* policy : {"even", "proportional", "auto"}) EXPECT_NE(md.find(policy), std::string::npos) << policy;
}

}  // namespace
}  // namespace cnnscale
