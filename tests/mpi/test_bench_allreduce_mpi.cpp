// `bench allreduce --device cpu` under mpirun (label mpi, no GPU): the sizes of -b/-e/-f, the
// columns, nccl-tests' algbw/busbw definitions and a passing --check; and the launch/ scripts
// (mpirun.sh, pbs.sh and slurm.sbatch's mpirun mode, the last two with the job variables faked).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/job_runner.hpp"
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
    ASSERT_EQ(row.size(), 7u) << r.out;
    EXPECT_EQ(std::stoll(row[0]), size);
    EXPECT_EQ(std::stoll(row[1]), size / 4);
    EXPECT_EQ(row[2], "float");
    const double time_us = std::stod(row[3]), algbw = std::stod(row[4]), busbw = std::stod(row[5]);
    EXPECT_GT(time_us, 0.0);
    // Printed values are rounded (time to 0.01 us, bandwidths to 0.001 GB/s); the tolerance is
    // that rounding carried through algbw = bytes / time.
    const double from_time = static_cast<double>(size) / (time_us * 1e-6) / 1e9;
    EXPECT_NEAR(algbw, from_time, 0.0011 + from_time * 0.0051 / time_us) << "size " << size;
    EXPECT_NEAR(busbw, algbw * 2.0 * (2 - 1) / 2, 0.0011) << "size " << size;  // n = 2: busbw = algbw
    EXPECT_EQ(row[6], "0") << "wrong elements at size " << size;
    size *= 4;
  }
}

// Three ranks make busbw differ from algbw (x 4/3); JSON carries the unrounded numbers.
TEST(BenchAllreduceMpi, ThreeRanksJsonBusBandwidthDefinition) {
  MpiResult r = run_mpi(3, {"bench", "allreduce", "--device", "cpu", "-b", "8", "-e", "256K", "-f", "8", "-w", "2",
                            "-n", "10", "--check", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"], 3);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["iters"], 10);
  EXPECT_EQ(j["warmup_iters"], 2);
  EXPECT_EQ(j["rank_devices"].size(), 3u);
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 6u) << r.out;  // 8 64 512 4K 32K 256K
  int64_t size = 8;
  for (const auto& row : rows) {
    EXPECT_EQ(row["bytes"].get<int64_t>(), size);
    EXPECT_EQ(row["count"].get<int64_t>(), size / 4);
    const double t = row["time_us"], algbw = row["algbw_gbs"], busbw = row["busbw_gbs"];
    EXPECT_GT(t, 0.0);
    EXPECT_DOUBLE_EQ(algbw, static_cast<double>(size) / (t * 1e-6) / 1e9);
    EXPECT_DOUBLE_EQ(busbw, algbw * 2.0 * (3 - 1) / 3);
    EXPECT_EQ(row["wrong"], 0) << "size " << size;
    size *= 8;
  }
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
