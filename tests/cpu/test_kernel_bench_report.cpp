// The kernel benchmarks' reports: the sweep of one axis around Li et al.'s base, tables and sweep
// figures from result folders, the table naming where sparse kernels win, and a list split over
// runs read as one benchmark.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/half.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/kernel_bench_output.hpp"
#include "measure/bench_shapes.hpp"
#include "measure/kernel_bench_run.hpp"
#include "measure/kernel_bench_suite.hpp"
#include "net/bench_problems.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;
using measure::Reference;

TEST(KernelBenchSweep, OneAxisAroundLiEtAlsBase) {
  const measure::ConvSweepBase base = measure::parse_sweep_base("64,128,64,11,1");
  EXPECT_EQ(base.c, 3);  // an image layer's channels unless given
  const auto ks = measure::conv_sweep("k", {1, 5, 11}, base);
  ASSERT_EQ(ks.size(), 3u);
  for (const ConvProblem& p : ks) {
    EXPECT_EQ(p.n, 64);
    EXPECT_EQ(p.h, 128);
    EXPECT_EQ(p.k, 64);
    EXPECT_EQ(p.r, p.s);
    EXPECT_EQ(measure::sweep_value("k", p), p.r);
  }
  EXPECT_EQ(ks[2].out_h(), 118);  // unpadded, stride 1
  const auto ss = measure::conv_sweep("s", measure::default_sweep_values("s"), base);
  EXPECT_EQ(ss.back().stride_h, 11);
  EXPECT_EQ(ss.back().out_h(), (128 - 11) / 11 + 1);
  EXPECT_THROW(measure::conv_sweep("q", {1}, base), ConfigError);
  EXPECT_THROW(measure::conv_sweep("k", {200}, base), ConfigError);  // larger than the input
  EXPECT_THROW(measure::parse_sweep_base("64,128,64"), ConfigError);
  CliResult r = run_cnnscale({"bench", "conv", "--device", "cpu", "--sweep", "f", "--sweep-base", "2,12,4,3,1,2",
                              "--sweep-values", "4,8", "--pass", "fwd", "--check", "--json", "--no-peak", "--quiet",
                              "--no-results", "--repeats", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sweep_axis"], "f");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["sweep_value"], 8);
  EXPECT_EQ(j["rows"][1]["k"], 8);
  EXPECT_EQ(j["rows"][1]["check"], "ok");
  expect_usage_error({"bench", "conv", "--device", "cpu", "--sweep-values", "4,8"}, {"need --sweep"});
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchReport, TablesAndSweepFiguresFromResultFolders) {
  const fs::path root = fs::temp_directory_path() / fmt::format("kb_report_{}", ::getpid());
  fs::remove_all(root);
  const std::vector<std::string> common = {"--device",  "cpu",         "--repeats",    "2", "--quiet",
                                           "--results", root.string(), "--experiment", "k"};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    CliResult r = run_cnnscale(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  run({"bench", "gemm", "--shapes", "tests/data/bench/gemm-small.csv"});
  run({"bench", "conv", "--sweep", "k", "--sweep-base", "2,12,4,3,1,2", "--sweep-values", "1,3,5", "--no-peak"});
  // A benchmark without a peak (and, on the CPU, without energy): its missing figures are blanks.
  run({"bench", "conv", "--shape", "9,8,3,2,4,3,2,1,0,1,2", "--no-peak"});
  const bool plots = std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") == 0;
  std::vector<std::string> args = {"report", root.string()};
  if (!plots) args.push_back("--no-plots");
  CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path out = root / "report";
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  // The summary: the GEMM benchmark (4 problems, one OpenBLAS variant each, a measured peak) and the
  // one-shape conv benchmark; the sweep has its own table, not a summary row.
  const std::string summary = slurp(out / "kernels.csv");
  EXPECT_NE(summary.find("gemm fp32,tests/data/bench/gemm-small.csv"), std::string::npos) << summary;
  EXPECT_NE(summary.find("4 / 4"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("sweep k"), std::string::npos) << summary;
  EXPECT_NE(summary.find("conv fp32 NCHW,--shape"), std::string::npos) << summary;
  const std::string cases = slurp(out / "kernel_cases.md");
  for (const char* file : {"kernels.md", "kernels.csv", "kernel_cases.md", "kernel_cases.csv", "conv_sweep.csv"}) {
    const std::string text = slurp(out / file);
    EXPECT_EQ(text.find("nan"), std::string::npos) << file << ":\n" << text;
  }
  EXPECT_NE(cases.find("m=17 n=9 k=33 TN"), std::string::npos) << cases;
  EXPECT_NE(cases.find("OpenBLAS cblas_sgemm"), std::string::npos) << cases;
  // The sweep in long form: 3 values x 3 passes x 1 algorithm.
  const std::string sweep = slurp(out / "conv_sweep.csv");
  int lines = 0;
  for (char c : sweep) lines += c == '\n';
  EXPECT_EQ(lines, 1 + 9) << sweep;
  EXPECT_NE(sweep.find("conv fp32 NCHW,k,5,bwd_filter,im2col + cblas_sgemm,"), std::string::npos) << sweep;
  if (plots) {
    EXPECT_TRUE(fs::exists(out / "conv_sweep_time.png"));
    EXPECT_TRUE(fs::exists(out / "conv_sweep_memory.png"));
    EXPECT_NE(slurp(out / "report.md").find("Li et al., Fig. 3"), std::string::npos);
    // Problems by share of the peak: the GEMM benchmark measured one. Energy: drawn where the CPU's
    // RAPL counters were readable, else named as not drawn with the reason.
    EXPECT_TRUE(fs::exists(out / "kernels_peak.png"));
    EXPECT_TRUE(fs::exists(out / "kernels_energy.png") ||
                slurp(out / "report.md").find("`kernels_energy.png` not drawn: no benchmark read the energy") !=
                    std::string::npos)
        << slurp(out / "report.md");
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchSparse, TableNamesWhereSparseWins) {
  measure::KernelBenchResult r;
  r.kind = "spmm";
  r.precision = "fp32";
  auto row = [](int64_t problem, double sparsity, double speedup) {
    measure::KernelBenchRow x;
    x.problem = problem;
    x.sparse = {100, 8, 200, sparsity};
    x.speedup_vs_dense = speedup;
    x.library = "cuSPARSE";
    x.timing.median_ms = 1.0;
    x.timing.repeats = 1;
    return x;
  };
  // 90 %: slower than dense; 95 %: faster with one of its variants; 99 %: faster.
  r.rows = {row(0, 0.9, 0.6), row(1, 0.95, 0.9), row(1, 0.95, 1.4), row(2, 0.99, 3.0)};
  const std::string t = report::kernel_bench_table(r);
  EXPECT_NE(t.find("m=100 n=8 k=200: 90%: 0.60x 95%: 1.40x 99%: 3.00x; sparse wins from 95% zeros"), std::string::npos)
      << t;
  r.rows = {row(0, 0.9, 0.6), row(1, 0.99, 0.8)};
  EXPECT_NE(report::kernel_bench_table(r).find("sparse never wins here"), std::string::npos);
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

// A list run in two parts (--limit, then --from) is one benchmark in the report's summary, with how
// much of the list the parts cover; a part run again replaces its cases rather than adding to them.
TEST(KernelBenchReport, AListSplitOverRunsIsOneBenchmark) {
  const fs::path root = fs::temp_directory_path() / fmt::format("kb_split_{}", ::getpid());
  fs::remove_all(root);
  auto run = [&](std::vector<std::string> args) {
    for (const char* a : {"--device", "cpu", "--repeats", "2", "--quiet", "--no-peak", "--experiment", "k"})
      args.push_back(a);
    args.push_back("--results");
    args.push_back(root.string());
    CliResult r = run_cnnscale(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  run({"bench", "gemm", "--shapes", "tests/data/bench/gemm-small.csv", "--limit", "2"});
  run({"bench", "gemm", "--shapes", "tests/data/bench/gemm-small.csv", "--from", "2"});  // overlaps problem 2
  CliResult r = run_cnnscale({"report", root.string(), "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = read_csv((root / "report" / "kernels.csv").string());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("benchmark"), "gemm fp32");
  EXPECT_EQ(rows[0].at("source"), "tests/data/bench/gemm-small.csv (4 of 4 problems, 2 runs)");
  EXPECT_EQ(rows[0].at("problems"), "4");
  EXPECT_EQ(rows[0].at("variants"), "4 / 4");
  fs::remove_all(root);
}

}  // namespace
}  // namespace cnnscale::testing
