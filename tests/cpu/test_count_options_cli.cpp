// Counts that are nonsense at 0 or below are refused as the command line is parsed, naming the
// flag (exit 2, one line, nothing written); and a network whose input shape is not a real dataset's
// sample shape is an error naming the network file and both shapes, where the dataset's shape used
// to replace the network's silently. Synthetic data still takes the network's shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::expect_usage_error;

std::vector<std::string> lenet_train(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train", "--net", "lenet", "--data", "synthetic", "--iterations", "1", "--no-results"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CountOptions, TrainRefusesNonsenseCountsNamingTheFlag) {
  expect_usage_error(lenet_train({"--classes", "0"}), {"--classes"});
  expect_usage_error(lenet_train({"--classes", "-3"}), {"--classes"});
  expect_usage_error(lenet_train({"--train-samples", "0"}), {"--train-samples"});
  expect_usage_error(lenet_train({"--train-samples", "-5"}), {"--train-samples"});
  expect_usage_error(lenet_train({"--test-samples", "-1"}), {"--test-samples"});
  expect_usage_error(lenet_train({"--test-batch", "0"}), {"--test-batch"});
  expect_usage_error(lenet_train({"--pool-batches", "0"}), {"--pool-batches"});
  expect_usage_error(lenet_train({"--display", "0"}), {"--display"});
  expect_usage_error(lenet_train({"--checkpoint-every", "-1"}), {"--checkpoint-every"});
  expect_usage_error(lenet_train({"--timing-warmup", "-1"}), {"--timing-warmup"});
}

TEST(CountOptions, TimeRefusesNonsenseCountsNamingTheFlag) {
  expect_usage_error({"time", "lenet", "--classes", "0"}, {"--classes"});
  expect_usage_error({"time", "lenet", "--sm-count", "0"}, {"--sm-count"});
}

// 0 test samples still means "no test" (a count, not a nonsense value).
TEST(CountOptions, ZeroTestSamplesStillMeansNoTest) {
  const testing::CliResult r = testing::run_cnnscale({"train", "--net", "lenet", "--data", "fashion-mnist",
                                                      "--train-samples", "16", "--test-samples", "0", "--batch", "8",
                                                      "--iterations", "1", "--no-results", "--min-window", "0"});
  if (r.exit_code != 0 && r.err.find("fashion-mnist") != std::string::npos &&
      r.err.find("No such file") != std::string::npos)
    GTEST_SKIP() << "Fashion-MNIST is not installed here: " << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// AlexNet is written for 3x227x227 samples; Fashion-MNIST's are 1x28x28. The dataset's files are
// never opened: the check needs only the network and the dataset's table entry.
TEST(CountOptions, NetworkShapeNotTheDatasetsIsAnError) {
  testing::TempDir dir;
  const std::string results = dir.file("results");
  const testing::CliResult r = testing::run_cnnscale({"train", "--net", "alexnet", "--data", "fashion-mnist",
                                                      "--iterations", "1", "--results", results, "--experiment", "e"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("networks/alexnet.yaml: the network's input shape is 3x227x227 (input.shape), but "
                          "fashion-mnist samples are 1x28x28"),
            std::string::npos)
      << lines[0];
  // No run folder was left behind.
  const fs::path exp = fs::path(results) / "e";
  EXPECT_TRUE(!fs::exists(exp) || fs::is_empty(exp)) << "a run folder was left in " << exp;
}

// An experiment pairing such a network with such data is refused when it is read, at the network's
// entry, rather than by every run of the sweep in turn; a network that fits parses.
TEST(CountOptions, ExperimentRefusesANetworkThatDoesNotFitItsData) {
  const std::string head =
      "name: t\n"                                                                      // 1
      "dataset: {name: fashion-mnist, data_dir: /usr/share/datasets/fashion-mnist}\n"  // 2
      "iterations: 4\n"                                                                // 3
      "matrix:\n"                                                                      // 4
      "  batch: [8]\n";                                                                // 5
  testing::expect_error(head + "  network: [lenet, alexnet]\n",                        // line 6
                        {"t.yaml:6:20: matrix.network[1]: ",
                         "networks/alexnet.yaml: the network's input shape is "
                         "3x227x227 (input.shape), but fashion-mnist samples are 1x28x28"});
  EXPECT_EQ(testing::parse(head + "  network: [lenet]\n").networks, std::vector<std::string>{"lenet"});
  // Synthetic data takes the network's shape: no such check.
  EXPECT_NO_THROW(
      testing::parse("name: t\ndataset: synthetic\niterations: 4\nmatrix:\n  batch: [8]\n"
                     "  network: [alexnet]\n"));
}

// Synthetic data has no shape of its own: the network's (or --input-shape) is used, as before.
TEST(CountOptions, SyntheticDataTakesTheNetworksShape) {
  const testing::CliResult r =
      testing::run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--input-shape", "3,32,32", "--classes",
                             "7", "--batch", "2", "--iterations", "1", "--no-results", "--min-window", "0", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"net\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cnnscale
