// check_kernel_bench_request, run_kernel_bench and save_kernel_bench (experiment/kernel_bench_job.hpp):
// what `bench gemm|conv|spmm|rnn` refuses before it opens a device, the problem list and its
// --from/--limit slice, and a CPU GEMM run whose result folder reads back through the schema.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error_of.hpp"
#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "experiment/kernel_bench_job.hpp"
#include "io/kernel_bench_results.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

KernelBenchRequest gemm_request() {
  KernelBenchRequest r;
  r.kind = "gemm";
  r.shapes = {"8,8,8", "5,7,9"};
  return r;
}

std::string refusal(const KernelBenchRequest& r) {
  return testing::config_error_of([&] { check_kernel_bench_request(r); });
}

TEST(KernelBenchJob, RefusesBeforeOpeningADevice) {
  EXPECT_EQ(refusal(gemm_request()), "");
  KernelBenchRequest r = gemm_request();
  r.set_given = true;
  EXPECT_NE(refusal(r).find("one of --set, --shapes, --shape and --net"), std::string::npos) << refusal(r);
  r = gemm_request();
  r.batch_given = true;
  EXPECT_NE(refusal(r).find("--batch applies to --net"), std::string::npos) << refusal(r);
  r = gemm_request();
  r.precision = "bf16";
  EXPECT_NE(refusal(r).find("fp32 only"), std::string::npos) << refusal(r);
  r = gemm_request();
  r.experiment_given = true;
  EXPECT_NE(refusal(r).find("--results"), std::string::npos) << refusal(r);
  r = gemm_request();
  r.from = 3;
  EXPECT_NE(refusal(r).find("--from 3"), std::string::npos) << refusal(r);
  r = gemm_request();
  r.kind = "rnn";
  r.shapes.clear();
  EXPECT_NE(refusal(r).find("runs on a GPU"), std::string::npos) << refusal(r);
  KernelBenchRequest c;
  c.kind = "conv";
  c.shapes = {"9,8,3,2,4,3,2,1,0,1,2"};
  EXPECT_EQ(refusal(c), "");
  c.sweep_base_given = true;
  EXPECT_NE(refusal(c).find("--sweep AXIS"), std::string::npos) << refusal(c);
  c.sweep_base_given = false;
  c.layout = "nhwc";
  EXPECT_NE(refusal(c).find("nhwc"), std::string::npos) << refusal(c);
  c.layout = "nchw";
  c.passes = {"fwd", "fwd"};
  EXPECT_NE(refusal(c).find("listed twice"), std::string::npos) << refusal(c);
}

// --from and --limit: a slice of the list, counted against the whole list.
TEST(KernelBenchJob, FromAndLimitSliceTheList) {
  KernelBenchRequest r;
  r.kind = "gemm";
  r.shapes_file = std::string(CNNSCALE_SOURCE_DIR) + "/tests/data/bench/gemm-small.csv";
  r.from = 2;
  r.limit = 2;
  const KernelBenchPlan p = check_kernel_bench_request(r);
  EXPECT_EQ(p.listed, 4u);
  EXPECT_EQ(p.kept, 2u);
  ASSERT_EQ(p.gemms.size(), 2u);
  EXPECT_EQ(p.gemms[0], (GemmProblem{17, 9, 33, true, false}));
  EXPECT_EQ(p.gemms[1], (GemmProblem{12, 20, 8, false, true}));
}

// Two GEMMs on the CPU, checked; the result folder's summary reads back as what the run returned.
TEST(KernelBenchJob, CpuGemmRunSavesItsResult) {
  const TempDir dir;
  KernelBenchRequest r = gemm_request();
  r.check = true;
  r.warmup = 1;
  r.repeats = 2;
  r.peak = false;
  r.energy_window = 0;
  r.results_root = dir.str();
  r.experiment = "kb";
  r.settings.values = {{"check", true}};
  const KernelBenchRun run = run_kernel_bench(r);
  EXPECT_EQ(run.kept, 2u);
  ASSERT_EQ(run.result.rows.size(), 2u);  // one OpenBLAS variant per problem
  for (const auto& row : run.result.rows) EXPECT_EQ(row.check, "ok");
  EXPECT_EQ(run.summary.settings.value(), r.settings);
  EXPECT_TRUE(run.summary.provenance.has_value());
  const std::string path = save_kernel_bench(r, run);
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir.str()) / "kb" / "bench");
  std::ifstream in(fs::path(path) / "summary.json");
  const KernelBenchSummary saved = kernel_bench_result_from_json(nlohmann::json::parse(in), path);
  EXPECT_EQ(saved, run.summary);
  // Without a results root nothing is saved.
  r.results_root.clear();
  EXPECT_EQ(save_kernel_bench(r, run), "");
}

}  // namespace
}  // namespace cnnscale
