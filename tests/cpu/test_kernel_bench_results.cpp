// The kernel benchmarks' results schema (io/kernel_bench_results.hpp): a run's JSON is, byte for
// byte, what the writer gave before the schema (each kind's problem fields only, nulls where they
// were); every field round-trips through JSON text; a wrong type or kind is refused with its key
// path; and a folder written by the first version (before energy_settle_seconds, source, status,
// setup_ms ...) is still read into the report's tables.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/schema_test_util.hpp"
#include "experiment/kernel_bench_output.hpp"
#include "experiment/report_kernels.hpp"
#include "io/kernel_bench_results.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

measure::KernelBenchRow timed_row(int64_t problem, const std::string& algorithm) {
  measure::KernelBenchRow r;
  r.problem = problem;
  r.label = "problem " + std::to_string(problem);
  r.library = "OpenBLAS";
  r.algorithm = algorithm;
  r.memory_bytes = 12288;
  r.flops = 65536;
  r.timing.median_ms = 0.25;
  r.timing.min_ms = 0.125;
  r.timing.max_ms = 0.5;
  r.timing.repeats = 5;
  r.timing.calls_per_repeat = 40;
  r.tflops = 0.00026;
  r.peak_fraction = 0.5;
  r.fastest = true;
  return r;
}

TEST(KernelBenchResults, GemmJsonIsWhatTheWriterGaveBeforeTheSchema) {
  measure::KernelBenchResult r;
  r.kind = "gemm";
  r.device = "cpu (OpenBLAS 0.3.26, 2 threads)";
  r.precision = "fp32";
  r.layout = "NCHW";  // not written for gemm: null
  r.peak_tflops = 0.75;
  r.peak_method = "square 512";
  r.energy_method = "none";
  r.energy_window_seconds = 0.5;
  r.energy_settle_seconds = 0.5;
  r.checked = true;
  r.source = "--shape";
  measure::KernelBenchRow a = timed_row(1, "sgemm");
  a.gemm = {64, 32, 16, false, true};
  a.padded_from = "63x32x16";
  a.watts = 100.0;
  a.joules_per_call = 0.025;
  a.energy_seconds = 0.5;
  a.check = "ok";
  a.check_error = 1e-7;
  a.check_tolerance = 1e-5;
  measure::KernelBenchRow b = a;
  b.algorithm = "im2col";
  b.supported = false;
  b.status = "not supported";
  b.check = "";
  b.fastest = false;
  b.lowest_energy = false;
  r.rows = {a, b};
  const std::string expected = json::parse(R"J({
    "kind": "gemm", "device": "cpu (OpenBLAS 0.3.26, 2 threads)", "host": "h", "time": "t", "precision": "fp32",
    "layout": null, "peak_tflops": 0.75, "peak_method": "square 512", "energy_method": "none",
    "energy_window_seconds": 0.5, "energy_settle_seconds": 0.5, "energy_within": null, "power_limit_watts": null,
    "checked": true, "source": "--shape", "status": "complete", "resume_from": null, "sweep_axis": null,
    "rows": [
      {"problem": 1, "label": "problem 1", "library": "OpenBLAS", "algorithm": "sgemm", "supported": true,
       "status": "", "workspace_bytes": 0, "setup_ms": null, "memory_bytes": 12288, "flops": 65536.0,
       "m": 64, "n": 32, "k": 16, "trans_a": false, "trans_b": true, "padded_from": "63x32x16",
       "median_ms": 0.25, "min_ms": 0.125, "max_ms": 0.5, "repeats": 5, "calls_per_repeat": 40,
       "tflops": 0.00026, "peak_fraction": 0.5, "watts": 100.0, "joules_per_call": 0.025, "energy_seconds": 0.5,
       "check": "ok", "check_error": 1e-07, "check_tolerance": 1e-05, "fastest": true, "lowest_energy": false},
      {"problem": 1, "label": "problem 1", "library": "OpenBLAS", "algorithm": "im2col", "supported": false,
       "status": "not supported", "workspace_bytes": 0, "setup_ms": null, "memory_bytes": 12288, "flops": 65536.0,
       "m": 64, "n": 32, "k": 16, "trans_a": false, "trans_b": true, "padded_from": "63x32x16",
       "fastest": false, "lowest_energy": false}
    ]})J").dump(2);
  // dump() keeps integers and floats apart (65536 vs 65536.0): the bytes, not only the values.
  EXPECT_EQ(report::kernel_bench_json(r, "t", "h").dump(2), expected);
}

