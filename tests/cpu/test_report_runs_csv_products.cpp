// runs.csv over every product of a results root: beside training and inference, a bench allreduce
// result (one row per message size, its figures as rows.<field>, its provenance), a kernel benchmark
// (one row: its settings, path the folder) and a calibration (one row: settings and
// accuracy.<field>), each with its product; every row has every column; and results/README.md's
// pandas lines run on it as written where pandas is importable.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/kernel_profile_fixture.hpp"
#include "cpu/runs_csv_test_util.hpp"
#include "cpu/schema_test_util.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report_allreduce.hpp"
#include "io/calibration_results.hpp"
#include "io/kernel_bench_results.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

AllreduceResult allreduce_file() {
  AllreduceResult a;
  a.benchmark = std::string("allreduce");
  a.format = std::string(kAllreduceBenchFormat);
  a.time = std::string("2026-12-06T10:00:00Z");
  a.host = std::string("node-a");
  a.ranks = 2;
  a.device = std::string("cpu");
  a.algo = std::string("mpi");
  a.library = std::string("MPI_Allreduce, Open MPI v4.1.6");
  a.rank_devices = std::vector<std::string>{"node-a cpu", "node-a cpu"};
  a.warmup_iters = 5;
  a.iters = 20;
  std::vector<AllreduceSizeResult> sizes;
  for (int64_t bytes : {1024, 4096}) {
    AllreduceSizeResult s;
    s.bytes = bytes;
    s.time_us = 10.5;
    s.algbw_gbs = static_cast<double>(bytes) / 10.5e3;
    s.busbw_gbs = NumberFigure::null();
    sizes.push_back(s);
  }
  a.rows = sizes;
  Provenance p;
  p.version = "0.1.0";
  p.command_line = {"cnnscale", "bench", "allreduce", "-b", "1K", "-e", "4K"};
  p.start_time = "2026-12-06T10:00:00Z";
  p.end_time = "2026-12-06T10:00:05Z";
  p.hosts = {"node-a"};
  a.provenance = p;
  return a;
}

KernelBenchSummary kernel_file() {
  KernelBenchSummary s;
  s.kind = std::string("gemm");
  s.device = std::string("cpu (OpenBLAS)");
  s.host = std::string("node-a");
  s.time = std::string("2026-12-06T11:00:00Z");
  s.precision = std::string("fp32");
  s.layout = TextFigure::null();
  s.peak_tflops = 0.25;
  s.peak_method = std::string("square 512");
  s.energy_method = std::string("none");
  s.energy_window_seconds = 0.5;
  s.checked = false;
  s.source = std::string("--shape");
  s.status = std::string("complete");
  s.resume_from = CountFigure::null();
  s.sweep_axis = TextFigure::null();
  KernelBenchCase c;
  c.problem = 0;
  c.label = std::string("m=8 n=8 k=8 NN");
  c.m = c.n = c.k = 8;
  c.library = std::string("OpenBLAS");
  c.algorithm = std::string("cblas_sgemm");
  c.supported = true;
  c.status = std::string("");
  c.workspace_bytes = 0;
  c.memory_bytes = 768;
  c.flops = 1024.0;
  c.median_ms = 0.001;
  c.fastest = true;
  c.lowest_energy = false;
  s.rows = std::vector<KernelBenchCase>{c};
  s.provenance = testing::sample_provenance("bench");
  return s;
}

CalibrationResult calibration_file() {
  CalibrationResult r;
  r.format = std::string(kCalibrationFormat);
  r.time = std::string("2026-12-06T12:00:00Z");
  r.net = std::string("lenet");
  r.checkpoint = std::string("c.h5");
  r.data = std::string("mnist train");
  r.method = std::string("max");
  r.percentile = NumberFigure::null();
  r.folded_batch_norms = 0;
  r.device = std::string("cpu");
  r.samples = 256;
  CalibrationLayer l;
  l.layer = std::string("conv1");
  l.type = std::string("Convolution");
  l.input = std::string("data");
  l.input_max_abs = l.input_threshold = 1.0;
  l.input_scale = 1.0 / 127;
  l.weight_scales = std::vector<double>{0.5};
  r.layers = std::vector<CalibrationLayer>{l};
  CalibrationAccuracy a;
  a.test_set = std::string("mnist test");
  a.samples = 1000;
  a.fp32_top1 = 0.99;
  a.int8_top1 = 0.98;
  a.int8_cost_points = 1.0;
  a.int8_arithmetic = std::string("simulated");
  a.int8_executed_top1 = 0.975;
  CalibrationExecuted e;
  e.device = std::string("cpu");
  e.between_layers = std::string("fp32");
  e.int8_layers = std::vector<std::string>{"conv1", "conv2"};
  e.int8_outputs = std::vector<std::string>{};
  a.int8_executed = e;
  r.accuracy = a;
  r.provenance = testing::sample_provenance("calibrate");
  return r;
}

