// --precision and --allreduce-dtype on the command line: a bad value, or a 16-bit/TF32 precision on the
// CPU backend (the fp32 reference), is one line and exit 2 before any data is read; an fp32 run
// records its precision, allreduce dtype, loss-scale figures and peak memory in --json and in the
// results folder, and `cnnscale time` states its precision.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTrain = {"train", "--net", "lenet", "--data", "synthetic", "--iterations", "4",
                                         "--batch", "4"};

std::vector<std::string> train_with(std::vector<std::string> extra) {
  std::vector<std::string> args = kTrain;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(PrecisionCli, UnknownValuesAreUsageErrors) {
  expect_usage_error(train_with({"--precision", "fp64"}), {"--precision", "fp64"});
  expect_usage_error(train_with({"--precision", "BF16"}), {"--precision"});
  expect_usage_error(train_with({"--allreduce-dtype", "half"}), {"--allreduce-dtype", "half"});
  expect_usage_error(train_with({"--allreduce-max-ctas", "65"}), {"--allreduce-max-ctas", "65"});
  expect_usage_error(train_with({"--device", "cpu", "--allreduce-max-ctas", "8"}),
                     {"--allreduce-max-ctas sets NCCL's CTAs for GPU ranks; CPU ranks exchange through MPI"});
  expect_usage_error(train_with({"--allreduce-cta-policy", "fewest"}), {"--allreduce-cta-policy", "fewest"});
  expect_usage_error(train_with({"--device", "cpu", "--allreduce-cta-policy", "efficiency"}),
                     {"--allreduce-cta-policy sets NCCL's CTA policy for GPU ranks; CPU ranks exchange through MPI"});
  expect_usage_error(train_with({"--allreduce-priority", "medium"}), {"--allreduce-priority", "medium"});
  expect_usage_error(
      train_with({"--device", "cpu", "--allreduce-priority", "low"}),
      {"--allreduce-priority sets the priority of NCCL's stream on GPU ranks; CPU ranks exchange through "
       "MPI"});
  expect_usage_error({"time", "lenet", "--precision", "int8"}, {"--precision", "int8"});
}

TEST(PrecisionCli, CpuRefusesEveryPrecisionButFp32BeforeLoadingData) {
  for (const char* p : {"tf32", "bf16", "fp16"}) {
    SCOPED_TRACE(p);
    expect_usage_error(train_with({"--device", "cpu", "--precision", p}),
                       {std::string("--precision ") + p + " runs on a GPU only", "fp32 reference"});
    // The data directory does not exist: the precision is refused before the data is looked at.
    expect_usage_error({"train", "--net", "lenet", "--data", "fashion-mnist", "--data-dir", "/nonexistent",
                        "--precision", p},
                       {std::string("--precision ") + p + " runs on a GPU only"});
    expect_usage_error({"time", "lenet", "--device", "cpu", "--precision", p},
                       {std::string("--precision ") + p + " runs on a GPU only"});
  }
}

TEST(PrecisionCli, Fp32RunRecordsPrecisionAndPeakMemory) {
  TempDir dir;
  CliResult r = run_cnnscale(train_with({"--results", dir.str(), "--experiment", "p", "--run-id", "fp32",
                                         "--min-window", "0", "--timing-warmup", "1", "--allreduce-dtype", "compute",
                                         "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("precision fp32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("memory: peak"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "fp32");
  // fp32's compute dtype is fp32: "compute" exchanges fp32 too, and says so.
  EXPECT_EQ(j["allreduce_dtype"], "fp32");
  EXPECT_EQ(j["skipped_steps"], 0);
  EXPECT_EQ(j["final_grad_scale"], 1.0);
  const int64_t peak = j["peak_memory_bytes"].get<int64_t>();
  // LeNet's ~431k f32 parameters, their gradients and momentum alone are ~5 MB.
  EXPECT_GT(peak, 3 * 431000 * 4);
  const auto& s = j["summary"];
  EXPECT_EQ(s["precision"], "fp32");
  EXPECT_EQ(s["allreduce_dtype"], "fp32");
  EXPECT_EQ(s["peak_memory_bytes"], peak);
  EXPECT_EQ(s["skipped_steps"], 0);

  std::ifstream in(fs::path(dir.str()) / "p" / "fp32" / "summary.json");
  ASSERT_TRUE(in) << "no summary.json";
  const auto file = nlohmann::json::parse(in);
  EXPECT_EQ(file["summary"]["precision"], "fp32");
  EXPECT_EQ(file["summary"]["allreduce_dtype"], "fp32");
  EXPECT_EQ(file["summary"]["final_grad_scale"], 1.0);
  EXPECT_TRUE(file["summary"]["peak_memory_bytes"].is_number_integer()) << file["summary"].dump();
  EXPECT_EQ(file["summary"]["peak_memory_bytes"], peak);
  ASSERT_EQ(file["ranks"].size(), 1u);
  EXPECT_EQ(file["ranks"][0]["peak_memory_bytes"], peak) << "one rank: its peak is the job's";
  EXPECT_FALSE(file["methods"]["peak_memory_bytes"].get<std::string>().empty());
}

TEST(PrecisionCli, TimeStatesItsPrecision) {
  CliResult r = run_cnnscale({"time", "lenet", "--iterations", "1", "--warmup", "0", "--batch", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_GT(j["peak_memory_bytes"].get<int64_t>(), 431000 * 4);
  CliResult table = run_cnnscale({"time", "lenet", "--iterations", "1", "--warmup", "0", "--batch", "4",
                                  "--precision", "fp32"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("precision fp32"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("peak memory"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace cnnscale::testing
