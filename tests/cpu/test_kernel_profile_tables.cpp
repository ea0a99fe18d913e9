// The kernel profile's text tables (experiment/kernel_profile_output.hpp) on a recorded profile:
// each table is there with its heading and units, the rows hold the recorded figures, a metric
// value from part of a group's time says so, and kernel names are shortened sensibly.
#include <gtest/gtest.h>

#include <sstream>

#include "cpu/kernel_profile_fixture.hpp"

namespace cnnscale {
namespace {

using report::short_kernel_name;

// The lines of `text` from the one starting with `heading` to the next blank line.
std::vector<std::string> block(const std::string& text, const std::string& heading) {
  std::stringstream in(text);
  std::vector<std::string> out;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(heading)) inside = true;
    if (inside && line.empty()) break;
    if (inside) out.push_back(line);
  }
  return out;
}

bool has(const std::string& line, const std::string& part) {
  return line.find(part) != std::string::npos;
}

TEST(KernelProfileTables, ShortNamesDropArgumentsAndKeepBothEnds) {
  EXPECT_EQ(short_kernel_name("void scale_kernel<float>(float*, int)", 40), "scale_kernel<float>");
  EXPECT_EQ(short_kernel_name("gemm_kernel", 40), "gemm_kernel");
  // Parentheses inside the template arguments are not the argument list.
  EXPECT_EQ(short_kernel_name("void k<(int)4>(int)", 40), "k<(int)4>");
  const std::string s = short_kernel_name(testing::kLongGemmName, 60);
  EXPECT_EQ(s.size(), 60u);
  EXPECT_TRUE(s.starts_with("cudnn::cnn::implicit_convolve_sgemm")) << s;
  EXPECT_TRUE(s.ends_with("false, true>")) << s;
  EXPECT_TRUE(has(s, "...")) << s;
}

TEST(KernelProfileTables, HeaderSaysWhatWasProfiledAndWhatItCost) {
  const std::string t = report::kernel_profile_tables(testing::recorded_summary());
  EXPECT_TRUE(t.starts_with("# kernels of tiny on NVIDIA H100 80GB HBM3 (sm_90), fp32, batch 64, training\n")) << t;
  EXPECT_TRUE(
      has(t, "2 profiled step(s) after 3 warm-up; kernel records: 10 attributed, 2 unattributed, none dropped"));
  EXPECT_TRUE(has(t, "# CUDA graphs: profiled without the graph"));
  EXPECT_TRUE(has(t, "kernel time per step 0.0014 ms"));
  EXPECT_TRUE(has(t, "(profiling overhead +25.0%)"));
  EXPECT_TRUE(has(t,
                  "3 kernel metric(s) by CUPTI range profiler, kernel replay on GH100: 4 replay pass(es) per "
                  "kernel, 1.5 s of profiling"));
}

// bench conv's problems may differ in batch: the header names the batch only where they share one.
TEST(KernelProfileTables, ABenchHeaderNamesTheBatchOnlyWhereTheProblemsShareIt) {
  KernelProfileSummary s = testing::recorded_summary();
  s.command = std::string("bench conv");
  s.batch = CountFigure(256);
  EXPECT_TRUE(report::kernel_profile_tables(s).starts_with(
      "# kernels of cnnscale bench conv on NVIDIA H100 80GB HBM3 (sm_90), fp32, batch 256, per algorithm and pass\n"));
  s.batch = CountFigure::null();
  EXPECT_TRUE(report::kernel_profile_tables(s).starts_with(
      "# kernels of cnnscale bench conv on NVIDIA H100 80GB HBM3 (sm_90), fp32, batches differing by problem, per "
      "algorithm and pass\n"));
}

