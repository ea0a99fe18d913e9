// check_allreduce_bench_request and run_allreduce_bench_job (experiment/allreduce_bench_run.hpp):
// what `bench allreduce` refuses before any rank opens a device, and the bench on one CPU rank
// writing its result folder, which reads back through the allreduce schema.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error_of.hpp"
#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "experiment/allreduce_bench_run.hpp"
#include "experiment/report_allreduce.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
namespace {

using testing::TempDir;

// The bench reads the process's MpiEnv (main makes it in the binary); one rank here.
void start_one_process_mpi() {
  static MpiEnv* env = MpiEnv::current() ? MpiEnv::current() : new MpiEnv(nullptr, nullptr);
  (void)env;
}

AllreduceBenchRequest cpu_request() {
  AllreduceBenchRequest r;
  r.device = "cpu";
  r.min_bytes = "1K";
  r.max_bytes = "16K";
  r.step_factor = 4;  // 1K, 4K, 16K
  r.warmup = 1;
  r.iters = 3;
  r.repeats = 2;
  return r;
}

std::string refusal(const AllreduceBenchRequest& r) {
  return testing::config_error_of([&] { check_allreduce_bench_request(r); });
}

TEST(AllreduceBenchRun, RefusesBeforeAnyRankOpensADevice) {
  EXPECT_EQ(refusal(cpu_request()), "");
  const AllreduceBenchConfig cfg = check_allreduce_bench_request(cpu_request());
  EXPECT_FALSE(cfg.gpu);
  EXPECT_EQ(cfg.min_bytes, 1024);
  EXPECT_EQ(cfg.max_bytes, 16384);
  // GPU-only settings on --device cpu: refused where given, whatever their value.
  AllreduceBenchRequest r = cpu_request();
  r.algo_given = true;
  EXPECT_NE(refusal(r).find("--algo"), std::string::npos) << refusal(r);
  r = cpu_request();
  r.issue_given = true;
  EXPECT_NE(refusal(r).find("--issue graph"), std::string::npos) << refusal(r);
  r.issue = "host";
  EXPECT_EQ(refusal(r), "");
  r = cpu_request();
  r.max_ctas = 4;
  EXPECT_NE(refusal(r).find("--max-ctas"), std::string::npos) << refusal(r);
  r = cpu_request();
  r.priority = "low";
  EXPECT_NE(refusal(r).find("--priority"), std::string::npos) << refusal(r);
  r = cpu_request();
  r.energy_window_given = true;
  EXPECT_NE(refusal(r).find("--energy-window"), std::string::npos) << refusal(r);
  r = cpu_request();
  r.min_bytes = "8X";
  EXPECT_NE(refusal(r).find("-b"), std::string::npos) << refusal(r);
  r = cpu_request();
  r.experiment_given = true;
  EXPECT_NE(refusal(r).find("--results"), std::string::npos) << refusal(r);
  r.results_root = "somewhere";
  EXPECT_EQ(refusal(r), "");
}

// One CPU rank: its sums checked, its result folder written, and read back as what the run returned.
TEST(AllreduceBenchRun, OneCpuRankWritesItsResult) {
  start_one_process_mpi();
  const TempDir dir;
  AllreduceBenchRequest r = cpu_request();
  r.check = true;
  r.results_root = dir.str();
  r.experiment = "mine";
  r.settings.values = {{"device", "cpu"}, {"check", true}};
  const AllreduceBenchRun run = run_allreduce_bench_job(r);
  ASSERT_TRUE(run.rank0);
  EXPECT_EQ(run.wrong, 0);
  ASSERT_EQ(run.bench.rows.size(), 3u);
  EXPECT_EQ(run.summary.ranks.value(), 1);
  EXPECT_EQ(run.summary.algo.value(), "mpi");
  EXPECT_EQ(run.summary.settings.value(), r.settings);
  EXPECT_TRUE(run.summary.provenance.has_value());
  const std::string path = save_allreduce_bench(run);
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(report::allreduce_bench_dir(dir.str(), "mine")));

  const auto files = report::find_allreduce_benches(dir.str());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].result, run.summary);
  ASSERT_EQ(files[0].bench.rows.size(), 3u);
  EXPECT_EQ(files[0].bench.rows[2].bytes, 16384);
  EXPECT_EQ(files[0].bench.rows[2].wrong, 0);
}

// A wrong sum saves nothing: the report would average it with good ones.
TEST(AllreduceBenchRun, AWrongSumSavesNothing) {
  start_one_process_mpi();
  const TempDir dir;
  AllreduceBenchRequest r = cpu_request();
  r.check = true;
  r.results_root = dir.str();
  AllreduceBenchRun run = run_allreduce_bench_job(r);
  ASSERT_TRUE(run.rank0);
  run.wrong = 1;
  EXPECT_EQ(save_allreduce_bench(run), "");
  EXPECT_TRUE(report::find_allreduce_benches(dir.str()).empty());
}

}  // namespace
}  // namespace cnnscale
