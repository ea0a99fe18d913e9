// `cnnscale calibrate` on the CPU, on a LeNet briefly trained on Fashion-MNIST: the table names every
// quantised layer's input in network order with thresholds inside what was seen, weight scales that
// are the checkpoint's own per-channel maxima over 127, an fp32 accuracy equal to train's own
// evaluation of the same weights, a simulated int8 accuracy near it; bad input is one line, exit 2,
// no file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/recorded_settings_util.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/command_settings.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

// Its own folder: a test's TempDir is named after the test, and would be the same folder.
struct Trained {
  struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("cnnscale_calibrate_lenet_" + std::to_string(::getpid()));
    Dir() {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    ~Dir() { std::filesystem::remove_all(path); }
    std::string str() const { return path.string(); }
  } dir;
  std::string checkpoint;
  double test_top1 = 0;  // train's own evaluation of the final weights on the first 1000 test samples
};

// 100 iterations of batch 64: about 80 % top-1, far from both chance (10 %) and saturation.
const Trained& trained() {
  static Trained t;
  static const bool done = [] {
    CliResult r =
        run_cnnscale({"train", "--net", "lenet", "--data", "fashion-mnist", "--batch", "64", "--iterations", "100",
                      "--test-samples", "1000", "--checkpoint-dir", t.dir.str(), "--no-results", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code == 0) t.test_top1 = nlohmann::json::parse(r.out)["summary"]["test_top1"].get<double>();
    for (const auto& e : fs::directory_iterator(t.dir.str()))
      if (e.path().extension() == ".h5") t.checkpoint = e.path().string();
    return true;
  }();
  (void)done;
  return t;
}

nlohmann::json calibrate(const std::string& out, const std::string& test_samples, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"calibrate",  "--checkpoint", trained().checkpoint,
                                   "--samples",  "300",          "--test-samples",
                                   test_samples, "--out",        out};
  args.insert(args.end(), extra.begin(), extra.end());
  CliResult r = run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

TEST(CalibrateCli, TableCoversEveryQuantisedLayerWithTheCheckpointsScales) {
  ASSERT_FALSE(trained().checkpoint.empty());
  TempDir dir;
  const nlohmann::json t = calibrate(dir.file("table.json"), "1000");
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["format"], "cnnscale-calibration-1");
  EXPECT_EQ(t["method"], "percentile");
  EXPECT_EQ(t["percentile"], 99.99);
  EXPECT_EQ(t["samples"], 300);
  EXPECT_EQ(t["data"], "fashion-mnist/train");
  // LeNet's convolutions and fully connected layers, each with the tensor it reads.
  const std::vector<std::pair<std::string, std::string>> want = {
      {"conv1", "data"}, {"conv2", "pool1"}, {"ip1", "pool2"}, {"ip2", "relu1"}};
  ASSERT_EQ(t["layers"].size(), want.size()) << t.dump(1);
  const CheckpointContents ck = read_checkpoint(trained().checkpoint);
  std::map<std::string, const CheckpointArray*> weights;
  for (const CheckpointArray& a : ck.weights) weights[a.name] = &a;
  for (size_t i = 0; i < want.size(); ++i) {
    const nlohmann::json& l = t["layers"][i];
    SCOPED_TRACE(l["layer"].get<std::string>());
    EXPECT_EQ(l["layer"], want[i].first);
    EXPECT_EQ(l["input"], want[i].second);
    const double max = l["input_max_abs"], threshold = l["input_threshold"];
    EXPECT_GT(threshold, 0);
    EXPECT_LE(threshold, max);
    EXPECT_DOUBLE_EQ(l["input_scale"].get<double>(), threshold / 127);
    // Each output channel's scale is its row's largest |w| over 127, from the checkpoint's values.
    const CheckpointArray& w = *weights.at(want[i].first + "/weight");
    const size_t channels = static_cast<size_t>(w.shape.at(0)), per = w.values.size() / channels;
    ASSERT_EQ(l["weight_scales"].size(), channels);
    for (size_t c = 0; c < channels; ++c) {
      float m = 0;
      for (size_t k = 0; k < per; ++k) m = std::max(m, std::fabs(w.values[c * per + k]));
      EXPECT_EQ(l["weight_scales"][c].get<float>(), m / 127.0f) << "channel " << c;
    }
  }
  // fp32: the very predictions train's evaluation made of these weights (a count of hits over the
  // same 1000 samples, so exactly equal). int8 simulated: a wrong scale or channel order drops a
  // LeNet towards chance (10 %); quantisation noise itself moves a few predictions.
  const nlohmann::json& acc = t["accuracy"];
  EXPECT_EQ(acc["samples"], 1000);
  EXPECT_DOUBLE_EQ(acc["fp32_top1"].get<double>(), trained().test_top1);
  EXPECT_GT(acc["int8_top1"].get<double>(), acc["fp32_top1"].get<double>() - 0.05);
  EXPECT_NEAR(acc["int8_cost_points"].get<double>(),
              100 * (acc["fp32_top1"].get<double>() - acc["int8_top1"].get<double>()), 1e-9);
}