// Each part's kernel sum against its measured time: how many parts (and how much of the measured
// time) come within 5 %, alone and with the gaps before their launches, and the median remainder per
// launch.
TEST(KernelProfileTables, HeaderComparesEachPartsKernelsWithItsMeasuredTime) {
  const auto part = [](const char* name, double kernels, NumberFigure measured, double launches, double gaps) {
    KernelProfileOwner o;
    o.owner = std::string(name);
    o.kernel_ms_per_step = kernels;
    o.measured_ms_per_step = measured;
    o.launches_per_step = launches;
    o.gap_ms_per_step = gaps;
    return o;
  };
  KernelProfileSummary s;
  // Left per launch: conv1 (1.0 - 0.98) ms / 4 = 5 us, loss 5 us, bn1 50 us; update has no
  // measured time of its own and is no part of the comparison. With the gaps before their launches
  // the loss comes to 0.0098 of 0.010 ms (within 5 %), bn1 to 0.21 of 0.3 (not).
  s.owners = std::vector<KernelProfileOwner>{part("conv1 forward", 0.98, 1.0, 4, 0.015),
                                             part("loss forward", 0.005, 0.010, 1, 0.0048),
                                             part("bn1 forward", 0.2, 0.3, 2, 0.01), part("update", 0.1, {}, 1, 0.001)};
  const std::string t = report::kernel_profile_tables(s);
  // 1.0 of 1.31 ms measured is conv1's: 76.3 %; with the loss's 0.01, 77.1 %.
  EXPECT_TRUE(has(t,
                  "# kernels vs measured: 1 of 3 parts within 5 % of their measured time (76.3 % of the measured "
                  "time); with the gaps before their launches (no kernel running), 2 of 3 (77.1 %); measured minus "
                  "kernels, per launch: median 5.0 us\n"))
      << t;
  // Results without the gaps (older files) give no second count rather than counting them as none.
  std::vector<KernelProfileOwner> owners = s.owners.value();
  owners[0].gap_ms_per_step = NumberFigure();
  s.owners = owners;
  EXPECT_TRUE(has(report::kernel_profile_tables(s), "(76.3 % of the measured time); measured minus kernels")) << t;
  s.owners = std::vector<KernelProfileOwner>{part("update", 0.1, {}, 1, 0.0)};
  EXPECT_FALSE(has(report::kernel_profile_tables(s), "kernels vs measured"));
}

// An owner's heading: its gaps in microseconds per step (conv1's 2.5 us here, beside 1 ms measured).
TEST(KernelProfileTables, AnOwnersHeadingGivesItsGapsInMicroseconds) {
  KernelProfileSummary s = testing::recorded_summary();
  std::vector<KernelProfileOwner> owners = s.owners.value();
  for (KernelProfileOwner& o : owners)
    if (o.owner == std::string("conv1 forward")) {
      o.measured_ms_per_step = 1.0;
      o.kernel_ms_per_step = 0.9;
      o.kernel_vs_measured = 0.9;
      o.gap_ms_per_step = 0.0025;
      o.kernel_and_gap_vs_measured = 0.9025;
    }
  s.owners = owners;
  EXPECT_TRUE(has(report::kernel_profile_tables(s),
                  "measured 1.0000 ms (kernels/measured 0.90; gaps before its launches 2.5 us, kernels+gaps/measured "
                  "0.90)"));
}

TEST(KernelProfileTables, EachOwnerListsItsKernelsWithLaunchAndOccupancy) {
  const std::string t = report::kernel_profile_tables(testing::recorded_summary());
  const std::vector<std::string> conv1 = block(t, "conv1 forward [layer type Convolution]");
  ASSERT_EQ(conv1.size(), 4u) << t;  // heading, column heads, two kernels
  EXPECT_TRUE(has(conv1[0],
                  "0.0004 ms/step of kernels, 28.6% of the step; measured 0.0005 ms (kernels/measured 0.80; gaps "
                  "before its launches 0.0 us, kernels+gaps/measured 0.82)"))
      << conv1[0];
  EXPECT_TRUE(has(conv1[1], "launches") && has(conv1[1], "ms/step") && has(conv1[1], "regs") &&
              has(conv1[1], "occupancy (limited by)"));
  // The longest first: the GEMM, 75 % of the owner, registers-limited to 25 %.
  EXPECT_TRUE(has(conv1[2], "cudnn::cnn::implicit_convolve_sgemm"));
  EXPECT_TRUE(has(conv1[2], "75.0%") && has(conv1[2], "256x2x1") && has(conv1[2], "256x1x1") && has(conv1[2], "128") &&
              has(conv1[2], "49.0 KiB") && has(conv1[2], "25.0% (registers)"))
      << conv1[2];
  EXPECT_TRUE(has(conv1[3], "bn_fold") && has(conv1[3], "25.0%")) << conv1[3];
  EXPECT_FALSE(has(t, "kernel_conv_params"));  // argument lists stay in the files
  // The step's parts are their own group: no layer type to name.
  const std::vector<std::string> update = block(t, "update");
  ASSERT_FALSE(update.empty()) << t;
  EXPECT_EQ(update.front(), "update: 0.0001 ms/step of kernels, 7.1% of the step");
}