TEST(KernelBenchResults, ConvSweepAndInterruptedRunKeepTheirFields) {
  measure::KernelBenchResult r;
  r.kind = "conv";
  r.device = "cpu";
  r.precision = "fp32";
  r.layout = "NHWC";
  r.energy_within = 0.05;
  r.power_limit_watts = 700.0;
  r.sweep_axis = "k";
  r.stopped_before = 4;
  measure::KernelBenchRow c = timed_row(3, "im2col");
  c.pass = "bwd_data";
  c.sweep_value = 5;
  c.conv = {2, 12, 4, 4, 5, 3, 3, 1, 1, 1, 2};
  c.peak_fraction = 0;     // no peak: null
  c.energy_note = "noisy";  // a supported variant whose power was not read
  r.rows = {c};
  const json j = report::kernel_bench_json(r, "t", "h");
  EXPECT_EQ(j["layout"], "NHWC");
  EXPECT_TRUE(j["peak_tflops"].is_null());
  EXPECT_EQ(j["energy_within"], 0.05);
  EXPECT_EQ(j["power_limit_watts"], 700.0);
  EXPECT_EQ(j["status"], "interrupted");
  EXPECT_EQ(j["resume_from"], 5);
  EXPECT_EQ(j["sweep_axis"], "k");
  const json& row = j["rows"][0];
  EXPECT_EQ(row.dump(), json::parse(R"J({"problem": 3, "label": "problem 3", "library": "OpenBLAS",
      "algorithm": "im2col", "supported": true, "status": "", "workspace_bytes": 0, "setup_ms": null,
      "memory_bytes": 12288, "flops": 65536.0, "pass": "bwd_data", "sweep_value": 5, "n": 2, "c": 12, "h": 4,
      "w": 4, "k": 5, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1, "stride_h": 1, "stride_w": 2, "median_ms": 0.25,
      "min_ms": 0.125, "max_ms": 0.5, "repeats": 5, "calls_per_repeat": 40, "tflops": 0.00026,
      "peak_fraction": null, "watts": null, "joules_per_call": null, "energy_seconds": null,
      "energy_note": "noisy", "fastest": true, "lowest_energy": false})J")
                            .dump());
}

// Every field of both tables set (a case holding every kind's fields, which no run writes).
KernelBenchSummary every_kernel_bench_field() {
  KernelBenchCase c;
  c.problem = 7;
  c.label = std::string("m=8 n=8 k=8");
  c.pass = std::string("fwd");
  c.sweep_value = 3;
  c.m = 8;
  c.n = 9;
  c.k = 10;
  c.trans_a = true;
  c.trans_b = false;
  c.padded_from = std::string("7x9x10");
  c.sparsity = 0.9;
  c.nnz = 7;
  c.speedup_vs_dense = NumberFigure::null();
  c.c = 3;
  c.h = 32;
  c.w = 31;
  c.r = 3;
  c.s = 5;
  c.pad_h = 1;
  c.pad_w = 2;
  c.stride_h = 1;
  c.stride_w = 2;
  c.cell = std::string("lstm");
  c.hidden = 256;
  c.batch = 16;
  c.time_steps = 50;
  c.library = std::string("cuDNN");
  c.algorithm = std::string("CUDNN_CONVOLUTION_FWD_ALGO_GEMM");
  c.supported = true;
  c.status = std::string("");
  c.workspace_bytes = 1 << 20;
  c.setup_ms = 1.5;
  c.memory_bytes = int64_t{3} << 30;  // beyond 32 bits
  c.flops = 1.25e12;
  c.median_ms = 0.75;
  c.min_ms = 0.5;
  c.max_ms = 1.0;
  c.repeats = 5;
  c.calls_per_repeat = 100;
  c.tflops = 312.5;
  c.peak_fraction = 0.625;
  c.watts = 650.5;
  c.joules_per_call = 0.49;
  c.energy_seconds = 0.5;
  c.energy_note = std::string("within");
  c.check = std::string("ok");
  c.check_error = 2.5e-6;
  c.check_tolerance = 1e-3;
  c.fastest = true;
  c.lowest_energy = false;
  KernelBenchSummary s;
  s.kind = std::string("conv");
  s.device = std::string("NVIDIA H100 80GB HBM3 (CUDA 12.4, cuDNN 9.1)");
  s.host = std::string("node-a");
  s.time = std::string("2026-11-22T04:43:00Z");
  s.precision = std::string("bf16");
  s.layout = std::string("NHWC");
  s.peak_tflops = 750.25;
  s.peak_method = std::string("cuBLASLt square 8192");
  s.energy_method = std::string("NVML energy counter");
  s.energy_window_seconds = 0.5;
  s.energy_settle_seconds = 0.5;
  s.energy_within = 0.05;
  s.power_limit_watts = 700.0;
  s.checked = true;
  s.source = std::string("DeepBench training set");
  s.status = std::string("interrupted");
  s.resume_from = 12;
  s.sweep_axis = std::string("k");
  KernelBenchCase d = c;
  d.supported = false;
  d.median_ms = NumberFigure();  // absent: an unsupported variant has no timing
  s.rows = std::vector<KernelBenchCase>{c, d};
  s.provenance = testing::sample_provenance("bench");
  s.settings = testing::sample_settings();
  return s;
}

