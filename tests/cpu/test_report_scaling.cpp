// `cnnscale report`'s scaling tables on synthetic runs: speedup and efficiency against the one-GPU
// run (strong scaling, in two factors where one GPU also ran the per-GPU batch), weak scaling against
// the one-GPU run of the per-GPU batch, and which runs are a baseline (allreduce settings, one-rank
// exchange, NCCL environment).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::CsvRow;
using testing::read_csv;
using testing::report_without_plots;
using testing::row_of;
using testing::sample_std;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

TEST(Report, SpeedupAndEfficiencyAgainstTheOneGpuRun) {
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.str(), synthetic_run("net_a", 64, 1, rep, {{"samples_per_s", 100.0 + rep * 10}}));
    write_run(dir.str(), synthetic_run("net_a", 64, 2, rep, {{"samples_per_s", 180.0 + rep * 10}}));
  }
  write_run(dir.str(), synthetic_run("net_a", 128, 4, 0, {{"samples_per_s", 400.0}}));  // no 1-GPU run
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  ASSERT_EQ(rows.size(), 3u);
  const CsvRow& two = row_of(rows, "net_a", 2, 64);
  EXPECT_DOUBLE_EQ(std::stod(two.at("speedup_mean")), 185.0 / 105.0);
  EXPECT_DOUBLE_EQ(std::stod(two.at("efficiency_mean")), 185.0 / 105.0 / 2);
  EXPECT_DOUBLE_EQ(std::stod(two.at("baseline_samples_per_s_mean")), 105.0);
  const double rel = std::hypot(sample_std({180, 190}) / 185.0, sample_std({100, 110}) / 105.0);
  EXPECT_NEAR(std::stod(two.at("speedup_std")), 185.0 / 105.0 * rel, 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "net_a", 1, 64).at("speedup_mean")), 1.0);
  const CsvRow& orphan = row_of(rows, "net_a", 4, 128);
  EXPECT_EQ(orphan.at("speedup_mean"), "");
  EXPECT_EQ(orphan.at("efficiency_mean"), "");
  const std::string md = slurp(dir.file("report/scaling.md"));
  EXPECT_NE(md.find("| net_a | 4 | 128 | 1 | 400.0 | — | — | — |"), std::string::npos) << md;
}

// Strong-scaling efficiency in two factors where one GPU also ran the per-GPU batch: 4 GPUs at
// global 256 against 1 GPU at 256 (400 samples/s) and at 64 (250): one GPU keeps 250 / 400 of its
// rate at 64 samples, 4 GPUs at 64 each keep 900 / (4 x 250) of 4 times that, and the product is the
// efficiency 900 / (4 x 400). 4 GPUs at global 128 (32 each) have no 1-GPU run at 32: —.
TEST(Report, StrongScalingEfficiencyIsTheSmallBatchRatioTimesTheWeakEfficiency) {
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.str(), synthetic_run("net_a", 256, 1, rep, {{"samples_per_s", 390.0 + rep * 20}}));
    write_run(dir.str(), synthetic_run("net_a", 64, 1, rep, {{"samples_per_s", 245.0 + rep * 10}}));
    write_run(dir.str(), synthetic_run("net_a", 256, 4, rep, {{"samples_per_s", 890.0 + rep * 20}}));
  }
  write_run(dir.str(), synthetic_run("net_a", 128, 1, 0, {{"samples_per_s", 330.0}}));
  write_run(dir.str(), synthetic_run("net_a", 128, 4, 0, {{"samples_per_s", 600.0}}));
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  const CsvRow& four = row_of(rows, "net_a", 4, 256);
  EXPECT_DOUBLE_EQ(std::stod(four.at("small_batch_ratio_mean")), 250.0 / 400.0);
  EXPECT_DOUBLE_EQ(std::stod(four.at("weak_efficiency_mean")), 900.0 / (4 * 250.0));
  EXPECT_NEAR(std::stod(four.at("small_batch_ratio_mean")) * std::stod(four.at("weak_efficiency_mean")),
              std::stod(four.at("efficiency_mean")), 1e-15);
  const double rel = std::hypot(sample_std({245, 255}) / 250.0, sample_std({390, 410}) / 400.0);
  EXPECT_NEAR(std::stod(four.at("small_batch_ratio_std")), 250.0 / 400.0 * rel, 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "net_a", 1, 256).at("weak_efficiency_mean")), 1.0);
  const CsvRow& orphan = row_of(rows, "net_a", 4, 128);
  EXPECT_FALSE(orphan.at("efficiency_mean").empty());
  EXPECT_EQ(orphan.at("small_batch_ratio_mean"), "");
  EXPECT_EQ(orphan.at("weak_efficiency_mean"), "");
  const std::string md = slurp(dir.file("report/scaling.md"));
  EXPECT_NE(md.find("Both are — in 1 row(s) without a 1-rank run at the per-rank batch."), std::string::npos) << md;
}