// The table executed: LeNet's two convolutions as the CPU's int8 kernels (int32 sums of the same
// integers), its fully connected layers in fp32. Its top-1 is near fp32's (a wrong scale or channel
// order drops towards chance, 10 %). infer runs the same network from the same table, says which
// layers ran in int8, and refuses int8 without a table and a table without int8, before any work.
TEST(CalibrateCli, TheTableExecutedAsInt8Convolutions) {
  ASSERT_FALSE(trained().checkpoint.empty());
  TempDir dir;
  const std::string table = dir.file("table.json");
  const nlohmann::json t = calibrate(table, "1000");
  const nlohmann::json& acc = t["accuracy"];
  ASSERT_TRUE(acc.contains("int8_executed_top1")) << acc.dump(1);
  EXPECT_GT(acc["int8_executed_top1"].get<double>(), acc["fp32_top1"].get<double>() - 0.05);
  EXPECT_EQ(acc["int8_executed"]["device"], "cpu");
  EXPECT_EQ(acc["int8_executed"]["between_layers"], "fp32");
  // conv1 reads the 1-channel image: it keeps fp32 (int8_spec.hpp's kInt8MinInputChannels).
  EXPECT_EQ(acc["int8_executed"]["int8_layers"], nlohmann::json::array({"conv2", "ip1", "ip2"}));
  EXPECT_EQ(acc["int8_executed"]["int8_outputs"], nlohmann::json::array());  // conv2's reader is a pooling layer

  CliResult r =
      run_cnnscale({"infer", "--checkpoint", trained().checkpoint, "--precision", "int8", "--calibration", table,
                    "--batch", "2", "--seconds", "0.2", "--latency-seconds", "0.05", "--warmup", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "int8");
  EXPECT_EQ(j["int8"]["int8_layers"], nlohmann::json::array({"conv2", "ip1", "ip2"}));
  EXPECT_EQ(j["int8"]["kept"], nlohmann::json::array({"conv1"}));
  EXPECT_EQ(j["int8"]["calibration"], table);

  CliResult no_table = run_cnnscale({"infer", "--net", "lenet", "--precision", "int8", "--batch", "1"});
  EXPECT_EQ(no_table.exit_code, 2);
  EXPECT_NE(no_table.err.find("--calibration"), std::string::npos) << no_table.err;
  CliResult no_int8 = run_cnnscale({"infer", "--net", "lenet", "--calibration", table, "--batch", "1"});
  EXPECT_EQ(no_int8.exit_code, 2);
  EXPECT_NE(no_int8.err.find("--precision int8"), std::string::npos) << no_int8.err;
  const std::string other = dir.file("other.json");
  std::ofstream(other) << R"({"layers": [{"layer": "res2_1_conv1", "input_scale": 0.1}]})";
  CliResult wrong =
      run_cnnscale({"infer", "--net", "lenet", "--precision", "int8", "--calibration", other, "--batch", "1"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("res2_1_conv1"), std::string::npos) << wrong.err;
}

// --calibration synthetic: a table measured on the run's own input (speed only), so that int8 runs of
// networks without a dataset here (ImageNet's) are measured with in-range scales: the same layers run
// in int8 as with a real table.
TEST(CalibrateCli, InferMeasuresASyntheticTableOnItsOwnInput) {
  CliResult r =
      run_cnnscale({"infer", "--net", "lenet", "--precision", "int8", "--calibration", "synthetic", "--batch", "2",
                    "--seconds", "0.2", "--latency-seconds", "0.05", "--warmup", "1", "--fill", "gaussian", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "int8");
  EXPECT_EQ(j["int8"]["calibration"], "synthetic");
  EXPECT_EQ(j["int8"]["int8_layers"], nlohmann::json::array({"conv2", "ip1", "ip2"}));
  EXPECT_GT(j["batches"][0]["images_per_s"].get<double>(), 0.0);
}

TEST(CalibrateCli, MaxKeepsTheWholeRangeTheOthersClipInsideIt) {
  ASSERT_FALSE(trained().checkpoint.empty());
  TempDir dir;
  const nlohmann::json m = calibrate(dir.file("max.json"), "0", {"--method", "max"});
  ASSERT_TRUE(m.is_object());
  EXPECT_FALSE(m.contains("accuracy"));  // no test samples: no accuracy
  EXPECT_TRUE(m["percentile"].is_null());
  for (const nlohmann::json& l : m["layers"]) EXPECT_EQ(l["input_threshold"], l["input_max_abs"]) << l.dump();
  const nlohmann::json p = calibrate(dir.file("p.json"), "0", {"--method", "percentile", "--percentile", "99.9"});
  EXPECT_EQ(p["percentile"], 99.9);
  const nlohmann::json e = calibrate(dir.file("e.json"), "0", {"--method", "entropy"});
  EXPECT_EQ(e["method"], "entropy");
  for (const nlohmann::json* t : {&p, &e})
    for (const nlohmann::json& l : (*t)["layers"]) {
      EXPECT_GT(l["input_threshold"], 0) << l.dump();
      EXPECT_LE(l["input_threshold"], l["input_max_abs"]) << l.dump();
    }
}

// --results saves each table for `report`, whose int8 accuracy table has a row per network, test set,
// method and calibration sample count, with the files' own figures in percent and their difference.
TEST(CalibrateCli, SavedTablesMakeTheReportsInt8AccuracyTable) {
  ASSERT_FALSE(trained().checkpoint.empty());
  TempDir dir;
  size_t saved = 0;
  for (const char* method : {"percentile", "max"}) {
    CliResult r = run_cnnscale({"calibrate", "--checkpoint", trained().checkpoint, "--samples", "300", "--test-samples",
                                "1000", "--method", method, "--results", dir.str(), "--experiment", "e"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(dir.str()) / "e" / "calibration")) files.push_back(e.path());
    ASSERT_EQ(files.size(), ++saved);  // one more file, none replaced
  }
  CliResult rep = run_cnnscale({"report", (fs::path(dir.str()) / "e").string()});  // with plots: none to draw
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("2 calibration file(s)"), std::string::npos) << rep.out;
  const auto rows = read_csv((fs::path(dir.str()) / "e" / "report" / "int8_accuracy.csv").string());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("method"), "max");
  EXPECT_EQ(rows[1].at("method"), "percentile 99.99");
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("net"), "lenet");
    EXPECT_EQ(row.at("test_set"), "fashion-mnist/test[:1000]");
    EXPECT_EQ(row.at("samples"), "300");
    EXPECT_DOUBLE_EQ(std::stod(row.at("fp32_top1_mean")), 100 * trained().test_top1);
    EXPECT_NEAR(std::stod(row.at("int8_cost_points_mean")),
                std::stod(row.at("fp32_top1_mean")) - std::stod(row.at("int8_top1_mean")), 1e-9);
    // The table executed as int8 kernels, on this (CPU) run's device.
    EXPECT_EQ(row.at("executed_on"), "cpu");
    EXPECT_GT(std::stod(row.at("int8_executed_top1_mean")), std::stod(row.at("fp32_top1_mean")) - 5);
    EXPECT_NEAR(std::stod(row.at("int8_executed_cost_points_mean")),
                std::stod(row.at("fp32_top1_mean")) - std::stod(row.at("int8_executed_top1_mean")), 1e-9);
  }
}

