// Hardware metrics from CUPTI's range profiler: every CUPTI name of the metric catalogue exists for
// GH100 (the profiler host needs no GPU), and on a GPU two element-wise kernels are profiled as two
// ranges, each with values in the range its unit allows, while the work runs exactly once (kernel
// replay restores what a pass wrote), work replay runs the work once per pass, and work beyond the
// profiler's room is an error.
#include <gtest/gtest.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "backend/cuda/cupti_metrics.hpp"
#include "common/error_of.hpp"
#include "measure/kernel_metric_set.hpp"
#include "parity_util.hpp"

namespace cnnscale::testing {
namespace {

using measure::cupti_metrics_for;
using measure::kernel_metric_catalogue;
using measure::kernel_metric_values;

// x = 1 and y = 2, 256 MiB each: far beyond the 50 MiB L2, so an axpby over them streams from DRAM.
std::pair<Tensor, Tensor> streaming_pair(Backend& gpu) {
  const Shape shape{int64_t{1} << 26};
  std::pair<Tensor, Tensor> xy{gpu.alloc(shape), gpu.alloc(shape)};
  gpu.fill(xy.first, 1.0f);
  gpu.fill(xy.second, 2.0f);
  gpu.synchronize();
  return xy;
}

TEST(KernelMetricsCupti, CatalogueNamesExistForGH100) {
  if (!cuda::have_cupti_profiler()) GTEST_SKIP() << "this build has no CUPTI";
  for (const measure::KernelMetricDefinition& d : kernel_metric_catalogue())
    EXPECT_GE(cuda::cupti_metric_passes("GH100", cupti_metrics_for({d.key})), 1) << d.key;
  const int64_t passes = cuda::cupti_metric_passes("GH100", cupti_metrics_for(measure::parse_metric_keys("default")));
  EXPECT_GE(passes, 1);
  std::printf("[kernel metrics] the default set takes %lld replay passes on GH100\n", static_cast<long long>(passes));
  const std::string unknown = config_error_of([] { cuda::cupti_metric_passes("GH100", {"sm__no_such_metric.sum"}); });
  EXPECT_NE(unknown.find("sm__no_such_metric.sum"), std::string::npos) << unknown;
}

TEST(KernelMetricsCupti, EachKernelIsARangeWithPlausibleValues) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& gpu = gpu_backend();
  auto [x, y] = streaming_pair(gpu);