// Weak scaling: 2 GPUs at global 128 against the 1-GPU run at 64 (its per-GPU batch), 4 GPUs at
// 256 likewise; 2 GPUs at 64 (per-GPU 32) have no 1-GPU run at 32 and get no row. Without any such
// pair the report has no weak-scaling table at all.
TEST(Report, WeakScalingAgainstTheOneGpuRunOfThePerGpuBatch) {
  {
    TempDir dir;
    write_run(dir.str(), synthetic_run("net_a", 64, 1, 0, {{"samples_per_s", 100.0}}));
    write_run(dir.str(), synthetic_run("net_a", 64, 2, 0, {{"samples_per_s", 150.0}}));
    report_without_plots(dir.str());
    EXPECT_FALSE(fs::exists(dir.file("report/weak_scaling.csv")));
  }
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.str(), synthetic_run("net_a", 64, 1, rep, {{"samples_per_s", 100.0 + rep * 10}}));
    write_run(dir.str(), synthetic_run("net_a", 128, 2, rep, {{"samples_per_s", 200.0 + rep * 10}}));
  }
  write_run(dir.str(), synthetic_run("net_a", 256, 4, 0, {{"samples_per_s", 380.0}}));
  write_run(dir.str(), synthetic_run("net_a", 64, 2, 0, {{"samples_per_s", 150.0}}));
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/weak_scaling.csv"));
  ASSERT_EQ(rows.size(), 2u);
  const CsvRow& two = row_of(rows, "net_a", 2, 128);
  EXPECT_EQ(two.at("batch_per_rank"), "64");
  EXPECT_DOUBLE_EQ(std::stod(two.at("baseline_samples_per_s_mean")), 105.0);
  EXPECT_DOUBLE_EQ(std::stod(two.at("scaled_speedup_mean")), 205.0 / 105.0);
  EXPECT_DOUBLE_EQ(std::stod(two.at("efficiency_mean")), 205.0 / 105.0 / 2);
  const double rel = std::hypot(sample_std({200, 210}) / 205.0, sample_std({100, 110}) / 105.0);
  EXPECT_NEAR(std::stod(two.at("scaled_speedup_std")), 205.0 / 105.0 * rel, 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "net_a", 4, 256).at("efficiency_mean")), 380.0 / 105.0 / 4);
  const std::string md = slurp(dir.file("report/weak_scaling.md"));
  EXPECT_NE(md.find("per-rank batch"), std::string::npos) << md;  // CPU runs: ranks, not GPUs
  EXPECT_NE(md.find("Weak scaling"), std::string::npos) << md;
}

// What train writes: a single rank has no allreduce (algo ""), the multi-rank runs say "ring" and
// run with overlap on and off. Both multi-rank variants scale against the one 1-GPU run, and the
// 1-GPU row carries no allreduce variant.
TEST(Report, OneGpuBaselineIgnoresAllreduceSettings) {
  TempDir dir;
  RunResults one = synthetic_run("net_b", 64, 1, 0, {{"samples_per_s", 100.0}});
  one.summary.allreduce_algo = std::string("");
  write_run(dir.str(), one);
  write_run(dir.str(), synthetic_run("net_b", 64, 2, 0, {{"samples_per_s", 190.0}}));
  RunResults serial = synthetic_run("net_b", 64, 2, 1, {{"samples_per_s", 170.0}});
  serial.run_id = "serial";
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), serial);
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  ASSERT_EQ(rows.size(), 3u);
  for (const CsvRow& r : rows) {
    if (r.at("gpus") == "1") {
      EXPECT_EQ(r.at("variant"), "");
      EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), 1.0);
    } else {
      EXPECT_DOUBLE_EQ(std::stod(r.at("baseline_samples_per_s_mean")), 100.0) << r.at("variant");
      EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), std::stod(r.at("samples_per_s_mean")) / 100.0);
    }
  }
}