TEST(KernelProfileTables, TopKernelsAndTableTwo) {
  const std::string t = report::kernel_profile_tables(testing::recorded_summary(), {.top = 3});
  const std::vector<std::string> top = block(t, "## top 3 kernels of the step");
  ASSERT_EQ(top.size(), 5u) << t;
  EXPECT_TRUE(has(top[2], "conv2 forward") && has(top[2], "42.9%")) << top[2];  // 600 of 1400 ns
  EXPECT_TRUE(has(top[3], "conv1 forward") && has(top[3], "21.4%")) << top[3];
  EXPECT_TRUE(has(top[4], "bn_fwd")) << top[4];
  const std::vector<std::string> table2 = block(t, "## registers and shared memory of each layer type's 3 longest");
  ASSERT_GE(table2.size(), 4u) << t;
  EXPECT_TRUE(has(table2[1], "threads") && has(table2[1], "static smem") && has(table2[1], "dynamic smem"));
  // Convolution's longest kernel: the GEMM both layers run (300 + 600 of the group's 1000 ns), one row.
  EXPECT_TRUE(has(table2[2], "Convolution, forward") && has(table2[2], "90.0%") && has(table2[2], "1.0 KiB") &&
              has(table2[2], "48.0 KiB"))
      << table2[2];
  EXPECT_TRUE(has(table2[3], "Convolution, forward") && has(table2[3], "bn_fold") && has(table2[3], "10.0%"))
      << table2[3];
}

TEST(KernelProfileTables, MetricsShowTheShareTheyCover) {
  const std::string t = report::kernel_profile_tables(testing::recorded_summary());
  const std::vector<std::string> groups = block(t, "## hardware metrics per layer type and pass");
  ASSERT_GE(groups.size(), 3u) << t;
  EXPECT_TRUE(has(groups[1], "occ %") && has(groups[1], "IPC") && has(groups[1], "DRAM %"));
  EXPECT_FALSE(has(groups[1], "L2 %"));  // not measured: no column
  // Convolution: occupancy 22.0 over 90 % of its time, DRAM 30.0 over 30 %.
  EXPECT_TRUE(has(groups[2], "Convolution, forward") && has(groups[2], "22.0 [90%]") && has(groups[2], "30.0 [30%]"))
      << groups[2];
  // The top kernels' own values, each row named by its owner (two layers run the same GEMM).
  const std::vector<std::string> kernels = block(t, "## hardware metrics of the top");
  ASSERT_GE(kernels.size(), 4u) << t;
  EXPECT_TRUE(has(kernels[2], "conv2 forward") && has(kernels[2], "23.0") && has(kernels[2], "2.50")) << kernels[2];
  EXPECT_TRUE(has(kernels[3], "conv1 forward") && has(kernels[3], "30.0")) << kernels[3];
  // BatchNorm's one kernel covers it whole: no bracket.
  bool bn_row = false;
  for (const std::string& line : groups)
    if (has(line, "BatchNorm, forward")) {
      bn_row = true;
      EXPECT_TRUE(has(line, "80.0") && !has(line, "[")) << line;
    }
  EXPECT_TRUE(bn_row);
  // Without metrics, no metric table.
  EXPECT_FALSE(has(report::kernel_profile_tables(testing::recorded_summary(false)), "hardware metrics"));
}

}  // namespace
}  // namespace cnnscale