// The table (--out's file and the saved copy) records every entry of calibrate's table with the value
// it ran with, and where it came from.
TEST(CalibrateCli, TheTableRecordsEverySettingAndItsProvenance) {
  ASSERT_FALSE(trained().checkpoint.empty());
  TempDir dir;
  const std::string out = dir.file("t.json");
  const std::vector<std::string> args = {"calibrate", "--checkpoint",   trained().checkpoint, "--samples", "200",
                                         "--batch",   "50",             "--test-samples",     "0",         "--method",
                                         "max",       "--out",          out,                  "--results", dir.str()};
  const CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json given = {{"checkpoint", trained().checkpoint}, {"samples", 200}, {"batch", 50},
                                {"test_samples", 0}, {"method", "max"}};
  std::ifstream in(out);
  const nlohmann::json table = nlohmann::json::parse(in);
  expect_settings_recorded(calibrate_settings(), table.at("settings"), given);
  expect_provenance_of(table.at("provenance"), args);
  for (const auto& e : fs::recursive_directory_iterator(dir.str()))
    if (e.is_regular_file() && e.path().parent_path().filename() == "calibration") {
      std::ifstream saved(e.path());
      const nlohmann::json s = nlohmann::json::parse(saved);
      expect_settings_recorded(calibrate_settings(), s.at("settings"), given);
      EXPECT_EQ(s.at("provenance"), table.at("provenance"));
    }
}

TEST(CalibrateCli, BadInputIsOneLineAndExitTwoAndWritesNothing) {
  ASSERT_FALSE(trained().checkpoint.empty());
  TempDir dir;
  const std::string out = dir.file("t.json");
  const std::string& ck = trained().checkpoint;
  expect_usage_error({"calibrate", "--checkpoint", ck, "--data", "synthetic", "--out", out}, {"real data"});
  expect_usage_error({"calibrate", "--checkpoint", ck, "--method", "kl", "--out", out}, {"'kl'", "entropy"});
  expect_usage_error({"calibrate", "--checkpoint", ck, "--samples", "0", "--out", out}, {"--samples"});
  expect_usage_error({"calibrate", "--checkpoint", ck, "--samples", "70000", "--out", out}, {"70000", "60000"});
  expect_usage_error({"calibrate", "--checkpoint", ck, "--net", "resnet34", "--out", out},
                     {"resnet34 takes inputs of shape", "fashion-mnist/train"});
  expect_usage_error({"calibrate", "--checkpoint", ck, "--out", "/nonexistent/t.json"}, {"/nonexistent"});
  expect_usage_error({"calibrate", "--checkpoint", ck, "--no-results"}, {"--out", "--results"});
  expect_usage_error({"calibrate", "--checkpoint", "/nonexistent.h5", "--out", out}, {"/nonexistent.h5"});
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace cnnscale::testing
