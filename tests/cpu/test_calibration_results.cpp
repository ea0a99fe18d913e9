// The calibration results schema (io/calibration_results.hpp): every field round-trips through JSON
// text (null kept apart from absent, each float weight scale exactly), a wrong type is refused with
// its key path, and a file written before int8 execution was recorded is still read by the report.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/schema_test_util.hpp"
#include "experiment/report_infer.hpp"
#include "io/calibration_results.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

CalibrationLayer layer(const std::string& name, float scale) {
  CalibrationLayer l;
  l.layer = name;
  l.type = std::string("Convolution");
  l.input = name + "_in";
  l.input_max_abs = 6.5;
  l.input_threshold = 4.25;
  l.input_scale = 4.25 / 127.0;
  // Written from floats: a float's double is written and read back exactly.
  l.weight_scales = std::vector<double>{static_cast<double>(scale), static_cast<double>(scale / 3.0f)};
  return l;
}

CalibrationResult every_calibration_field() {
  CalibrationResult r;
  r.format = std::string(kCalibrationFormat);
  r.time = std::string("2026-11-22T04:43:00Z");
  r.net = std::string("lenet");
  r.checkpoint = std::string("ckpt/checkpoint-000009370.h5");
  r.data = std::string("mnist train");
  r.method = std::string("percentile");
  r.percentile = 99.99;
  r.folded_batch_norms = 0;
  r.device = std::string("cpu");
  r.samples = 512;
  r.layers = std::vector<CalibrationLayer>{layer("conv1", 0.0123f), layer("ip2", 0.1f)};
  CalibrationExecuted e;
  e.device = std::string("cpu");
  e.between_layers = std::string("fp32");
  e.int8_layers = std::vector<std::string>{"conv1"};
  e.int8_outputs = std::vector<std::string>{};
  CalibrationAccuracy a;
  a.test_set = std::string("mnist test");
  a.samples = 10000;
  a.fp32_top1 = 0.9912;
  a.int8_top1 = 0.9907;
  a.int8_cost_points = 100.0 * (0.9912 - 0.9907);
  a.int8_arithmetic = std::string("simulated: quantised inputs and weights, products summed in fp32");
  a.int8_executed_top1 = 0.9905;
  a.int8_executed = e;
  r.accuracy = a;
  r.provenance = testing::sample_provenance("calibrate");
  r.settings = testing::sample_settings();
  return r;
}

TEST(CalibrationResults, EveryFieldRoundTripsThroughJsonText) {
  const CalibrationResult r = every_calibration_field();
  const json written = calibration_result_json(r);
  testing::expect_every_field(written, "calibration", "calibration");
  EXPECT_TRUE(written["samples"].is_number_integer());
  EXPECT_TRUE(written["accuracy"]["int8_executed"]["int8_outputs"].is_array());
  EXPECT_EQ(calibration_result_from_json(json::parse(written.dump(2)), "c.json"), r);
  // The method without a percentile: null, read back as null.
  CalibrationResult entropy = r;
  entropy.method = std::string("entropy");
  entropy.percentile = NumberFigure::null();
  const json e = calibration_result_json(entropy);
  EXPECT_TRUE(e["percentile"].is_null());
  EXPECT_EQ(calibration_result_from_json(e, "c.json"), entropy);
}

TEST(CalibrationResults, ReaderNamesTheFileAndKeyPath) {
  json j = calibration_result_json(every_calibration_field());
  j["layers"][1]["weight_scales"][0] = "big";
  try {
    calibration_result_from_json(j, "c.json");
    FAIL() << "a text weight scale was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("c.json: \"layers[1].weight_scales[0]\" is not a number"), std::string::npos)
        << e.what();
  }
  j = calibration_result_json(every_calibration_field());
  j["accuracy"].erase("fp32_top1");
  try {
    calibration_result_from_json(j, "c.json");
    FAIL() << "an accuracy without fp32_top1 was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("c.json: missing \"accuracy.fp32_top1\""), std::string::npos) << e.what();
  }
}

// A saved table as calibrate wrote it before int8 execution was recorded.
const char* kBeforeInt8Execution = R"({
  "format": "cnnscale-calibration-1", "time": "2026-11-20T10:00:00Z", "net": "lenet", "checkpoint": "c.h5",
  "data": "mnist train", "method": "percentile", "percentile": 99.99, "folded_batch_norms": 0, "device": "cpu",
  "samples": 256,
  "layers": [{"layer": "conv1", "type": "Convolution", "input": "data", "input_max_abs": 1.0,
              "input_threshold": 0.99, "input_scale": 0.0077952755905511815, "weight_scales": [0.01, 0.02]}],
  "accuracy": {"test_set": "mnist test", "samples": 1000, "fp32_top1": 0.99, "int8_top1": 0.985,
               "int8_cost_points": 0.5, "int8_arithmetic": "simulated"}
})";

TEST(CalibrationResults, FileWrittenBeforeInt8ExecutionIsStillReported) {
  TempDir dir;
  const fs::path folder = fs::path(dir.str()) / "calibrate" / "calibration";
  fs::create_directories(folder);
  std::ofstream(folder / "lenet-percentile-20261120T100000Z.json") << kBeforeInt8Execution;
  const std::vector<report::CalibrationFile> files = report::find_calibrations(dir.str());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].net, "lenet");
  EXPECT_EQ(files[0].test_samples, 1000);
  EXPECT_DOUBLE_EQ(files[0].int8_top1, 0.985);
  EXPECT_TRUE(std::isnan(files[0].int8_executed_top1));
  EXPECT_EQ(files[0].executed_on, "");
  EXPECT_FALSE(files[0].result.accuracy.value().int8_executed.written());
  EXPECT_FALSE(files[0].result.provenance.written());
  EXPECT_FALSE(files[0].result.settings.written());
  const report::Table t = report::int8_accuracy_table(files);
  ASSERT_EQ(t.rows.size(), 1u);
}

}  // namespace
}  // namespace cnnscale
