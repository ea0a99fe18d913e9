// `cnnscale calibrate` results: the calibration table (the file --out writes, which infer --calibration
// reads) and its accuracy cost as a typed struct whose schema table (calibration_results.cpp) writes
// it and reads it back for the report. Saved under ROOT/<experiment>/calibration/ with its time.
#pragma once
#include <string>
#include <vector>

#include "io/provenance_field.hpp"
#include "io/result_schema.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

inline constexpr const char* kCalibrationFormat = "cnnscale-calibration-1";

// One quantised layer: the tensor it reads, that tensor's threshold and scale, its weights' scales.
struct CalibrationLayer {
  TextFigure layer, type, input;
  NumberFigure input_max_abs, input_threshold, input_scale;
  NumberListFigure weight_scales;
  static std::span<const SchemaField<CalibrationLayer>> fields();
  bool operator==(const CalibrationLayer&) const = default;
};

// The table executed as int8 kernels.
struct CalibrationExecuted {
  TextFigure device, between_layers;
  TextListFigure int8_layers, int8_outputs;
  static std::span<const SchemaField<CalibrationExecuted>> fields();
  bool operator==(const CalibrationExecuted&) const = default;
};

// With a test set: top-1 in fp32, with int8 simulated and executed.
struct CalibrationAccuracy {
  TextFigure test_set;
  CountFigure samples;
  NumberFigure fp32_top1, int8_top1, int8_cost_points;
  TextFigure int8_arithmetic;
  NumberFigure int8_executed_top1;
  Figure<CalibrationExecuted> int8_executed;
  static std::span<const SchemaField<CalibrationAccuracy>> fields();
  bool operator==(const CalibrationAccuracy&) const = default;
};

struct CalibrationResult {
  TextFigure format, time, net, checkpoint, data, method;
  NumberFigure percentile;
  CountFigure folded_batch_norms;
  TextFigure device;
  CountFigure samples;
  Figure<std::vector<CalibrationLayer>> layers;
  Figure<CalibrationAccuracy> accuracy;
  Figure<Provenance> provenance;  // absent in files written before it was recorded
  Figure<SettingValues> settings;  // calibrate's table (experiment/command_settings.hpp); absent likewise
  static std::span<const SchemaField<CalibrationResult>> fields();
  bool operator==(const CalibrationResult&) const = default;
};

nlohmann::json calibration_result_json(const CalibrationResult& r);
// ConfigError naming `file` and the key path for a field of the wrong type or a required one missing.
CalibrationResult calibration_result_from_json(const nlohmann::json& j, const std::string& file);

}  // namespace cnnscale
