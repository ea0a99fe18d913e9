// `cnnscale report` with mixed precision: each precision (and each allreduce dtype) is a configuration
// of its own, named by its precision in the variant column that the figures' labels use, scaling
// compares it with the 1-GPU run of the same precision, results written before precisions were
// recorded join fp32, and the time table shows each configuration's peak device memory.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"

namespace cnnscale {
namespace {

using testing::CsvRow;
using testing::read_csv;
using testing::report_without_plots;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

constexpr double kGiB = double(int64_t{1} << 30);

RunResults precision_run(const std::string& precision, int gpus, int repeat, double samples_per_s, double peak_gib) {
  RunResults r = testing::gpu_run(synthetic_run("resnet34", 64, gpus, repeat,
                                                {{"samples_per_s", samples_per_s},
                                                 {"seconds_per_batch", 64 / samples_per_s},
                                                 {"peak_memory_bytes", peak_gib * kGiB}}));
  r.summary.precision = precision;
  r.summary.allreduce_dtype = std::string("fp32");
  r.run_id = fmt::format("resnet34-g{}-{}-r{}", gpus, precision, repeat);
  return r;
}

// "gpus variant" -> row of a table's CSV.
std::map<std::string, CsvRow> rows_by_variant(const std::string& csv) {
  std::map<std::string, CsvRow> out;
  for (const CsvRow& r : read_csv(csv)) out[r.at("gpus") + " " + r.at("variant")] = r;
  return out;
}

TEST(ReportPrecision, EachPrecisionIsItsOwnRowAndSeries) {
  TempDir dir;
  for (int repeat : {0, 1}) {
    write_run(dir.str(), precision_run("fp32", 1, repeat, 100.0 + repeat, 10.0));
    write_run(dir.str(), precision_run("fp32", 2, repeat, 180.0 + repeat, 10.5));
    write_run(dir.str(), precision_run("bf16", 1, repeat, 250.0 + repeat, 5.0 + repeat));
    write_run(dir.str(), precision_run("bf16", 2, repeat, 400.0 + repeat, 5.5));
  }
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 4);

  const auto time = rows_by_variant(dir.file("report/time.csv"));
  ASSERT_EQ(time.size(), 4u);
  // A precision is named by itself: the figures label a series "batch 64 bf16" under "resnet34".
  EXPECT_EQ(time.at("1 fp32").at("samples_per_s_mean"), "100.5");
  EXPECT_EQ(time.at("1 bf16").at("samples_per_s_mean"), "250.5");
  EXPECT_EQ(time.at("2 bf16").at("runs"), "2") << "the repeats of one precision, not of two";
  // Peak memory in GiB, mean and std over the repeats.
  EXPECT_DOUBLE_EQ(std::stod(time.at("1 fp32").at("peak_memory_gib_mean")), 10.0);
  EXPECT_DOUBLE_EQ(std::stod(time.at("1 bf16").at("peak_memory_gib_mean")), 5.5);
  EXPECT_NEAR(std::stod(time.at("1 bf16").at("peak_memory_gib_std")), std::sqrt(0.5), 1e-9);
  const std::string md = slurp(dir.file("report/time.md"));
  EXPECT_NE(md.find("peak memory (GiB)"), std::string::npos) << md;
  EXPECT_NE(md.find("| bf16 |"), std::string::npos) << md;

  // Speedup against the 1-GPU run of the same precision.
  const auto scaling = rows_by_variant(dir.file("report/scaling.csv"));
  EXPECT_DOUBLE_EQ(std::stod(scaling.at("2 bf16").at("baseline_samples_per_s_mean")), 250.5);
  EXPECT_DOUBLE_EQ(std::stod(scaling.at("2 fp32").at("baseline_samples_per_s_mean")), 100.5);

