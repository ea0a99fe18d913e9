// SM partitions (--sm-counts, --sm-count) where no GPU is needed: the CPU backend refuses a count,
// and the train and time commands reject counts on CPU ranks, of the wrong length or below one
// SM with exit 2 and one line, before any device is opened.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "cpu/cli_runner.hpp"

namespace cnnscale {
namespace {


TEST(SmCounts, CpuBackendRefusesAnSmCount) {
  try {
    make_backend("cpu", 66);
    FAIL() << "make_backend(\"cpu\", 66) returned a backend";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--sm-counts applies to GPU ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_backend("cpu", -1), ConfigError);
  auto cpu = make_backend("cpu", 0);  // 0: no partition, as every existing caller means it
  EXPECT_EQ(cpu->granted_sms(), 0);
}

using testing::expect_usage_error;

std::vector<std::string> train_with(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"train",        "--net", "lenet",   "--data", "synthetic",
                                   "--iterations", "1",     "--batch", "2",      "--no-results"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(SmCounts, TrainRejectsCountsOnCpuRanks) {
  expect_usage_error(train_with({"--device", "cpu", "--sm-counts", "66"}), {"--sm-counts applies to GPU ranks"});
  expect_usage_error(train_with({"--sm-counts", "66"}), {"--sm-counts applies to GPU ranks"});  // cpu by default
}

// With --gpus the devices are named but none is opened before these checks, so they run anywhere.
TEST(SmCounts, TrainChecksLengthAndValuesAgainstGpus) {
  expect_usage_error(train_with({"--gpus", "0,1", "--sm-counts", "66"}), {"--sm-counts", "1 count", "2", "--gpus"});
  expect_usage_error(train_with({"--gpus", "0", "--sm-counts", "0"}), {"--sm-counts", ">= 1"});
  expect_usage_error(train_with({"--gpus", "0", "--sm-counts=-8"}), {"--sm-counts", ">= 1"});
}

TEST(SmCounts, TimeRejectsAnSmCountOnTheCpu) {
  expect_usage_error({"time", "lenet", "--batch", "2", "--iterations", "1", "--warmup", "0", "--sm-count", "16"},
                  {"--sm-count", "GPU"});
}

}  // namespace
}  // namespace cnnscale
