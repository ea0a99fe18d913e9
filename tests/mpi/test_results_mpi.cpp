// A 2-rank CPU job writes one results folder (rank 0) holding both ranks: the timeline's rank axis,
// each rank's own figures, the job's time as the slowest rank's, and the phase loops run on both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/temp_dir.hpp"
#include "io/results_writer.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale::testing {
namespace {

TEST(ResultsMpi, TwoRanksInOneFolder) {
  TempDir dir;
  MpiResult r = run_mpi(2, {"train",           "--net",         std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml",
                            "--data",          "fashion-mnist", "--train-samples",
                            "256",             "--test-samples", "100",
                            "--batch",         "32",            "--epochs",
                            "3",               "--results",     dir.str(),
                            "--experiment",    "mpi",           "--run-id",
                            "two",             "--min-window",  "0",
                            "--measure",       "phases",        "--phase-window",
                            "0.05",            "--phase-repeats", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = std::filesystem::path(dir.str()) / "mpi" / "two";
  RunResults res = read_run_results(run.string());
  EXPECT_EQ(res.timeline.ranks(), 2);
  EXPECT_EQ(res.timeline.iterations(), 24);
  for (int64_t rank = 0; rank < 2; ++rank)
    for (int64_t i = 0; i < 24; ++i) {
      EXPECT_GT(res.timeline.at(i, rank, TimelinePhase::Backward), 0.0);
      // CPU ranks: the exposed allreduce and the time inside MPI calls are host clock readings.
      EXPECT_GE(res.timeline.at(i, rank, TimelinePhase::CommBusy), 0.0);
    }
  EXPECT_EQ(res.system.hosts.size(), 1u);
  EXPECT_TRUE(res.system.gpus.empty());
  ASSERT_TRUE(res.system.mpi_version.has_value());
  EXPECT_FALSE(res.system.mpi_version->empty());
  EXPECT_EQ(res.system.nccl_env, std::nullopt) << "CPU ranks exchange through MPI, not NCCL";
  EXPECT_DOUBLE_EQ(res.summary.world_size.value(), 2);
  ASSERT_EQ(res.rank_summary.size(), 2u);
  double slowest = 0, most_memory = 0;
  for (const auto& rank : res.rank_summary) {
    EXPECT_DOUBLE_EQ(rank.local_batch.value(), 16);
    slowest = std::max(slowest, rank.seconds_per_batch.value());
    EXPECT_GT(rank.peak_memory_bytes.value(), 0.0);
    most_memory = std::max(most_memory, rank.peak_memory_bytes.value());
    // Each rank's own graph figures, gathered beside its report.
    EXPECT_EQ(rank.cuda_graph.value_or(""), "off: cpu backend: ops run as they are called");
    EXPECT_EQ(rank.graph_replays.value_or(-1), 0.0);
  }
  EXPECT_DOUBLE_EQ(res.summary.seconds_per_batch.value(), slowest);
  EXPECT_DOUBLE_EQ(res.summary.peak_memory_bytes.value(), most_memory) << "the job's: the largest rank's";
  EXPECT_EQ(res.summary.precision.value(), "fp32");
  EXPECT_EQ(res.summary.allreduce_dtype.value(), "fp32");
  EXPECT_EQ(res.summary.cuda_graph.value_or(""), "off: cpu backend: ops run as they are called");
  EXPECT_EQ(res.summary.graph_replays.value_or(-1), 0.0);
  EXPECT_GT(res.summary.loop_forward_s.value(), 0.0);
  EXPECT_TRUE(std::isfinite(res.summary.loop_update_allreduce_s.value()));
  ASSERT_EQ(res.epochs.size(), 3u);
  EXPECT_GT(res.epochs.back().top1, 0.0);
  // Only rank 0 writes: one folder, nothing partial.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(dir.str()) / "mpi"))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"two"});
}

// On CPU ranks only the first rank of a host reads RAPL, so only it "measures energy"; the steady
// window's extension contains collectives, so every rank must take part in it or the job hangs.
TEST(ResultsMpi, WindowExtensionIsCollectiveWhenOnlyOneRankReadsRapl) {
  TempDir dir;
  const auto zone = std::filesystem::path(dir.str()) / "powercap" / "intel-rapl:0";
  std::filesystem::create_directories(zone);
  std::ofstream(zone / "name") << "package-0\n";
  std::ofstream(zone / "energy_uj") << "1000000\n";  // a counter that does not move: 0 J
  std::ofstream(zone / "max_energy_range_uj") << "262143328850\n";
  MpiResult r = run_mpi(2,
                        {"train", "--net", std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml", "--data", "synthetic",
                         "--batch", "16", "--iterations", "30", "--results", dir.str(), "--experiment", "rapl",
                         "--run-id", "one", "--min-window", "0.5", "--power-hz", "0"},
                        {"CNNSCALE_RAPL_ROOT=" + (std::filesystem::path(dir.str()) / "powercap").string()}, 60);
  ASSERT_FALSE(r.timed_out) << "ranks disagreed about extending the window: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RunResults res = read_run_results((std::filesystem::path(dir.str()) / "rapl" / "one").string());
  EXPECT_GT(res.summary.window_extension_iterations.value(), 0.0);
  EXPECT_GE(res.summary.window_seconds.value(), 0.5);
  EXPECT_DOUBLE_EQ(res.summary.cpu_package_joules_per_batch.value(), 0.0);
  EXPECT_DOUBLE_EQ(res.summary.joules_per_batch.value(), 0.0) << "CPU run: RAPL, counted once";
}

}  // namespace
}  // namespace cnnscale::testing