TEST(KernelBenchResults, EveryFieldRoundTripsThroughJsonText) {
  const KernelBenchSummary s = every_kernel_bench_field();
  const json written = kernel_bench_result_json(s);
  testing::expect_every_field(written, "kernels", "bench");
  EXPECT_TRUE(written["rows"][0]["memory_bytes"].is_number_integer());
  EXPECT_TRUE(written["rows"][0]["speedup_vs_dense"].is_null());
  EXPECT_FALSE(written["rows"][1].contains("median_ms"));
  EXPECT_EQ(kernel_bench_result_from_json(json::parse(written.dump(2)), "s.json"), s);
}

TEST(KernelBenchResults, ReaderNamesTheFileAndKeyPath) {
  json j = kernel_bench_result_json(every_kernel_bench_field());
  j["rows"][1]["supported"] = "yes";
  try {
    kernel_bench_result_from_json(j, "s.json");
    FAIL() << "a text flag was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("s.json: \"rows[1].supported\" is not true or false"), std::string::npos)
        << e.what();
  }
  j = kernel_bench_result_json(every_kernel_bench_field());
  j["kind"] = "allreduce";
  EXPECT_THROW(kernel_bench_result_from_json(j, "s.json"), ConfigError);
  j.erase("rows");
  EXPECT_THROW(kernel_bench_result_from_json(j, "s.json"), ConfigError);
}

// summary.json as the first version of `bench gemm` wrote it: no energy_settle_seconds,
// energy_within, power_limit_watts, source, status, resume_from or setup_ms.
const char* kFirstVersionGemm = R"J({
  "checked": false, "device": "cpu (OpenBLAS)", "energy_method": "none", "energy_window_seconds": 0.5,
  "host": "node-a", "kind": "gemm", "layout": null, "peak_method": "OpenBLAS sgemm 512", "peak_tflops": 0.1,
  "precision": "fp32", "sweep_axis": null, "time": "2026-11-27T09:00:00Z",
  "rows": [
    {"algorithm": "cblas_sgemm", "calls_per_repeat": 10, "fastest": true, "flops": 65536.0, "joules_per_call": null,
     "k": 16, "label": "m=64 n=32 k=16 NN", "library": "OpenBLAS", "lowest_energy": false, "m": 64, "max_ms": 0.3,
     "median_ms": 0.25, "memory_bytes": 12288, "min_ms": 0.2, "n": 32, "peak_fraction": 0.002, "problem": 0,
     "repeats": 5, "status": "", "supported": true, "tflops": 0.0002, "trans_a": false, "trans_b": false,
     "watts": null, "workspace_bytes": 0, "energy_seconds": null}
  ]
})J";

TEST(KernelBenchResults, FolderOfTheFirstVersionIsStillReported) {
  TempDir dir;
  const fs::path folder = fs::path(dir.str()) / "old" / "bench" / "gemm-fp32-20261127T090000Z";
  fs::create_directories(folder);
  std::ofstream(folder / "summary.json") << kFirstVersionGemm;
  const std::vector<report::KernelBenchFile> files = report::find_kernel_benches(dir.str());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_FALSE(files[0].s.source.written());
  EXPECT_FALSE(files[0].s.rows.value()[0].setup_ms.written());
  EXPECT_FALSE(files[0].s.provenance.written());
  EXPECT_FALSE(files[0].s.settings.written());
  const report::Table cases = report::kernel_cases_table(files);
  ASSERT_EQ(cases.rows.size(), 1u);
  EXPECT_EQ(cases.rows[0][3].text, "OpenBLAS cblas_sgemm");
  EXPECT_EQ(cases.rows[0][4].text, "0.2500");
  const report::Table summary = report::kernel_summary_table(files);
  ASSERT_EQ(summary.rows.size(), 1u);
}

}  // namespace
}  // namespace cnnscale
