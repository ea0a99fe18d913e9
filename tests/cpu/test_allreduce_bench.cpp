// The allreduce benchmark's pieces without MPI: byte sizes with suffixes, the -b/-e/-f sweep,
// nccl-tests' busbw, the --check pattern, option errors, and a one-process run of the command.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cpu/cli_runner.hpp"
#include "parallel/allreduce_bench.hpp"

namespace cnnscale::testing {
namespace {

TEST(AllreduceBench, ParsesByteSizesAsPowersOf1024) {
  EXPECT_EQ(parse_byte_size("8", "-b"), 8);
  EXPECT_EQ(parse_byte_size("1K", "-b"), 1024);
  EXPECT_EQ(parse_byte_size("64m", "-b"), int64_t{64} << 20);
  EXPECT_EQ(parse_byte_size("1G", "-e"), int64_t{1} << 30);
  EXPECT_EQ(parse_byte_size("2GiB", "-e"), int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("512B", "-e"), 512);
  for (const char* bad : {"", "K", "1X", "-8", "1.5M", "1 K"}) {
    try {
      parse_byte_size(bad, "-b");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("-b"), std::string::npos) << e.what();
    }
  }
}

TEST(AllreduceBench, SizesFollowNcclTestsSweep) {
  EXPECT_EQ(allreduce_bench_sizes(8, 64, 2), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(allreduce_bench_sizes(1024, 1 << 20, 4), (std::vector<int64_t>{1024, 4096, 16384, 65536, 262144, 1048576}));
  EXPECT_EQ(allreduce_bench_sizes(8, 100, 4), (std::vector<int64_t>{8, 32}));  // stops before passing -e
  // 16-bit elements: whole elements of 2 bytes.
  EXPECT_EQ(allreduce_bench_sizes(3, 12, 2, 2), (std::vector<int64_t>{2, 6, 12}));
  EXPECT_EQ(allreduce_bench_sizes(10, 10, 2), (std::vector<int64_t>{8}));      // whole floats
  const auto big = allreduce_bench_sizes(8, int64_t{1} << 30, 2);
  EXPECT_EQ(big.size(), 28u);
  EXPECT_EQ(big.back(), int64_t{1} << 30);
}

TEST(AllreduceBench, BusBandwidthIsNcclTestsDefinition) {
  EXPECT_DOUBLE_EQ(allreduce_busbw(100.0, 1), 0.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw(100.0, 2), 100.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw(100.0, 4), 150.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw(90.0, 3), 120.0);
}

// The check is only as good as its pattern: non-zero, rank-dependent, exact when summed.
TEST(AllreduceBench, CheckPatternIsNonZeroRankDependentAndExact) {
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_GE(allreduce_check_value(0, i), 1.0f);
    EXPECT_LE(allreduce_check_value(0, i), 31.0f);
    EXPECT_NE(allreduce_check_value(0, i), allreduce_check_value(1, i)) << i;
    EXPECT_EQ(allreduce_check_value(5, i), allreduce_check_value(5, i + 31)) << "period 31";
  }
  float sum = 0;  // 1024 ranks * at most 31 stays far below 2^24: float sums are exact
  for (int r = 0; r < 1024; ++r) sum += allreduce_check_value(r, 12345);
  double exact = 0;
  for (int r = 0; r < 1024; ++r) exact += allreduce_check_value(r, 12345);
  EXPECT_EQ(static_cast<double>(sum), exact);
}

TEST(AllreduceBenchCli, OneProcessCpuRunChecksAndPrintsJson) {
  CliResult r = run_cnnscale(
      {"bench", "allreduce", "--device", "cpu", "-b", "4", "-e", "4K", "-f", "32", "-n", "3", "--check", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"], 1);
  // NCCL's tunables do not apply to MPI: null, as for NCCL's own choices.
  EXPECT_TRUE(j.at("max_ctas").is_null());
  EXPECT_TRUE(j.at("cta_policy").is_null());
  EXPECT_TRUE(j.at("priority").is_null());
  ASSERT_EQ(j["rows"].size(), 3u);  // 4 128 4096
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_EQ(row["busbw_gbs"], 0.0);  // one rank moves nothing over a bus
  }
}

TEST(AllreduceBenchCli, BadOptionsAreUsageErrors) {
  auto expect_usage = [](const std::vector<std::string>& args, const std::string& what) {
    CliResult r = run_cnnscale(args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    EXPECT_EQ(r.err_lines().size(), 1u) << r.err;
  };
  expect_usage({"bench", "allreduce", "--device", "cpu", "-b", "1X"}, "-b '1X'");
  expect_usage({"bench", "allreduce", "--device", "cpu", "-b", "1M", "-e", "1K"}, "smaller than -b");
  expect_usage({"bench", "allreduce", "--device", "cpu", "-f", "1"}, "-f 1");
  expect_usage({"bench", "allreduce", "--device", "cpu", "-n", "0"}, "-n 0");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--algo", "tree"}, "--algo");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--max-ctas", "4"}, "--max-ctas limits NCCL's CTAs");
  expect_usage({"bench", "allreduce", "--max-ctas", "65"}, "--max-ctas");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--cta-policy", "efficiency"},
               "bench allreduce: --cta-policy sets NCCL's CTA policy and needs --device gpu");
  expect_usage({"bench", "allreduce", "--cta-policy", "fewest"}, "--cta-policy");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--priority", "low"},
               "bench allreduce: --priority sets the priority of NCCL's stream and needs --device gpu");
  expect_usage({"bench", "allreduce", "--priority", "medium"}, "--priority");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--issue", "graph"}, "--issue graph replays NCCL allreduces");
  expect_usage({"bench", "allreduce", "--issue", "stream"}, "--issue");
  expect_usage({"bench", "allreduce", "--device", "tpu"}, "--device");
  expect_usage({"bench", "allreduce", "--device", "cpu", "-b", "2"}, "smaller than one fp32 element (4 bytes)");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--dtype", "bf16", "-b", "1"},
               "smaller than one bf16 element (2 bytes)");
  expect_usage({"bench", "allreduce", "--device", "cpu", "--dtype", "int8"}, "--dtype");
}

}  // namespace
}  // namespace cnnscale::testing
