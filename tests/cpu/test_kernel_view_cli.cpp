// The kernel view's command line (`time --kernels/--metrics`, `bench conv --kernels/--metrics`):
// what is wrong with the options is refused with one line and exit 2 before any work: before the
// device is opened, and before a benchmark prints its table or a profile runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/devices.hpp"
#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::expect_usage_error;
using testing::TempDir;

// bench conv on LeNet's convolutions, as small and short as the command allows.
std::vector<std::string> bench_conv(std::vector<std::string> extra) {
  std::vector<std::string> args{"bench", "conv",     "--net", "lenet",         "--batch", "2",         "--repeats",
                                "1",     "--warmup", "0",     "--max-seconds", "0.1",     "--no-peak", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(KernelViewCli, AnEmptyMetricListIsRefusedNotIgnored) {
  expect_usage_error({"time", "lenet", "--metrics", ""}, {"--metrics", "empty metric name"});
  expect_usage_error(bench_conv({"--metrics", ""}), {"--metrics", "empty metric name"});
}

TEST(KernelViewCli, ProfileOptionsWithoutTheProfileAreRefused) {
  expect_usage_error({"time", "lenet", "--kernel-steps", "2"}, {"--kernel-steps", "--kernels"});
  expect_usage_error({"time", "lenet", "--top", "3"}, {"--top", "--kernels"});
  expect_usage_error({"time", "lenet", "--experiment", "study"}, {"--experiment", "--results"});
  expect_usage_error({"time", "lenet", "--kernels", "--experiment", "study", "--no-results"},
                     {"--experiment", "--results"});
  expect_usage_error({"time", "lenet", "--metrics", "default,ipc"}, {"'default'", "alone"});
  // How the passes are had means nothing without metrics, --kernels alone included.
  expect_usage_error({"time", "lenet", "--kernels", "--metric-replay", "work"}, {"--metric-replay", "--metrics"});
  expect_usage_error(bench_conv({"--kernels", "--metric-replay", "work"}), {"--metric-replay", "--metrics"});
  expect_usage_error({"time", "lenet", "--metrics", "ipc", "--metric-replay", "pass"}, {"--metric-replay"});
}

// A results folder that cannot be made is found before the work, not after it: the benchmark would
// otherwise run and print its table, then fail to save.
TEST(KernelViewCli, AResultsFolderThatCannotBeWrittenIsRefusedFirst) {
  TempDir dir;
  const std::string file = (fs::path(dir.str()) / "a-file").string();
  std::ofstream(file) << "not a folder\n";
  expect_usage_error(bench_conv({"--results", file}), {"--results", file, "not a directory"});
  expect_usage_error({"time", "lenet", "--kernels", "--results", file}, {"--results", file, "not a directory"});
}

TEST(KernelViewCli, AGpuDeviceInABuildWithoutCudaIsAConfigurationError) {
  if (cuda_backend_built()) GTEST_SKIP() << "this build has the CUDA backend";
  expect_usage_error({"time", "lenet", "--kernels", "--device", "gpu"}, {"--device gpu", "no CUDA backend"});
  expect_usage_error(bench_conv({"--device", "gpu:0"}), {"--device gpu:0", "no CUDA backend"});
}

}  // namespace
}  // namespace cnnscale