  const std::vector<std::string> keys{"dram_throughput", "achieved_occupancy", "global_load_sectors_per_request"};
  std::unique_ptr<KernelMetricProfiler> profiler = gpu.kernel_metric_profiler();
  const KernelMetricResult r = profiler->profile(cupti_metrics_for(keys), [&] {
    gpu.axpby(2.0f, x, 3.0f, y);  // y = 2 * 1 + 3 * 2 = 8
    gpu.fill(x, 0.5f);            // a kernel (a fill of 0 would be a memset, no kernel)
  });
  EXPECT_FALSE(r.chip.empty());
  EXPECT_GE(r.passes, 1);
  ASSERT_EQ(r.ranges.size(), 2u);
  for (const KernelMetricRange& range : r.ranges) {
    const std::map<std::string, double> v = kernel_metric_values(keys, range.values);
    // The fill (range 1) loads nothing: its sectors per load request have no value, rather than 0.
    ASSERT_EQ(v.size(), range.name == "1" ? keys.size() - 1 : keys.size()) << range.name;
    EXPECT_EQ(v.contains("global_load_sectors_per_request"), range.name != "1") << range.name;
    EXPECT_GT(v.at("dram_throughput"), 0.0) << range.name;
    EXPECT_LE(v.at("dram_throughput"), 100.0) << range.name;
    EXPECT_GT(v.at("achieved_occupancy"), 0.0) << range.name;
    EXPECT_LE(v.at("achieved_occupancy"), 100.0) << range.name;
    std::printf("[kernel metrics] range %s on %s (%lld passes): dram %.1f %%, occupancy %.1f %%\n", range.name.c_str(),
                r.chip.c_str(), static_cast<long long>(r.passes), v.at("dram_throughput"), v.at("achieved_occupancy"));
  }
  // The axpby loads: a warp's 4-byte loads cover 4 sectors a request; wider vector loads more, a
  // request never more than its 32 threads' sectors.
  const double sectors = kernel_metric_values(keys, r.ranges[0].values).at("global_load_sectors_per_request");
  EXPECT_GE(sectors, 1.0);
  EXPECT_LE(sectors, 32.0);
  // Every pass after the first ran on restored memory: the results are those of one run.
  float first_y = 0.0f, first_x = 0.0f;
  gpu.download(y.view(0, Shape{1}), &first_y);
  gpu.download(x.view(0, Shape{1}), &first_x);
  EXPECT_EQ(first_y, 8.0f);
  EXPECT_EQ(first_x, 0.5f);
}

// Work replay: the work runs once per pass, each run one pass, and each kernel is still one range
// with values in its unit's range; what the runs leave behind is that of `passes` runs.
TEST(KernelMetricsCupti, WorkReplayRunsTheWorkOncePerPass) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& gpu = gpu_backend();
  auto [x, y] = streaming_pair(gpu);
  // The default set: several passes on any GPU (9 on GH100), so one run per pass shows.
  const std::vector<std::string> keys = measure::parse_metric_keys("default");
  std::unique_ptr<KernelMetricProfiler> profiler = gpu.kernel_metric_profiler();
  int64_t runs = 0;
  const KernelMetricResult r = profiler->profile(
      cupti_metrics_for(keys),
      [&] {
        ++runs;
        gpu.axpby(2.0f, x, 3.0f, y);
        gpu.fill(x, 0.5f);
      },
      MetricReplay::Work);
  EXPECT_EQ(r.replay, MetricReplay::Work);
  ASSERT_GE(r.passes, 2);
  EXPECT_EQ(r.runs, r.passes);
  EXPECT_EQ(runs, r.passes);
  ASSERT_EQ(r.ranges.size(), 2u);
  for (const KernelMetricRange& range : r.ranges) {
    const std::map<std::string, double> v = kernel_metric_values(keys, range.values);
    EXPECT_GT(v.at("dram_throughput"), 0.0) << range.name;
    EXPECT_LE(v.at("dram_throughput"), 100.0) << range.name;
    EXPECT_GT(v.at("achieved_occupancy"), 0.0) << range.name;
    EXPECT_LE(v.at("achieved_occupancy"), 100.0) << range.name;
    std::printf("[kernel metrics] work replay, range %s (%lld passes): dram %.1f %%, occupancy %.1f %%, ipc %.2f\n",
                range.name.c_str(), static_cast<long long>(r.passes), v.at("dram_throughput"),
                v.at("achieved_occupancy"), v.at("ipc"));
  }
  // y = 2 x + 3 y with x = 1 the first time and 0.5 after: every run happened, on the run before's y
  // (8, 25, 76, ...: integers, exact in fp32 up to 14 runs).
  float expected = 2.0f;
  for (int64_t i = 0; i < runs; ++i) expected = 2.0f * (i == 0 ? 1.0f : 0.5f) + 3.0f * expected;
  float first_y = 0.0f;
  gpu.download(y.view(0, Shape{1}), &first_y);
  EXPECT_EQ(first_y, expected);
}

TEST(KernelMetricsCupti, MoreKernelsThanRoomIsAnError) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& gpu = gpu_backend();
  Tensor x = gpu.alloc(Shape{1024});
  std::unique_ptr<KernelMetricProfiler> profiler = gpu.kernel_metric_profiler();
  // A one-pass metric and a set of several passes, under either replay.
  for (const char* keys : {"achieved_occupancy", "default"})
    for (const MetricReplay replay : {MetricReplay::Kernel, MetricReplay::Work}) {
      const std::string msg = error_of([&] {
        profiler->profile(
            cupti_metrics_for(measure::parse_metric_keys(keys)),
            [&] {
              for (float v : {1.0f, 2.0f, 3.0f}) gpu.fill(x, v);
            },
            replay, 2);
      });
      EXPECT_NE(msg.find("sized for"), std::string::npos) << keys << ", " << metric_replay_name(replay) << ": " << msg;
    }
}

}  // namespace
}  // namespace cnnscale::testing
