// `bench allreduce --results`: a one-process run writes a result folder holding what --json prints,
// which the report reads back; an unwritable root or bad names fail before the benchmark runs;
// $CNNSCALE_RESULTS is the default root and --no-results writes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report_allreduce.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

// The whole path on one process: the file holds exactly the object --json prints, and reads back.
TEST(AllreduceBenchResults, OneProcessRunWritesWhatJsonPrints) {
  TempDir dir;
  testing::CliResult r =
      testing::run_cnnscale({"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "16K", "-f", "4", "-n", "3",
                             "--check", "--json", "--results", dir.str(), "--experiment", "mine"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  const std::string prefix = "results: " + report::allreduce_bench_dir(dir.str(), "mine") + "/";
  ASSERT_TRUE(r.err_lines()[0].starts_with(prefix)) << r.err;
  const std::string path = r.err_lines()[0].substr(9);
  EXPECT_TRUE(std::regex_match(fs::path(path).filename().string(), std::regex(R"(cpu-n1-mpi-\d{8}T\d{6}Z(-\d+)?)")))
      << path;
  // The result folder: the summary is what --json printed; cases.csv and cases.h5 a row per size.
  const json printed = json::parse(r.out);
  EXPECT_EQ(json::parse(testing::slurp(path + "/summary.json")), printed);
  EXPECT_TRUE(fs::is_regular_file(path + "/cases.csv"));
  EXPECT_TRUE(fs::is_regular_file(path + "/cases.h5"));
  EXPECT_EQ(printed["benchmark"], "allreduce");
  EXPECT_EQ(printed["format"], report::kAllreduceBenchFormat);
  EXPECT_EQ(printed["algo"], "mpi");
  EXPECT_EQ(printed["issue"], "host");  // MPI on host memory: no graph to replay
  EXPECT_FALSE(printed["host"].get<std::string>().empty());
  EXPECT_TRUE(std::regex_match(printed["time"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  const auto files = report::find_allreduce_benches(dir.str());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, path + "/summary.json");
  EXPECT_EQ(files[0].bench.ranks, 1);
  ASSERT_EQ(files[0].bench.rows.size(), 3u);
  EXPECT_EQ(files[0].bench.rows[2].bytes, 16384);
  EXPECT_EQ(files[0].bench.rows[2].time_us, printed["rows"][2]["time_us"].get<double>());
}

TEST(AllreduceBenchResults, UnwritableRootFailsBeforeTheBenchmarkRuns) {
  TempDir dir;
  std::ofstream(dir.file("plain")) << "x";
  testing::CliResult r = testing::run_cnnscale(
      {"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "4K", "--results", dir.file("plain")});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.out, "");  // no table: it stopped before the benchmark
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find("bench allreduce --results " + dir.file("plain") + ": cannot create"), std::string::npos)
      << r.err;
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--results", dir.str(), "--experiment", "../up"},
                                              std::vector<std::string>{"--results", dir.str(), "--no-results"}}) {
    std::vector<std::string> args = {"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "4K"};
    args.insert(args.end(), bad.begin(), bad.end());
    testing::CliResult e = testing::run_cnnscale(args);
    EXPECT_EQ(e.exit_code, 2) << e.err;
    EXPECT_EQ(e.err_lines().size(), 1u) << e.err;
    EXPECT_EQ(e.out, "");
  }
}

// As train: $CNNSCALE_RESULTS (the test runner sets it to a temp folder) is the default root;
// --no-results writes nothing.
TEST(AllreduceBenchResults, DefaultRootFromEnvironmentAndNoResults) {
  testing::CliResult r = testing::run_cnnscale({"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "1K"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  const std::string dir =
      report::allreduce_bench_dir((fs::temp_directory_path() / "cnnscale_test_results").string(), "bench");
  ASSERT_TRUE(r.err_lines()[0].starts_with("results: " + dir + "/")) << r.err;
  const std::string path = r.err_lines()[0].substr(9);
  EXPECT_TRUE(fs::is_regular_file(path + "/summary.json"));
  fs::remove_all(path);
  testing::CliResult none =
      testing::run_cnnscale({"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "1K", "--no-results"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.err, "");
}

}  // namespace
}  // namespace cnnscale
