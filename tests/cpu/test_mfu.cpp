// --mfu: the square-matmul peak is measured on the run's device after training and the model FLOPs
// utilisation written beside it in --json, summary.json and run.h5 (mfu = gflops / 1000 / peak);
// without the flag neither figure is written. measure_matmul_peak itself times non-zero matmuls.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "io/results_writer.hpp"
#include "measure/matmul_peak.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

CliResult train_mfu(const std::string& root, const std::string& run_id, std::vector<std::string> extra = {}) {
  return short_lenet_train(root, "m", run_id, extra);
}

TEST(Mfu, MeasuredPeakAndUtilisationAreWrittenEverywhere) {
  TempDir dir;
  CliResult r = train_mfu(dir.str(), "mfu", {"--mfu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)["summary"];
  const double peak = j["matmul_peak_tflops"].get<double>(), gflops = j["gflops"].get<double>();
  EXPECT_GT(peak, 0.0);
  EXPECT_GT(gflops, 0.0);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), gflops / 1e3 / peak);
  EXPECT_NE(r.err.find("MFU: "), std::string::npos) << r.err;

  const fs::path run = fs::path(dir.str()) / "m" / "mfu";
  std::ifstream in(run / "summary.json");
  const auto file = nlohmann::json::parse(in);
  EXPECT_EQ(file["summary"]["matmul_peak_tflops"].get<double>(), peak);
  EXPECT_NE(file["methods"]["matmul_peak_tflops"].get<std::string>().find("1024x1024x1024 f32"), std::string::npos)
      << file["methods"].dump();
  const RunResults res = read_run_results(run.string());
  EXPECT_EQ(res.summary.matmul_peak_tflops.value_or(-1), peak);
  EXPECT_EQ(res.summary.mfu.value_or(-1), j["mfu"].get<double>());
}

TEST(Mfu, NotMeasuredUnlessAsked) {
  TempDir dir;
  CliResult r = train_mfu(dir.str(), "plain");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)["summary"];
  EXPECT_FALSE(j.contains("matmul_peak_tflops")) << j.dump();
  EXPECT_FALSE(j.contains("mfu")) << j.dump();
  EXPECT_EQ(r.err.find("MFU"), std::string::npos) << r.err;
}

TEST(Mfu, PeakWindowsHoldWholeCallsOfTheAskedSize) {
  auto backend = make_backend("cpu");
  const MatmulPeak p = measure_matmul_peak(*backend, DType::F32, 128, 0.01, 3);
  EXPECT_EQ(p.n, 128);
  EXPECT_EQ(p.windows, 3);
  EXPECT_GE(p.calls_per_window, 2);
  EXPECT_GT(p.tflops, 0.0);
  EXPECT_EQ(matmul_peak_size(backend->device()), 1024);
}

}  // namespace
}  // namespace cnnscale::testing
