// `bench gemm|conv` on a GPU: every variant cuBLAS, cuBLASLt and cuDNN run for small problems is
// checked against the double-precision host reference in every precision (a transform-based cuDNN
// algorithm beyond the accumulation bound is printed as a finding, the rest must agree), channels-
// last included, and a GEMM's power window reads a plausible figure from NVML.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/cuda/cuda_entry.hpp"
#include "cpu/cli_runner.hpp"

namespace cnnscale::testing {
namespace {

nlohmann::json bench_json(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"bench"};
  full.insert(full.end(), args.begin(), args.end());
  for (const char* a : {"--device", "gpu", "--json", "--quiet", "--no-results", "--repeats", "3"}) full.push_back(a);
  CliResult r = run_cnnscale(full);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

bool transform_algorithm(const std::string& algo) {
  return algo.find("FFT") != std::string::npos || algo.find("WINOGRAD") != std::string::npos;
}

TEST(KernelBenchGpu, GemmVariantsAgreeWithTheReferenceInEveryPrecision) {
  if (cuda_backend_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  for (const char* precision : {"fp32", "tf32", "bf16", "fp16", "int8"}) {
    const nlohmann::json j = bench_json({"gemm", "--shapes", "tests/data/bench/gemm-small.csv", "--precision",
                                         precision, "--check", "--energy-window", "0", "--no-peak"});
    ASSERT_TRUE(j.contains("rows")) << precision;
    int supported = 0;
    for (const auto& row : j["rows"]) {
      if (!row["supported"].get<bool>()) continue;
      ++supported;
      EXPECT_EQ(row["check"], "ok") << precision << ": " << row.dump();
    }
    // Every problem has at least cuBLASLt's heuristic choice (int8: padded to multiples of 4).
    EXPECT_GE(supported, 4) << precision;
    std::printf("[bench gemm %s] %d variant(s) ran and agree\n", precision, supported);
  }
}

TEST(KernelBenchGpu, ConvAlgorithmsAgreeWithTheReference) {
  if (cuda_backend_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  // An odd shape (unequal strides and padding) and a 3x3 one that Winograd and FFT take.
  for (const char* shape : {"9,8,3,2,4,3,2,1,0,1,2", "14,14,16,2,16,3,3,1,1,1,1"}) {
    for (const auto& [precision, layout] :
         {std::pair{"fp32", "nchw"}, {"tf32", "nchw"}, {"bf16", "nhwc"}, {"fp16", "nhwc"}, {"fp16", "nchw"}}) {
      const nlohmann::json j = bench_json({"conv", "--shape", shape, "--precision", precision, "--layout", layout,
                                           "--check", "--energy-window", "0", "--no-peak"});
      ASSERT_TRUE(j.contains("rows")) << shape << " " << precision;
      std::map<std::string, int> agreeing;
      for (const auto& row : j["rows"]) {
        if (!row["supported"].get<bool>()) continue;
        const std::string algo = row["algorithm"];
        if (row["check"] == "ok") {
          ++agreeing[row["pass"]];
        } else if (transform_algorithm(algo)) {
          std::printf("[finding] %s %s %s %s %s: error %.3g > bound %.3g\n", shape, precision, layout,
                      row["pass"].get<std::string>().c_str(), algo.c_str(), row["check_error"].get<double>(),
                      row["check_tolerance"].get<double>());
        } else {
          ADD_FAILURE() << shape << " " << precision << " " << layout << ": " << row.dump();
        }
      }
      for (const char* pass : {"fwd", "bwd_data", "bwd_filter"})
        EXPECT_GE(agreeing[pass], 1) << shape << " " << precision << " " << layout << " " << pass;
    }
  }
}

TEST(KernelBenchGpu, PowerWindowReadsTheBusyGpu) {
  if (cuda_backend_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  if (cuda_device_facts(0).cc_major < 8) GTEST_SKIP() << "no bf16 tensor cores before compute capability 8.0";
  // Two-second windows after a second of settling: the power controller holds the limit over about a
  // second (nvidia-smi's 1 s average stayed within 0.7 % of it on an H200 under the heaviest bf16
  // GEMM), while a half-second window can still hold part of a burst (up to 5 % over on an H100).
  const nlohmann::json j = bench_json(
      {"gemm", "--shape", "4096,4096,4096", "--precision", "bf16", "--energy-settle", "1", "--energy-window", "2"});
  ASSERT_TRUE(j.contains("rows"));
  ASSERT_FALSE(j["power_limit_watts"].is_null());
  const double limit = j["power_limit_watts"].get<double>();
  EXPECT_NE(j["energy_method"].get<std::string>().find("NVML"), std::string::npos) << j["energy_method"];
  EXPECT_GT(j["peak_tflops"].get<double>(), 50.0);  // a bf16 tensor-core GEMM on any datacenter GPU
  for (const auto& row : j["rows"]) {
    if (!row["supported"].get<bool>()) continue;
    ASSERT_FALSE(row["watts"].is_null()) << row.dump();
    // Above idle, and at most the enforced limit once the power controller has settled: the counter
    // reads energy to the millijoule over two seconds, so 2 % covers its refresh jitter and the
    // controller's residual overshoot; a window over the burst after idle (or a wrong unit) lands outside.
    EXPECT_GT(row["watts"].get<double>(), 50.0) << row.dump();
    EXPECT_LE(row["watts"].get<double>(), 1.02 * limit) << row.dump();
    EXPECT_GE(row["energy_seconds"].get<double>(), 2.0) << row.dump();
    EXPECT_NEAR(row["joules_per_call"].get<double>(),
                row["watts"].get<double>() * row["median_ms"].get<double>() * 1e-3, 1e-9);
  }
}

TEST(KernelBenchGpu, SparseVariantsAgreeWithTheReferenceAndFaceTheDenseGemm) {
  if (cuda_backend_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  // SpMV (one column) and SpMM, odd sizes, 90 % and 99 % zeros.
  const nlohmann::json j = bench_json({"spmm", "--shape", "301,1,517,0.9", "--shape", "301,17,517,0.99", "--check",
                                       "--energy-window", "0", "--no-peak"});
  ASSERT_TRUE(j.contains("rows"));
  std::map<int, int> sparse_ok, dense_ok;
  for (const auto& row : j["rows"]) {
    if (!row["supported"].get<bool>()) continue;
    EXPECT_EQ(row["check"], "ok") << row.dump();
    if (row["library"] == "cuSPARSE") {
      ++sparse_ok[row["problem"].get<int>()];
      EXPECT_GT(row["speedup_vs_dense"].get<double>(), 0.0) << row.dump();
    } else {
      ++dense_ok[row["problem"].get<int>()];
    }
  }
  for (int p : {0, 1}) {
    EXPECT_GE(sparse_ok[p], 1) << p;
    EXPECT_EQ(dense_ok[p], 1) << p;
  }
}

TEST(KernelBenchGpu, RnnAlgorithmsAgreeWithTheReferenceInEveryFormat) {
  if (cuda_backend_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  // Every cell, an odd batch and sequence length; both passes' output is y (the training pass' forward, before its
  // backward).
  for (const char* precision : {"fp32", "tf32", "bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    const nlohmann::json j =
        bench_json({"rnn", "--shape", "40,3,7,vanilla", "--shape", "40,3,7,lstm", "--shape", "40,3,7,gru",
                    "--precision", precision, "--check", "--energy-window", "0", "--no-peak"});
    ASSERT_TRUE(j.contains("rows"));
    std::map<std::pair<int, std::string>, int> ok;
    for (const auto& row : j["rows"]) {
      if (!row["supported"].get<bool>()) continue;
      EXPECT_EQ(row["check"], "ok") << row.dump();
      EXPECT_GT(row["median_ms"].get<double>(), 0.0);
      ++ok[{row["problem"].get<int>(), row["pass"].get<std::string>()}];
    }
    for (int p : {0, 1, 2})
      for (const char* pass : {"inference", "training"}) EXPECT_GE((ok[{p, pass}]), 1) << p << " " << pass;
  }
}

TEST(TimeGpu, HostToDeviceTransferOfTheBatchAndLayerMemory) {
  if (cuda_backend_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  CliResult r = run_cnnscale({"time", "lenet", "--device", "gpu", "--batch", "64", "--iterations", "5", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["h2d_bytes"], 64 * 1 * 28 * 28 * 4 + 64 * 4);  // f32 images and i32 labels
  EXPECT_GT(j["h2d_ms"].get<double>(), 0.0);
  for (const auto& l : j["layers"]) {
    if (l["name"] == "conv1") {
      EXPECT_EQ(l["activation_bytes"], 20 * 24 * 24 * 64 * 4) << l.dump();
    }
  }
}

}  // namespace
}  // namespace cnnscale::testing
