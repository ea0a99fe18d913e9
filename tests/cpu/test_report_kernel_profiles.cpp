// Kernel profile folders in `cnnscale report` (experiment/report_kernel_profiles.hpp): written by the
// results' writer from a recorded profile, found under */kernels/, made into the top-kernels, Table II
// and Fig. 6 tables, and drawn (scripts/report_plots_kernel_profile.py; skipped only where
// /usr/bin/python3 lacks matplotlib, which setup.sh installs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "common/temp_dir.hpp"
#include "cpu/kernel_profile_fixture.hpp"
#include "experiment/report.hpp"
#include "experiment/report_kernel_profiles.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A `time --kernels --metrics` profile, a `bench conv --kernels --metrics` one (its owners grouped by
// algorithm) and a `time --kernels` one without metrics, each in its folder.
void write_profiles(const std::string& root) {
  write_kernel_profile_folder(root, "study", testing::recorded_summary(), "20261207T100000Z");
  testing::RecordedProfile bench = testing::recorded_profile();
  bench.context.command = "bench conv";
  bench.context.group_kind = "algorithm";
  bench.context.group_of_layer = {{"conv1", "IMPLICIT_GEMM"}, {"conv2", "FFT"}, {"bn1", "WINOGRAD"}};
  write_kernel_profile_folder(
      root, "study", report::kernel_profile_summary(bench.profile, bench.metrics, bench.context), "20261207T100100Z");
  KernelProfileSummary plain = testing::recorded_summary(false);
  plain.precision = std::string("bf16");
  write_kernel_profile_folder(root, "study", plain, "20261207T100200Z");
}

TEST(ReportKernelProfiles, FindsTheFoldersAndSkipsBrokenOnes) {
  TempDir dir;
  write_profiles(dir.str());
  fs::create_directories(fs::path(dir.str()) / "study" / "kernels" / "broken");
  std::ofstream(fs::path(dir.str()) / "study" / "kernels" / "broken" / "summary.json") << "{\"command\": 3}";
  const auto files = report::find_kernel_profiles(dir.str());
  ASSERT_EQ(files.size(), 3u);
  // By path: conv-fp32-..., tiny-bf16-..., tiny-fp32-...
  EXPECT_EQ(files[0].s.command.value(), "bench conv");
  EXPECT_EQ(files[1].s.precision.value(), "bf16");
  EXPECT_EQ(files[2].s.command.value(), "time");
}

// A folder the report cannot read is named and skipped; the profiles beside it, before or after it
// in the walk, are still found. Permissions do not bind root, so there the test cannot make one.
TEST(ReportKernelProfiles, AnUnreadableFolderIsSkippedNotTheEndOfTheSearch) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every folder";
  TempDir dir;
  write_profiles(dir.str());
  for (const char* name : {"a_locked", "zz_locked"}) {
    const fs::path locked = fs::path(dir.str()) / name;
    fs::create_directories(locked / "kernels");
    fs::permissions(locked, fs::perms::none);
  }
  const auto files = report::find_kernel_profiles(dir.str());
  for (const char* name : {"a_locked", "zz_locked"}) fs::permissions(fs::path(dir.str()) / name, fs::perms::owner_all);
  EXPECT_EQ(files.size(), 3u);
}

TEST(ReportKernelProfiles, TablesHoldTopKernelsResourcesAndMetrics) {
  TempDir dir;
  write_profiles(dir.str());
  const auto files = report::find_kernel_profiles(dir.str());
  const std::string top = report::render_csv(report::kernel_profile_top_table(files));
  // The convolutions' GEMM, merged over conv1 and conv2: 900 of the group's 1000 ns per step.
  EXPECT_TRUE(has(top,
                  "tiny fp32 b64 training,NVIDIA H100 80GB HBM3,Convolution,forward,71.4,"
                  "\"cudnn::cnn::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, true, false, "
                  "true>\",90.0,0.0009,2.0"))
      << top;
  // bench conv: one group per algorithm.
  EXPECT_TRUE(has(top, "bench conv fp32 b64,NVIDIA H100 80GB HBM3,FFT,forward,42.9,")) << top;
  const std::string resources = report::render_csv(report::kernel_profile_resources_table(files));
  EXPECT_TRUE(has(resources, "true>\",256,128,1024,49152,25.0,registers")) << resources;
  const std::string metrics = report::render_csv(report::kernel_profile_metrics_table(files));
  // The profile without metrics has no rows here; the others' coverage stands beside each value.
  EXPECT_FALSE(has(metrics, "bf16")) << metrics;
  EXPECT_TRUE(has(metrics, "tiny fp32 b64 training,layer type,Convolution,forward,71.4,22.00,90.0,")) << metrics;
  EXPECT_TRUE(has(metrics, "bench conv fp32 b64,algorithm,IMPLICIT_GEMM,forward,28.6,20.00,75.0,")) << metrics;
  EXPECT_TRUE(
      has(metrics.substr(0, metrics.find('\n')), "achieved_occupancy_percent,achieved_occupancy_coverage_percent"))
      << metrics;
  EXPECT_TRUE(has(metrics.substr(0, metrics.find('\n')), ",ipc,ipc_coverage_percent,")) << metrics;
  EXPECT_FALSE(has(metrics.substr(0, metrics.find('\n')), "l2_throughput")) << metrics;  // nobody measured it
}

TEST(ReportKernelProfiles, ReportListsTheTablesAndDrawsFigureSix) {
  TempDir dir;
  write_profiles(dir.str());
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.plots = std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") == 0;
  const report::ReportOutcome outcome = report::write_report(o);
  EXPECT_EQ(outcome.kernel_profile_files, 3);
  const std::string md = slurp(outcome.report_md);
  EXPECT_TRUE(has(md, "3 kernel profile(s)")) << md;
  for (const char* table : {"kernel_profile_top", "kernel_profile_resources", "kernel_profile_metrics"}) {
    EXPECT_TRUE(fs::exists(fs::path(outcome.out_dir) / (std::string(table) + ".md"))) << table;
    EXPECT_TRUE(has(md, std::string("(#") + table + ")")) << table;
  }
  EXPECT_TRUE(has(md, "Li et al., Table II"));
  if (!o.plots) GTEST_SKIP() << "/usr/bin/python3 has no matplotlib: the figure is not drawn";
  const fs::path png = fs::path(outcome.out_dir) / report::kKernelProfileFigure;
  ASSERT_TRUE(fs::exists(png)) << md;
  EXPECT_EQ(slurp(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_TRUE(has(md, "Li et al., Fig. 6")) << md;
}

TEST(ReportKernelProfiles, ProfilesWithoutMetricsHaveTablesButNoFigure) {
  TempDir dir;
  write_kernel_profile_folder(dir.str(), "study", testing::recorded_summary(false), "20261207T100000Z");
  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome outcome = report::write_report(o);
  EXPECT_TRUE(outcome.figures.empty());
  EXPECT_FALSE(fs::exists(fs::path(outcome.out_dir) / "kernel_profile_metrics.md"));
  EXPECT_TRUE(fs::exists(fs::path(outcome.out_dir) / "kernel_profile_resources.md"));
  EXPECT_TRUE(has(slurp(outcome.report_md), "kernel profiles without metrics have no figure"));
}

}  // namespace
}  // namespace cnnscale
