// `bench allreduce --device cpu` under mpirun (label mpi, no GPU): the sizes of -b/-e/-f, the
// columns, nccl-tests' algbw/busbw definitions and a passing --check; results files of 1, 2 and 8
// ranks and the report's table of them; and the launch/ scripts (mpirun.sh, pbs.sh and
// slurm.sbatch's mpirun mode, the last two with the job variables faked).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "common/job_runner.hpp"
#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_allreduce.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale::testing {
namespace {

TEST(BenchAllreduceMpi, TwoRanksTableColumnsAndCheck) {
  MpiResult r = run_mpi(2, {"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "1M", "-f", "4", "--check"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 rank(s), device cpu, MPI_Allreduce"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("time (us)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("busbw (GB/s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# check: passed"), std::string::npos) << r.out;
  const auto rows = bench_table_rows(r.out);
  ASSERT_EQ(rows.size(), 6u) << r.out;  // 1K 4K 16K 64K 256K 1M
  int64_t size = 1024;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 9u) << r.out;
    EXPECT_EQ(std::stoll(row[0]), size);
    EXPECT_EQ(std::stoll(row[1]), size / 4);
    EXPECT_EQ(row[2], "float");
    const double time_us = std::stod(row[3]), algbw = std::stod(row[6]), busbw = std::stod(row[7]);
    EXPECT_GT(time_us, 0.0);
    // The median of the repeats lies between the fastest and the slowest (all printed to 0.01 us).
    EXPECT_LE(std::stod(row[4]), time_us) << "size " << size;
    EXPECT_GE(std::stod(row[5]), time_us) << "size " << size;
    // Printed values are rounded (time to 0.01 us, bandwidths to 0.001 GB/s); the tolerance is
    // that rounding carried through algbw = bytes / time.
    const double from_time = static_cast<double>(size) / (time_us * 1e-6) / 1e9;
    EXPECT_NEAR(algbw, from_time, 0.0011 + from_time * 0.0051 / time_us) << "size " << size;
    EXPECT_NEAR(busbw, algbw * 2.0 * (2 - 1) / 2, 0.0011) << "size " << size;  // n = 2: busbw = algbw
    EXPECT_EQ(row[8], "0") << "wrong elements at size " << size;
    size *= 4;
  }
}

// Three ranks make busbw differ from algbw (x 4/3); JSON carries the unrounded numbers.
TEST(BenchAllreduceMpi, ThreeRanksJsonBusBandwidthDefinition) {
  MpiResult r = run_mpi(3, {"bench", "allreduce", "--device", "cpu", "-b", "8", "-e", "256K", "-f", "8", "-w", "2",
                            "-n", "10", "-r", "3", "--check", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"], 3);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["iters"], 10);
  EXPECT_EQ(j["warmup_iters"], 2);
  EXPECT_EQ(j["repeats"], 3);
  EXPECT_EQ(j["rank_devices"].size(), 3u);
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 6u) << r.out;  // 8 64 512 4K 32K 256K
  int64_t size = 8;
  for (const auto& row : rows) {
    EXPECT_EQ(row["bytes"].get<int64_t>(), size);
    EXPECT_EQ(row["count"].get<int64_t>(), size / 4);
    const double t = row["time_us"], algbw = row["algbw_gbs"], busbw = row["busbw_gbs"];
    EXPECT_GT(t, 0.0);
    EXPECT_LE(row["time_min_us"].get<double>(), t);
    EXPECT_GE(row["time_max_us"].get<double>(), t);
    EXPECT_DOUBLE_EQ(algbw, static_cast<double>(size) / (t * 1e-6) / 1e9);
    EXPECT_DOUBLE_EQ(busbw, algbw * 2.0 * (3 - 1) / 3);
    EXPECT_EQ(row["wrong"], 0) << "size " << size;
    size *= 8;
  }
}

// The scaling study's use: one file per rank count (rank 0 writes it; 8 ranks oversubscribed on
// the CI's cores), then the report's table with a column per rank count holding each file's values.
TEST(BenchAllreduceMpi, ResultsFilesOfOneTwoAndEightRanksMakeTheReportTable) {
  TempDir dir;
  const std::vector<int> counts = {1, 2, 8};
  std::map<int, nlohmann::json> by_ranks;
  for (int n : counts) {
    MpiResult r = run_mpi(n, {"bench", "allreduce", "--device", "cpu", "--results", dir.str(), "-b", "1K", "-e", "64K",
                              "-f", "4", "-w", "1", "-n", "3", "--check"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("# check: passed"), std::string::npos) << r.out;  // the table is still printed
    // Exactly one "results:" line: only rank 0 writes.
    const std::regex line(R"(results: (\S+)\n)");
    auto lines = std::sregex_iterator(r.err.begin(), r.err.end(), line);
    ASSERT_EQ(std::distance(lines, std::sregex_iterator()), 1) << r.err;
    const std::string path = (*lines)[1];
    EXPECT_EQ(std::filesystem::path(path).parent_path(),
              std::filesystem::path(report::allreduce_bench_dir(dir.str(), "bench")));
    EXPECT_TRUE(std::regex_match(std::filesystem::path(path).filename().string(),
                                 std::regex(fmt::format(R"(cpu-n{}-mpi-\d{{8}}T\d{{6}}Z(-\d+)?)", n))))
        << path;
    // A result folder as the kernel benches write: the summary, and a row per size in CSV and HDF5.
    const nlohmann::json j = nlohmann::json::parse(slurp(path + "/summary.json"));
    EXPECT_TRUE(std::filesystem::is_regular_file(path + "/cases.h5")) << path;
    const auto csv = read_csv(path + "/cases.csv");
    ASSERT_EQ(csv.size(), 4u);
    EXPECT_EQ(csv[3].at("bytes"), "65536");
    EXPECT_EQ(std::stod(csv[3].at("time_us")), j["rows"][3]["time_us"].get<double>());
    EXPECT_EQ(j["benchmark"], "allreduce");
    EXPECT_EQ(j["ranks"], n);
    EXPECT_EQ(j["rank_devices"].size(), static_cast<size_t>(n));
    EXPECT_EQ(j["checked"], true);
    ASSERT_EQ(j["rows"].size(), 4u) << j.dump();  // 1K 4K 16K 64K
    for (const auto& row : j["rows"]) EXPECT_EQ(row["wrong"], 0);
    by_ranks[n] = j;
  }
  // Nothing else in the folder: no temporary or probe file left behind.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(report::allreduce_bench_dir(dir.str(), "bench")))
    names.push_back(e.path().filename().string());
  std::string listing;
  for (const auto& name : names) listing += name + " ";
  EXPECT_EQ(names.size(), 3u) << listing;

  const auto files = report::find_allreduce_benches(dir.str());
  ASSERT_EQ(files.size(), 3u);
  const report::Table t = report::allreduce_table(files);
  std::vector<std::string> headers;
  for (const auto& c : t.columns) headers.push_back(c.header);
  EXPECT_EQ(headers, (std::vector<std::string>{"size", "bytes", "busbw 1 CPU rank (GB/s)", "busbw 2 CPU ranks (GB/s)",
                                               "busbw 8 CPU ranks (GB/s)", "time 1 CPU rank (µs)",
                                               "time 2 CPU ranks (µs)", "time 8 CPU ranks (µs)"}));
  ASSERT_EQ(t.rows.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(t.rows[i][1].text, std::to_string(1024 << (2 * i)));
    for (size_t k = 0; k < counts.size(); ++k) {
      const auto& row = by_ranks[counts[k]]["rows"][i];
      const report::Stat busbw = t.rows[i][2 + k].value, time = t.rows[i][5 + k].value;
      EXPECT_EQ(busbw.n, 1);
      EXPECT_EQ(busbw.mean, row["busbw_gbs"].get<double>()) << counts[k] << " ranks, row " << i;
      EXPECT_EQ(time.mean, row["time_us"].get<double>()) << counts[k] << " ranks, row " << i;
      EXPECT_GT(time.mean, 0.0);
      if (counts[k] == 1)
        EXPECT_EQ(busbw.mean, 0.0);
      else
        EXPECT_GT(busbw.mean, 0.0);
    }
  }
  EXPECT_EQ(t.rows[0][0].text, "1 KiB");
  EXPECT_EQ(t.rows[3][0].text, "64 KiB");

  // End to end: `cnnscale report` on a folder holding only these files writes the allreduce table
  // (and, where matplotlib is importable, its figure) with a column per rank count.
  const bool plots = std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") == 0;
  std::vector<std::string> args = {"report", dir.str()};
  if (!plots) args.push_back("--no-plots");
  auto rep = run_cnnscale(args);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("0 run(s), 0 configuration(s), 3 allreduce bench file(s)"), std::string::npos) << rep.out;
  const std::filesystem::path out = std::filesystem::path(dir.str()) / "report";
  const auto csv = read_csv((out / "allreduce.csv").string());
  ASSERT_EQ(csv.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    for (int n : counts)
      EXPECT_EQ(std::stod(csv[i].at(fmt::format("busbw_gbs_n{}_mean", n))),
                by_ranks[n]["rows"][i]["busbw_gbs"].get<double>())
          << n << " ranks, row " << i;
  const std::string md = slurp((out / "report.md").string());
  EXPECT_NE(md.find("<a id=\"allreduce\">"), std::string::npos) << md;
  EXPECT_EQ(md.find("<a id=\"time\">"), std::string::npos) << "no training runs, no training tables";
  if (plots) {
    EXPECT_GT(std::filesystem::file_size(out / report::kAllreduceFigure), 1000u);
    EXPECT_NE(md.find("](" + report::kAllreduceFigure + ")"), std::string::npos) << md;
    for (const std::string& name : report::kFigureNames) EXPECT_FALSE(std::filesystem::exists(out / name)) << name;
    // CPU ranks measure no energy: no energy table, and the energy figure says why it is missing.
    EXPECT_FALSE(std::filesystem::exists(out / report::kAllreduceEnergyFigure));
    EXPECT_FALSE(std::filesystem::exists(out / "allreduce_energy.csv"));
    EXPECT_NE(md.find("`" + report::kAllreduceEnergyFigure + "` not drawn"), std::string::npos) << md;
  }
}

// The 16-bit sums of the gradient exchange (train --allreduce-dtype): sizes in bytes of 2-byte
// elements, every sum of the pattern exact (integers to 31 x 2 fit bf16's and fp16's significands)
// through our MPI operation; the results file names its dtype and the report keeps it apart from
// the fp32 one. bf16's check stops at 8 ranks, past which its sums are no longer exact integers.
TEST(BenchAllreduceMpi, SixteenBitSumsAreCheckedAndReportedApart) {
  TempDir dir;
  for (const std::string dtype : {"bf16", "fp16", "fp32"}) {
    SCOPED_TRACE(dtype);
    MpiResult r = run_mpi(2, {"bench", "allreduce", "--device", "cpu", "--dtype", dtype, "--results", dir.str(), "-b",
                              "4", "-e", "64K", "-f", "16", "-w", "1", "-n", "3", "--check", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["dtype"], dtype);
    const int64_t element = dtype == "fp32" ? 4 : 2;
    const auto& rows = j["rows"];
    ASSERT_EQ(rows.size(), 4u) << r.out;  // 4, 64, 1K, 16K bytes
    for (const auto& row : rows) {
      EXPECT_EQ(row["bytes"].get<int64_t>(), row["count"].get<int64_t>() * element);
      EXPECT_EQ(row["type"], dtype == "bf16" ? "bfloat16" : dtype == "fp16" ? "half" : "float");
      EXPECT_EQ(row["wrong"], 0) << row.dump();
    }
  }
  const auto files = report::find_allreduce_benches(dir.str());
  ASSERT_EQ(files.size(), 3u);
  std::vector<std::string> headers;
  for (const auto& c : report::allreduce_table(files).columns) headers.push_back(c.header);
  for (const char* h : {"busbw 2 CPU ranks, mpi (GB/s)", "busbw 2 CPU ranks, mpi bf16 (GB/s)",
                        "busbw 2 CPU ranks, mpi fp16 (GB/s)"})
    EXPECT_NE(std::find(headers.begin(), headers.end(), h), headers.end()) << h << " among " << ::testing::PrintToString(headers);

  MpiResult nine = run_mpi(9, {"bench", "allreduce", "--device", "cpu", "--dtype", "bf16", "-e", "1K", "--check"});
  EXPECT_EQ(nine.exit_code, 2) << nine.err;
  EXPECT_NE(nine.err.find("sums over 9 ranks can reach 279"), std::string::npos) << nine.err;
}

// An unwritable root stops every rank with exit 2 before the benchmark runs: rank 0 checks it and
// prints the one error line of the job.
TEST(BenchAllreduceMpi, UnwritableResultsRootEndsEveryRankBeforeTheBenchmark) {
  TempDir dir;
  std::ofstream(dir.file("plain")) << "a file, not a folder";
  MpiResult r =
      run_mpi(3, {"bench", "allreduce", "--device", "cpu", "--results", dir.file("plain"), "-b", "1K", "-e", "4K"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("cnnscale: error: rank 0 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bench allreduce --results " + dir.file("plain") + ": cannot create"), std::string::npos)
      << r.err;
  int lines = 0;
  for (size_t p = r.err.find("cnnscale: error:"); p != std::string::npos; p = r.err.find("cnnscale: error:", p + 1))
    ++lines;
  EXPECT_EQ(lines, 1) << r.err;
  EXPECT_EQ(r.out.find("# cnnscale bench allreduce"), std::string::npos) << r.out;
}

TEST(BenchAllreduceMpi, LaunchScriptRunsTwoRanks) {
  // MPIRUN_ARGS: CI machines may have fewer cores than ranks.
  JobResult r = run_job(
      {"bash", "launch/mpirun.sh", "2", "bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "4K", "--check"},
      std::string("CNNSCALE_BIN=") + shell_quote(CNNSCALE_BIN) + " MPIRUN_ARGS=--oversubscribe");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 rank(s), device cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# check: passed"), std::string::npos) << r.out;
  EXPECT_EQ(bench_table_rows(r.out).size(), 3u) << r.out;  // 1K 2K 4K
}

// pbs.sh outside PBS: a node file naming this host twice stands for one node with 2 slots.
TEST(BenchAllreduceMpi, PbsScriptRunsOneRankPerNodefileSlot) {
  const std::string nodefile = ::testing::TempDir() + "cnnscale_pbs_nodefile";
  {
    std::ofstream f(nodefile);
    f << "localhost\nlocalhost\n";
  }
  JobResult r =
      run_job({"bash", "launch/pbs.sh", "bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "2K", "--check"},
              "PBS_NODEFILE=" + shell_quote(nodefile) + " PBS_O_WORKDIR=" + shell_quote(CNNSCALE_SOURCE_DIR) +
                  " CNNSCALE_BIN=" + shell_quote(CNNSCALE_BIN) + " MPIRUN_ARGS=--oversubscribe");
  std::remove(nodefile.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("2 rank(s) on 1 node(s), 2 per node"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("2 rank(s), device cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# check: passed"), std::string::npos) << r.out;
}

// slurm.sbatch's mpirun mode outside Slurm, with the variables a 1-node, 2-task job would set.
TEST(BenchAllreduceMpi, SlurmScriptRunsTasksWithMpirun) {
  JobResult r = run_job(
      {"bash", "launch/slurm.sbatch", "bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "2K", "--check"},
      "-u SLURM_JOB_ID -u SLURM_JOBID -u SLURM_PROCID SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 "
      "SLURM_JOB_NUM_NODES=1 SLURM_SUBMIT_DIR=" +
          shell_quote(CNNSCALE_SOURCE_DIR) + " CNNSCALE_LAUNCHER=mpirun CNNSCALE_BIN=" + shell_quote(CNNSCALE_BIN) +
          " MPIRUN_ARGS=--oversubscribe");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("2 rank(s) on 1 node(s), 2 per node"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("2 rank(s), device cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# check: passed"), std::string::npos) << r.out;
}

TEST(BenchAllreduceMpi, LaunchScriptRejectsBadRankCount) {
  JobResult r = run_job({"bash", "launch/mpirun.sh", "zero", "bench", "allreduce"},
                        std::string("CNNSCALE_BIN=") + shell_quote(CNNSCALE_BIN));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("number of ranks"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cnnscale::testing