TEST(ReportRunsCsv, OneRowPerRunOfEveryProduct) {
  TempDir dir;
  testing::write_run(dir.str(), testing::scaling_run("lenet", 64, 1, 0));
  const std::string allreduce = report::write_allreduce_bench_folder(
      report::allreduce_bench_dir(dir.str(), "net"), "cpu-n2-mpi-20261206T100000Z", allreduce_result_json(allreduce_file()));
  const std::string kernels = write_kernel_bench_folder(dir.str(), "kern", kernel_file(), "20261206T110000Z");
  const fs::path calibration = fs::path(dir.str()) / "cal" / "calibration";
  fs::create_directories(calibration);
  std::ofstream(calibration / "lenet-max-20261206T120000Z.json") << calibration_result_json(calibration_file()).dump(2);
  KernelProfileSummary profile = testing::recorded_summary();
  profile.provenance = testing::sample_provenance("time");
  const std::string profiled = write_kernel_profile_folder(dir.str(), "prof", profile, "20261206T130000Z");

  const report::ReportOutcome outcome = testing::report_without_plots(dir.str());
  const std::string csv_path = (fs::path(outcome.out_dir) / "runs.csv").string();
  const json parsed = testing::runs_csv_table(csv_path);
  ASSERT_TRUE(parsed.is_object()) << testing::slurp(csv_path);
  const json& header = parsed["header"];
  std::map<std::string, std::vector<json>> by_product;
  for (const json& row : parsed["rows"]) {
    EXPECT_EQ(row.size(), header.size());  // every row has every column
    by_product[row["product"].get<std::string>()].push_back(row);
  }
  ASSERT_EQ(by_product["training"].size(), 1u);

  const std::vector<json>& sizes = by_product["allreduce"];
  ASSERT_EQ(sizes.size(), 2u) << testing::slurp(csv_path);
  EXPECT_EQ(sizes[0]["experiment"], "net");
  EXPECT_EQ(sizes[0]["run_id"], "cpu-n2-mpi-20261206T100000Z");
  EXPECT_EQ(sizes[0]["path"], fs::path(allreduce).lexically_relative(dir.str()).string());
  EXPECT_EQ(sizes[0]["ranks"], "2");
  EXPECT_EQ(sizes[0]["algo"], "mpi");
  EXPECT_EQ(sizes[0]["rank_devices"], "node-a cpu+node-a cpu");
  EXPECT_EQ(sizes[0]["rows.bytes"], "1024");
  EXPECT_EQ(sizes[1]["rows.bytes"], "4096");
  EXPECT_EQ(sizes[1]["rows.time_us"], "10.5");
  EXPECT_EQ(sizes[1]["rows.busbw_gbs"], "");  // null
  EXPECT_EQ(sizes[1]["provenance.command_line"], "cnnscale bench allreduce -b 1K -e 4K");

  const std::vector<json>& kernel = by_product["kernels"];
  ASSERT_EQ(kernel.size(), 1u);
  EXPECT_EQ(kernel[0]["experiment"], "kern");
  EXPECT_EQ(kernel[0]["run_id"], fs::path(kernels).filename().string());
  EXPECT_EQ(kernel[0]["path"], fs::path(kernels).lexically_relative(dir.str()).string());
  EXPECT_EQ(kernel[0]["kind"], "gemm");
  EXPECT_EQ(kernel[0]["peak_tflops"], "0.25");
  EXPECT_EQ(kernel[0]["layout"], "");
  EXPECT_EQ(kernel[0]["rows.bytes"], "");  // an allreduce column
  EXPECT_EQ(kernel[0]["provenance.command_line"], "cnnscale bench --device cpu");

  const std::vector<json>& calibrated = by_product["calibration"];
  ASSERT_EQ(calibrated.size(), 1u);
  EXPECT_EQ(calibrated[0]["experiment"], "cal");
  EXPECT_EQ(calibrated[0]["run_id"], "lenet-max-20261206T120000Z");
  EXPECT_EQ(calibrated[0]["net"], "lenet");
  EXPECT_EQ(calibrated[0]["method"], "max");
  EXPECT_EQ(calibrated[0]["percentile"], "");
  EXPECT_EQ(calibrated[0]["accuracy.int8_top1"], "0.98");
  EXPECT_EQ(calibrated[0]["accuracy.int8_executed.int8_layers"], "conv1+conv2");
  EXPECT_EQ(calibrated[0]["provenance.command_line"], "cnnscale calibrate --device cpu");
  EXPECT_EQ(by_product["training"][0]["accuracy.int8_top1"], "");

  // A kernel profile: its settings and step figures; its kernels stay in kernels.csv.
  const std::vector<json>& profiles = by_product["kernel_profile"];
  ASSERT_EQ(profiles.size(), 1u);
  EXPECT_EQ(profiles[0]["experiment"], "prof");
  EXPECT_EQ(profiles[0]["run_id"], fs::path(profiled).filename().string());
  EXPECT_EQ(profiles[0]["path"], fs::path(profiled).lexically_relative(dir.str()).string());
  EXPECT_EQ(profiles[0]["command"], "time");
  EXPECT_EQ(profiles[0]["net"], "tiny");
  EXPECT_EQ(profiles[0]["metric_set"], "achieved_occupancy+ipc+dram_throughput");
  EXPECT_EQ(profiles[0]["profiled_steps"], "2");
  for (const json& column : header) EXPECT_NE(column, "kernels");  // the rows stay in kernels.csv
  EXPECT_EQ(by_product.size(), 5u);
}

// The README's example groups the training rows of runs.csv; it runs as written on a report's file.
TEST(ReportRunsCsv, ReadmePandasExampleRunsAsWritten) {
  TempDir dir;
  testing::write_run(dir.str(), testing::scaling_run("lenet", 64, 1, 0));
  testing::write_run(dir.str(), testing::scaling_run("lenet", 64, 1, 1));
  const std::string allreduce = report::write_allreduce_bench_folder(
      report::allreduce_bench_dir(dir.str(), "net"), "cpu-n2-mpi-20261206T100000Z", allreduce_result_json(allreduce_file()));
  const report::ReportOutcome outcome = testing::report_without_plots(dir.str());
  bool skipped = false;
  const std::string out = testing::run_readme_pandas_example((fs::path(outcome.out_dir) / "runs.csv").string(), &skipped);
  if (skipped) GTEST_SKIP() << "pandas is not importable";
  EXPECT_NE(out.find("lenet"), std::string::npos) << out;
}

}  // namespace
}  // namespace cnnscale
