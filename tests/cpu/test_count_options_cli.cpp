// Counts that are nonsense at 0 or below are refused as the command line is parsed, naming the
// flag (exit 2, one line, nothing written); and a network whose input shape is not a real dataset's
// sample shape is an error naming the network file and both shapes, where the dataset's shape used
// to replace the network's silently. Synthetic data still takes the network's shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

// The refusal reads as a sentence: the bound and the value given, not CLI11's range of doubles with
// DBL_MAX written out in 309 digits; a value that is no number is quoted, control characters shown.
TEST(CountOptions, RefusalsAreReadable) {
  expect_usage_error(lenet_train({"--classes", "0"}), {"--classes: must be at least 1, got 0"});
  expect_usage_error(lenet_train({"--test-samples", "-1"}), {"--test-samples: must be at least 0, got -1"});
  expect_usage_error(lenet_train({"--display", "x\nz"}), {"--display: must be a whole number of at least 1, got 'x"});
  expect_usage_error(lenet_train({"--display", "1\n2"}), {"got '1?2'"});
  expect_usage_error(lenet_train({"--train-samples", "99999999999999999999"}),
                     {"--train-samples: 99999999999999999999 is out of range"});
  expect_usage_error({"time", "lenet", "--sm-count", "0"}, {"--sm-count: must be at least 1, got 0"});
  for (const char* flag : {"--classes", "--train-samples", "--test-batch", "--pool-batches", "--display",
                           "--data-threads", "--lr-base-batch"}) {
    const testing::CliResult r = testing::run_cnnscale(lenet_train({flag, "-2"}));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(std::string(flag) + ": must be at least 1, got -2"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("not in range"), std::string::npos) << r.err;
    EXPECT_LT(r.err.size(), 200u) << r.err;
  }
}

// A real dataset's labels must be the network's classes: a LeNet of 7 classes on Fashion-MNIST's 10
// was rebuilt with 10 (exit 0), and with an explicit num_output: 7 it failed at the first label 7 or
// more, after the set-up. Refused before any work, naming the file and both counts; the dataset's
// files are never opened (the count is the dataset's table entry).
TEST(CountOptions, NetworkClassesNotTheDatasetsIsAnError) {
  testing::TempDir dir;
  std::ifstream lenet(std::string(CNNSCALE_SOURCE_DIR) + "/networks/lenet.yaml");
  std::string text((std::istreambuf_iterator<char>(lenet)), std::istreambuf_iterator<char>());
  const std::string from = "classes: 10}";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "classes: 7}");
  std::ofstream(dir.file("lenet7.yaml")) << text;
  const std::string results = dir.file("results");
  testing::expect_usage_error({"train", "--net", dir.file("lenet7.yaml"), "--data", "fashion-mnist", "--data-dir",
                               dir.file("none"), "--iterations", "1", "--results", results, "--experiment", "e"},
                              {dir.file("lenet7.yaml") + ": the network has 7 classes (input.classes), but "
                                                         "fashion-mnist has 10"});
  const fs::path exp = fs::path(results) / "e";
  EXPECT_TRUE(!fs::exists(exp) || fs::is_empty(exp)) << "a run folder was left in " << exp;
  // Synthetic data takes the network's classes.
  const testing::CliResult r =
      testing::run_cnnscale({"train", "--net", dir.file("lenet7.yaml"), "--data", "synthetic", "--batch", "2",
                             "--iterations", "1", "--no-results", "--min-window", "0", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // An experiment pairing it with the dataset is refused when read, at its matrix.network entry.
  testing::expect_error(
      "name: t\ndataset: {name: fashion-mnist}\niterations: 4\nmatrix:\n  batch: [8]\n"
      "  network: [lenet, " +
          dir.file("lenet7.yaml") + "]\n",
      {"t.yaml:6:20: matrix.network[1]: ",
       "lenet7.yaml: the network has 7 classes (input.classes), but fashion-mnist has 10"});
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
