// The cnnscale executable's contract for bad input: exit 2 and exactly one stderr line that says
// what is wrong and where (file:line:col for network files); a GPU request without a GPU fails
// clearly; --help and --version work; a short synthetic run prints one JSON line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "backend/backend.hpp"
#include "cpu/cli_runner.hpp"

namespace cnnscale {
namespace {

using testing::CliResult;
using testing::run_cnnscale;

std::string fixture(const std::string& name) {
  return std::string(CNNSCALE_TEST_DATA) + "/" + name;
}

using testing::expect_usage_error;

std::vector<std::string> train_synthetic(const std::string& net) {
  return {"train", "--net", net, "--data", "synthetic", "--iterations", "2", "--batch", "2"};
}

// "<file>:<line>:<col>:" somewhere in the line.
void expect_location(const std::vector<std::string>& args, const std::string& file, const std::string& what) {
  CliResult r = run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  std::regex located(std::regex_replace(file, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + R"(:\d+:\d+:)");
  EXPECT_TRUE(std::regex_search(lines[0], located)) << lines[0];
  EXPECT_NE(lines[0].find(what), std::string::npos) << lines[0] << "\nlacks: " << what;
}

TEST(Cli, BadNetworkFileNamesFileLineAndColumn) {
  const std::string f = fixture("cli_bad_syntax.yaml");
  expect_location(train_synthetic(f), f, "YAML");
  expect_location({"netinfo", f}, f, "YAML");
}

TEST(Cli, UnknownLayerType) {
  const std::string f = fixture("cli_unknown_layer.yaml");
  expect_location(train_synthetic(f), f, "Convolutoin");
}

TEST(Cli, UnknownKey) {
  const std::string f = fixture("cli_unknown_key.yaml");
  expect_location(train_synthetic(f), f, "num_outputs");
}

TEST(Cli, NonexistentBlob) {
  const std::string f = fixture("cli_missing_blob.yaml");
  expect_location(train_synthetic(f), f, "fc2");
}

TEST(Cli, MismatchedShapes) {
  const std::string f = fixture("cli_shape_mismatch.yaml");
  expect_location(train_synthetic(f), f, "sum");
}

TEST(Cli, MissingNetworkAndDataset) {
  expect_usage_error({"train", "--net", "no_such_net", "--data", "synthetic"}, {"no_such_net", "not found"});
  expect_usage_error({"train", "--net", "lenet", "--data", "fashion-mnist", "--data-dir", "/nonexistent"},
                     {"/nonexistent", "does not exist"});
}

TEST(Cli, BadOptionValues) {
  expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--lr", "-0.1"}, {"--lr: must be in (0, "});
  expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--lr-policy", "multistep"}, {"--milestones"});
  expect_usage_error({"train", "--net", "lenet", "--data", "imagenet"}, {"--data"});
  expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--epochs", "1", "--iterations", "3"},
                     {"--epochs", "--iterations"});
  expect_usage_error({"train", "--data", "synthetic"}, {"--net"});
  expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--bogus"}, {"--bogus"});
  expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--device", "tpu"}, {"tpu"});
  expect_usage_error({"train", "--net", "lenet", "--data", "synthetic", "--resume", "/nonexistent/ckpt.h5"},
                     {"/nonexistent/ckpt.h5"});
  expect_usage_error({"train", "--net", "lenet", "--data", "fashion-mnist", "--input-shape", "3,32,32"},
                     {"--input-shape"});
}

TEST(Cli, GpuRequestWithoutGpuFailsClearly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is usable here";
  CliResult r =
      run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "1", "--device", "gpu:0"});
  EXPECT_NE(r.exit_code, 0);
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("gpu:0"), std::string::npos) << lines[0];
}

TEST(Cli, HelpAndVersion) {
  for (const char* sub : {"train", "netinfo"}) {
    CliResult r = run_cnnscale({sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("--help"), std::string::npos) << r.out;
  }
  CliResult train = run_cnnscale({"train", "--help"});
  for (const char* flag :
       {"--net",         "--data",       "--epochs",         "--iterations",       "--batch",     "--device",
        "--seed",        "--lr",         "--momentum",       "--weight-decay",     "--lr-policy", "--warmup",
        "--input-shape", "--classes",    "--checkpoint-dir", "--checkpoint-every", "--resume",    "--json",
        "--display",     "--test-batch", "--synthetic-fill", "--data-dir"})
    EXPECT_NE(train.out.find(flag), std::string::npos) << flag;
  CliResult v = run_cnnscale({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("cnnscale"), std::string::npos);
  CliResult none = run_cnnscale({});
  EXPECT_EQ(none.exit_code, 2);
}

// train and infer run in one process or on every rank of an mpirun/srun job: their one-line
// descriptions (in `cnnscale --help`'s list and their own --help) say so, not "on one device".
TEST(Cli, OneLineDescriptionsSayRanksWhereCommandsRunOnThem) {
  CliResult top = run_cnnscale({"--help"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_EQ(top.out.find("on one device"), std::string::npos) << top.out;
  for (const char* sub : {"train", "infer"}) {
    CliResult r = run_cnnscale({sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("mpirun/srun"), std::string::npos) << sub << ": " << r.out;
  }
  EXPECT_NE(run_cnnscale({"train", "--help"}).out.find("data-parallel"), std::string::npos);
}

TEST(Cli, SyntheticRunPrintsOneJsonLine) {
  CliResult r =
      run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--synthetic-fill", "constant", "--iterations",
                    "12", "--batch", "8", "--display", "4", "--timing-warmup", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["iterations"], 12);
  EXPECT_EQ(j["batch"], 8);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["net"], "lenet");
  EXPECT_TRUE(j["test_top1"].is_null());
  EXPECT_TRUE(j["test_top5"].is_null());
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
  EXPECT_TRUE(std::isfinite(j["final_loss"].get<double>()));
  EXPECT_GT(j["seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["timed_iterations"], 10);
}

// --lr-scaling linear reaches the trainer: a fixed policy ends at lr x 24 / 8.
TEST(Cli, LinearScalingRuleScalesTheTrainersRate) {
  CliResult r =
      run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "2", "--batch", "24", "--lr",
                    "0.01", "--lr-scaling", "linear", "--lr-base-batch", "8", "--no-results", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.out)["final_lr"].get<double>(), 0.01 * 24 / 8);
}

}  // namespace
}  // namespace cnnscale