// A one-rank job kept on the data-parallel path (--one-rank-exchange) measured that path: a
// configuration of its own, set against the GPU alone, and never the baseline of the multi-rank
// runs: not where it is the only 1-GPU run, nor where its GPU would rank it first (the plain run's
// is another model). Two such runs with other exchange settings stay two labelled rows.
TEST(Report, OneRankExchangeRunsAreSetAgainstTheGpuAloneAndAreNoBaseline) {
  for (const bool with_alone : {true, false}) {
    SCOPED_TRACE(with_alone ? "with a one-process run" : "without one");
    TempDir dir;
    if (with_alone) {
      RunResults one = testing::gpu_run(synthetic_run("net_b", 64, 1, 0, {{"samples_per_s", 100.0}}));
      one.summary.allreduce_algo = std::string("");
      one.summary.gpu_names = std::string("NVIDIA H100 NVL");
      write_run(dir.str(), one);
    }
    RunResults exchange = testing::gpu_run(synthetic_run("net_b", 64, 1, 1, {{"samples_per_s", 95.0}}));
    exchange.run_id = "exchange";
    exchange.summary.one_rank_exchange = 1.0;
    write_run(dir.str(), exchange);
    RunResults after = exchange;
    after.run_id = "after";
    after.summary.allreduce_overlap = 0.0;
    after.summary.samples_per_s = 90.0;
    write_run(dir.str(), after);
    write_run(dir.str(), testing::gpu_run(synthetic_run("net_b", 64, 2, 0, {{"samples_per_s", 190.0}})));
    const auto out = report_without_plots(dir.str());
    EXPECT_EQ(out.configurations, with_alone ? 4 : 3);
    const auto rows = read_csv(dir.file("report/scaling.csv"));
    ASSERT_EQ(rows.size(), with_alone ? 4u : 3u);
    std::set<std::string> exchange_variants;
    int multi_rank = 0;
    for (const CsvRow& r : rows) {
      if (r.at("variant").find("one_rank_exchange=1") != std::string::npos) {
        exchange_variants.insert(r.at("variant"));
        const double own = std::stod(r.at("samples_per_s_mean"));
        if (with_alone)
          EXPECT_DOUBLE_EQ(std::stod(r.at("speedup_mean")), own / 100.0) << "the path's cost against the GPU alone";
        else
          EXPECT_EQ(r.at("speedup_mean"), "");
      } else if (r.at("gpus") == "2") {
        ++multi_rank;
        EXPECT_EQ(r.at("baseline_samples_per_s_mean"), with_alone ? "100" : "") << r.at("variant");
      } else {
        EXPECT_EQ(r.at("variant").find("one_rank_exchange"), std::string::npos) << r.at("variant");
      }
    }
    EXPECT_EQ(exchange_variants.size(), 2u) << "one label per exchange configuration";
    EXPECT_EQ(multi_rank, 1);
  }
}

// Runs whose NCCL read another environment (NCCL_MAX_CTAS, say) measured another thing: separate
// configurations with the environment as their variant, each scaling against the one 1-GPU run,
// which exchanged nothing and carries no NCCL environment.
TEST(Report, NcclEnvironmentSeparatesMultiRankRunsNotTheirBaseline) {
  TempDir dir;
  RunResults one = synthetic_run("net_b", 64, 1, 0, {{"samples_per_s", 100.0}});
  one.summary.allreduce_algo = std::string("");
  write_run(dir.str(), one);
  RunResults plain = synthetic_run("net_b", 64, 2, 0, {{"samples_per_s", 190.0}});
  plain.system.nccl_env = "NCCL_ALGO=Ring";
  write_run(dir.str(), plain);
  RunResults limited = synthetic_run("net_b", 64, 2, 1, {{"samples_per_s", 180.0}});
  limited.run_id = "limited";
  limited.system.nccl_env = "NCCL_ALGO=Ring NCCL_MAX_CTAS=4";
  write_run(dir.str(), limited);
  const auto out = report_without_plots(dir.str());
  EXPECT_EQ(out.configurations, 3);
  const auto rows = read_csv(dir.file("report/scaling.csv"));
  ASSERT_EQ(rows.size(), 3u);
  std::set<std::string> variants;
  for (const CsvRow& r : rows) {
    variants.insert(r.at("variant"));
    if (r.at("gpus") != "1") {
      EXPECT_DOUBLE_EQ(std::stod(r.at("baseline_samples_per_s_mean")), 100.0) << r.at("variant");
    }
  }
  EXPECT_EQ(variants, (std::set<std::string>{"", "nccl_env=NCCL_ALGO=Ring", "nccl_env=NCCL_ALGO=Ring NCCL_MAX_CTAS=4"}));
}

}  // namespace
}  // namespace cnnscale
