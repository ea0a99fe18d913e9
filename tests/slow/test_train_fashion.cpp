// End to end: LeNet must learn Fashion-MNIST on the CPU: one epoch at batch 64 with the default
// solver (SGD lr 0.01, momentum 0.9, weight decay 5e-4) reaches test top-1 >= 0.85 on all 10,000
// test images. Runs the real executable with --json, as a user would.
// ctest runs it with one BLAS thread (tests/CMakeLists.txt says why): the same epoch of the same
// network and data, held to the same bar, in less CPU time beside the other tests.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cpu/cli_runner.hpp"

namespace cnnscale {
namespace {

TEST(TrainFashion, LeNetOneEpochReaches85Percent) {
  auto r = testing::run_cnnscale({"train", "--net", "lenet", "--data", "fashion-mnist", "--epochs", "1", "--batch",
                                  "64", "--device", "cpu", "--seed", "1", "--display", "100", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::printf("LeNet Fashion-MNIST 1 epoch: %s\n", r.out.c_str());
  EXPECT_EQ(j["iterations"], 937);  // 60000 / 64, the partial last batch dropped
  EXPECT_EQ(j["test_samples"], 10000);
  EXPECT_GE(j["test_top1"].get<double>(), 0.85);
  EXPECT_GE(j["test_top5"].get<double>(), j["test_top1"].get<double>());
  EXPECT_LE(j["test_top5"].get<double>(), 1.0);
  EXPECT_LT(j["final_loss"].get<double>(), 1.0);
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
}

}  // namespace
}  // namespace cnnscale