  // The wide table (and the scaling figure drawn from it): one row per precision.
  const auto wide = read_csv(dir.file("report/by_gpus.csv"));
  ASSERT_EQ(wide.size(), 2u);
  std::map<std::string, std::string> speedup;
  for (const CsvRow& r : wide) speedup[r.at("variant")] = r.at("speedup_g2_mean");
  EXPECT_NEAR(std::stod(speedup.at("bf16")), 400.5 / 250.5, 1e-9);
  EXPECT_NEAR(std::stod(speedup.at("fp32")), 180.5 / 100.5, 1e-9);
}

TEST(ReportPrecision, RunsWithoutPrecisionFiguresJoinFp32) {
  TempDir dir;
  RunResults now = precision_run("fp32", 2, 0, 100.0, 1.0);
  RunResults before = precision_run("fp32", 2, 1, 110.0, 1.0);
  before.summary.precision = TextFigure();  // files written before either was recorded
  before.summary.allreduce_dtype = TextFigure();
  before.summary.peak_memory_bytes = NumberFigure();
  write_run(dir.str(), now);
  write_run(dir.str(), before);
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 1);
  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("runs"), "2");
  EXPECT_EQ(rows[0].at("peak_memory_gib_mean"), "1") << "the mean over the runs that recorded it";
}

TEST(ReportPrecision, AllreduceDtypeIsAVariantOfMultiRankRunsOnly) {
  TempDir dir;
  write_run(dir.str(), precision_run("bf16", 1, 0, 250.0, 5.0));
  write_run(dir.str(), precision_run("bf16", 2, 0, 400.0, 5.0));
  RunResults compute = precision_run("bf16", 2, 1, 450.0, 5.0);
  compute.summary.allreduce_dtype = std::string("bf16");
  write_run(dir.str(), compute);
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 3);
  const auto time = rows_by_variant(dir.file("report/time.csv"));
  ASSERT_EQ(time.size(), 3u);
  EXPECT_EQ(time.at("2 allreduce_dtype=bf16").at("samples_per_s_mean"), "450");
  EXPECT_EQ(time.at("2 allreduce_dtype=fp32").at("samples_per_s_mean"), "400");
  EXPECT_EQ(time.count("1 "), 1u) << "a single rank exchanges nothing: no allreduce dtype";
  // Both exchanges scale from the one 1-GPU bf16 run.
  const auto scaling = rows_by_variant(dir.file("report/scaling.csv"));
  EXPECT_EQ(scaling.at("2 allreduce_dtype=bf16").at("baseline_samples_per_s_mean"), "250");
}

// NCCL's CTA policy and the exchange stream's priority (train --allreduce-cta-policy/--allreduce-priority)
// change what a multi-rank run measures: such runs are variants of their own, not repeats of the
// default's, and files from before the field existed count as the default.
TEST(ReportPrecision, AllreduceTuningIsAVariantOfMultiRankRuns) {
  TempDir dir;
  write_run(dir.str(), precision_run("bf16", 1, 0, 250.0, 5.0));
  RunResults older = precision_run("bf16", 2, 0, 400.0, 5.0);  // written before the field existed
  older.summary.allreduce_tuning = TextFigure();
  write_run(dir.str(), older);
  RunResults plain = precision_run("bf16", 2, 1, 410.0, 5.0);
  plain.summary.allreduce_tuning = std::string("default");
  write_run(dir.str(), plain);
  RunResults tuned = precision_run("bf16", 2, 2, 470.0, 5.0);
  tuned.summary.allreduce_tuning = std::string("efficiency, low priority");
  write_run(dir.str(), tuned);
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 3);
  const auto time = rows_by_variant(dir.file("report/time.csv"));
  ASSERT_EQ(time.size(), 3u);
  EXPECT_EQ(time.at("2 allreduce_tuning=efficiency, low priority").at("samples_per_s_mean"), "470");
  EXPECT_EQ(time.at("2 allreduce_tuning=default").at("samples_per_s_mean"), "405");
  EXPECT_EQ(time.at("2 allreduce_tuning=default").at("runs"), "2");
}

TEST(ReportPrecision, NoPeakMemoryColumnWithoutAnyRecordedPeak) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 100.0}}));
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].count("peak_memory_gib_mean"), 0u);
}

}  // namespace
}  // namespace cnnscale
