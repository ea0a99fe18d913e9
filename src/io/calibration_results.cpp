// The schema tables of `cnnscale calibrate` results (see calibration_results.hpp), in
// results/README.md's order.
#include "io/calibration_results.hpp"

namespace cnnscale {

using namespace schema_presence;

std::span<const SchemaField<CalibrationLayer>> CalibrationLayer::fields() {
  using L = CalibrationLayer;
  static const std::vector<SchemaField<L>> f = {
      field<&L::layer>("layer", "", R, "the convolution or fully connected layer"),
      field<&L::type>("type", "", R, "its type"),
      field<&L::input>("input", "", R, "the tensor it reads"),
      field<&L::input_max_abs>("input_max_abs", "", R, "the largest |x| of that tensor over the samples"),
      field<&L::input_threshold>("input_threshold", "", R, "the clipping threshold the method chose"),
      field<&L::input_scale>("input_scale", "", R, "threshold / 127: what one int8 step stands for"),
      field<&L::weight_scales>("weight_scales", "", R, "per output channel: the weights' scale"),
  };
  return f;
}

std::span<const SchemaField<CalibrationExecuted>> CalibrationExecuted::fields() {
  using E = CalibrationExecuted;
  static const std::vector<SchemaField<E>> f = {
      field<&E::device>("device", "", R, "the device the int8 kernels ran on"),
      field<&E::between_layers>("between_layers", "", R, "the other layers' precision (bf16 on a GPU, fp32 on the CPU)"),
      field<&E::int8_layers>("int8_layers", "", R, "layers that ran as int8 kernels"),
      field<&E::int8_outputs>("int8_outputs", "", R, "int8 convolutions whose outputs stayed int8"),
  };
  return f;
}

std::span<const SchemaField<CalibrationAccuracy>> CalibrationAccuracy::fields() {
  using A = CalibrationAccuracy;
  static const std::vector<SchemaField<A>> f = {
      field<&A::test_set>("test_set", "", R, "the test set"),
      field<&A::samples>("samples", "", R, "test samples scored"),
      field<&A::fp32_top1>("fp32_top1", "", R, "top-1 in fp32 (a fraction)"),
      field<&A::int8_top1>("int8_top1", "", R, "top-1 with int8 simulated"),
      field<&A::int8_cost_points>("int8_cost_points", "", R, "100 (fp32_top1 - int8_top1)"),
      field<&A::int8_arithmetic>("int8_arithmetic", "", R, "how int8 was simulated"),
      field<&A::int8_executed_top1>("int8_executed_top1", "", O, "top-1 with the table run as int8 kernels"),
      field<&A::int8_executed>("int8_executed", "", O, "how it ran"),
  };
  return f;
}

std::span<const SchemaField<CalibrationResult>> CalibrationResult::fields() {
  using C = CalibrationResult;
  static const std::vector<SchemaField<C>> f = {
      field<&C::format>("format", "", R, "cnnscale-calibration-1"),
      field<&C::time>("time", "", O, "saved results only: UTC end"),
      field<&C::net>("net", "", R, "the network"),
      field<&C::checkpoint>("checkpoint", "", R, "the checkpoint calibrated"),
      field<&C::data>("data", "", R, "the data set the calibration samples came from"),
      field<&C::method>("method", "", R, "percentile, entropy or max"),
      field<&C::percentile>("percentile", "", R, "--percentile (null for other methods)"),
      field<&C::folded_batch_norms>("folded_batch_norms", "", R, "batch norms folded into convolutions"),
      field<&C::device>("device", "", R, "the device calibration ran on"),
      field<&C::samples>("samples", "", R, "calibration samples"),
      field<&C::layers>("layers", "", R, "one per quantised layer, in network order"),
      field<&C::accuracy>("accuracy", "", O, "with a test set: the accuracy int8 costs"),
      field<&C::provenance>("provenance", "", O, "the build, command line, start and end time and hosts"),
      field<&C::settings>("settings", "", O, "every setting of the command's table as it ran, {name: value} (absent in older files)"),
  };
  return f;
}

nlohmann::json calibration_result_json(const CalibrationResult& r) { return to_json_object(r); }

CalibrationResult calibration_result_from_json(const nlohmann::json& j, const std::string& file) {
  return from_json_object<CalibrationResult>(j, file);
}

}  // namespace cnnscale
