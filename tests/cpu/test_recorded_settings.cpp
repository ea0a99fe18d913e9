// Every product's result records every setting of its command's table (experiment/
// command_settings.hpp) as a typed value, and where it came from: infer (its file and --json), bench
// allreduce, the kernel benches (their folder's summary.json and --json) and bench data and time
// (their --json). Each run gives some settings values other than their defaults and finds them, and
// every other entry at its default, in the result. (calibrate's: test_calibrate_cli.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/recorded_settings_util.hpp"
#include "cpu/shards_test_util.hpp"
#include "experiment/command_settings.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The one file named `name` under `root` (a result folder's summary.json, an inference file).
json only_file(const std::string& root, const std::string& extension, const std::string& name = "") {
  std::vector<fs::path> found;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == extension && (name.empty() || e.path().filename() == name))
      found.push_back(e.path());
  EXPECT_EQ(found.size(), 1u) << root;
  if (found.size() != 1) return json();
  std::ifstream in(found[0]);
  return json::parse(in);
}

TEST(RecordedSettings, InferFileAndJsonHoldEveryEntryOfInfersTable) {
  TempDir dir;
  const std::vector<std::string> args = {"infer",      "--net",    "lenet",     "--batch", "2",       "--seconds",
                                         "0.2",        "--latency-seconds", "0.05", "--warmup", "1",  "--fill",
                                         "constant",   "--seed",   "7",         "--no-fuse", "--json", "--results",
                                         dir.str()};
  const CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json given = {{"network", "lenet"}, {"batch", {"2"}}, {"seconds", 0.2},     {"latency_seconds", 0.05},
                      {"warmup", 1},        {"fill", "constant"}, {"seed", 7},      {"fuse", false}};
  const json printed = json::parse(r.out);
  expect_settings_recorded(infer_settings(), printed.at("settings"), given);
  const json saved = only_file(dir.str(), ".json");
  expect_settings_recorded(infer_settings(), saved.at("settings"), given);
  expect_provenance_of(saved.at("provenance"), args);
}

TEST(RecordedSettings, AllreduceSummaryHoldsEveryEntryOfItsTable) {
  TempDir dir;
  const std::vector<std::string> args = {"bench", "allreduce", "--device", "cpu", "-b",      "4",      "-e", "4K",
                                         "-f",    "32",        "-n",       "3",   "--repeats", "2", "--check",
                                         "--json", "--results", dir.str()};
  const CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json given = {{"device", "cpu"}, {"min_bytes", "4"}, {"max_bytes", "4K"}, {"step_factor", 32},
                      {"iters", 3},      {"repeats", 2},     {"check", true}};
  expect_settings_recorded(allreduce_bench_settings(), json::parse(r.out).at("settings"), given);
  const json saved = only_file(dir.str(), ".json", "summary.json");
  expect_settings_recorded(allreduce_bench_settings(), saved.at("settings"), given);
  expect_provenance_of(saved.at("provenance"), args);
}

// gemm and conv: the kinds a CPU runs (spmm and rnn take the same path with their own tables).
TEST(RecordedSettings, KernelBenchSummaryHoldsEveryEntryOfItsKindsTableAndItsProvenance) {
  struct Case {
    std::string kind;
    std::vector<std::string> args;
    json given;
  };
  const std::vector<Case> cases = {
      {"gemm",
       {"--shape", "8,8,8", "--warmup", "1", "--repeats", "3", "--min-repeat-ms", "0.1", "--no-peak", "--seed", "5"},
       {{"shape", {"8,8,8"}}, {"warmup", 1}, {"repeats", 3}, {"min_repeat_ms", 0.1}, {"peak", false}, {"seed", 5}}},
      {"conv",
       {"--shape", "9,8,3,2,4,3,2,1,0,1,2", "--pass", "fwd", "--warmup", "0", "--repeats", "2", "--no-peak",
        "--check"},
       {{"shape", {"9,8,3,2,4,3,2,1,0,1,2"}}, {"pass", {"fwd"}}, {"warmup", 0}, {"repeats", 2}, {"peak", false},
        {"check", true}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind);
    TempDir dir;
    std::vector<std::string> args = {"bench", c.kind, "--device", "cpu", "--quiet", "--json", "--results", dir.str()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_cnnscale(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json printed = json::parse(r.out);
    expect_settings_recorded(kernel_bench_settings(c.kind), printed.at("settings"), c.given);
    expect_provenance_of(printed.at("provenance"), args);
    const json saved = only_file(dir.str(), ".json", "summary.json");
    expect_settings_recorded(kernel_bench_settings(c.kind), saved.at("settings"), c.given);
    EXPECT_EQ(saved.at("provenance"), printed.at("provenance"));
  }
}

TEST(RecordedSettings, DataBenchJsonHoldsEveryEntryOfItsTable) {
  TempDir t;
  const std::string set = shards_test::write_set(t.str(), 23);
  const std::vector<std::string> args = {"bench",     "data", "--data",    "hdf5:" + set, "--batch", "5",
                                         "--batches", "3",    "--threads", "1",           "--mirror", "--json"};
  const CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  expect_settings_recorded(data_bench_settings(), j.at("settings"),
                           {{"data", "hdf5:" + set}, {"batch", 5}, {"batches", 3}, {"threads", {1}}, {"mirror", true}});
  expect_provenance_of(j.at("provenance"), args);
}

TEST(RecordedSettings, TimeJsonHoldsEveryEntryOfItsTableAndItsProvenance) {
  const std::vector<std::string> args = {"time",      "lenet", "--batch", "4",      "--iterations",
                                         "2",         "--warmup", "0",    "--seed", "3",
                                         "--json"};
  const CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  expect_settings_recorded(time_settings(), j.at("settings"),
                           {{"net", "lenet"}, {"batch", 4}, {"iterations", 2}, {"warmup", 0}, {"seed", 3}});
  expect_provenance_of(j.at("provenance"), args);
}

}  // namespace
}  // namespace cnnscale::testing
