// check_calibrate_request, run_calibration and save_calibration (calibration_run.hpp).
#include "experiment/calibration_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "core/error.hpp"
#include "data/datasets.hpp"
#include "experiment/report_infer.hpp"
#include "infer/inference_engine.hpp"
#include "io/atomic_file.hpp"
#include "io/results_writer.hpp"
#include "net/net.hpp"

namespace cnnscale {

void check_calibrate_request(const CalibrateRequest& r) {
  infer::calibration_method_from_name(r.method);
  if (!(r.percentile > 0 && r.percentile <= 100))
    throw_config("--percentile must be in (0, 100], got {}", r.percentile);
  if (r.samples < 1) throw_config("--samples must be >= 1, got {}", r.samples);
  if (r.batch < 1) throw_config("--batch must be >= 1, got {}", r.batch);
  if (r.test_samples < -1)
    throw_config("--test-samples: -1 (the whole test set), 0 (none) or N, got {}", r.test_samples);
  if (dataset_info(r.data).synthetic)
    throw_config("--data {}: calibration needs real data (the values the network will see)", r.data);
  if (r.out.empty() && r.results_root.empty())
    throw_config("--out FILE or --results DIR: the calibration table has to be written somewhere");
  if (!r.results_root.empty()) {  // checked now, not after the passes
    check_results_name("--experiment", r.experiment);
    prepare_writable_dir(report::calibration_results_dir(r.results_root, r.experiment));
  }
  if (!r.out.empty()) {
    const std::filesystem::path parent = std::filesystem::absolute(r.out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec)) throw_config("--out {}: no folder {}", r.out, parent.string());
  }
}

CalibrationRun run_calibration(const CalibrateRequest& r, Job& job) {
  const infer::CalibrationMethod method = infer::calibration_method_from_name(r.method);
  const NetSpec spec = infer::network_to_run(r.net, r.checkpoint);
  DatasetRequest request;
  request.name = r.data;
  request.data_dir = r.data_dir;
  request.test_samples = r.test_samples;
  const OpenedDatasets data = open_datasets(request, spec.input_shape(), spec.classes(), r.batch);
  // What the passes would only find out at their end, or not at all, checked before them.
  const Shape sample = data.train->sample_shape();
  if (sample.dims() != spec.input_shape())
    throw_config("{} takes inputs of shape {}, but {} has samples of shape {}", spec.name(),
                 Shape(spec.input_shape()).to_string(), data.train->name(), sample.to_string());
  if (data.train->classes() > spec.classes())
    throw_config("{} has {} classes, {} only {} outputs", data.train->name(), data.train->classes(), spec.name(),
                 spec.classes());
  if (r.samples > data.train->size())
    throw_config("--samples {}: {} has {} samples", r.samples, data.train->name(), data.train->size());
  if (data.test &&
      std::none_of(spec.layers().begin(), spec.layers().end(), [](const LayerInfo& l) { return l.type == "Accuracy"; }))
    throw_config("{} has no Accuracy layer to score the test set with (or give --test-samples 0)", spec.name());

  Backend& backend = job.open_backend(r.device);
  infer::EngineOptions eo;
  eo.checkpoint = r.checkpoint;
  // Every quantised layer's input as the unfused network computes it, in its own pass.
  eo.fuse_epilogues = false;
  auto engine = std::make_unique<infer::InferenceEngine>(spec, backend, eo);
  infer::CalibrationOptions co;
  co.method = method;
  co.percentile = r.percentile;
  co.batch = r.batch;
  CalibrationRun run;
  run.table = infer::calibrate(*engine, *data.train, r.samples, co);
  run.train_set = data.train->name();

  CalibrationResult& out = run.result;
  out.format = std::string(kCalibrationFormat);
  out.net = spec.name();
  out.checkpoint = r.checkpoint;
  out.data = data.train->name();
  out.method = infer::calibration_method_name(method);
  out.percentile = method == infer::CalibrationMethod::Percentile ? NumberFigure(r.percentile) : NumberFigure::null();
  out.folded_batch_norms = static_cast<int64_t>(engine->folded_batch_norms());
  out.device = backend.device().to_string();
  run.table.record(out);
  if (!data.test) return run;

  run.cost = infer::int8_accuracy_cost(*engine, *data.test, run.table, r.batch);
  CalibrationAccuracy accuracy;
  accuracy.test_set = data.test->name();
  accuracy.samples = run.cost->samples;
  accuracy.fp32_top1 = run.cost->fp32_top1;
  accuracy.int8_top1 = run.cost->int8_top1;
  accuracy.int8_cost_points = 100.0 * (run.cost->fp32_top1 - run.cost->int8_top1);
  accuracy.int8_arithmetic = std::string("simulated: quantised inputs and weights, products summed in fp32");
  // The same table executed: its layers as the backend's int8 kernels (int32 sums), the rest of the
  // network in bf16 on a GPU and fp32 on the CPU, epilogues fused as infer runs them.
  const Precision around = backend.device().is_cpu() ? Precision::FP32 : Precision::BF16;
  std::unique_ptr<Backend> int8_backend = job.another_backend(around);
  infer::EngineOptions ie;
  ie.checkpoint = r.checkpoint;
  ie.precision = around;
  for (const infer::QuantizedLayer& q : run.table.layers) ie.int8_input_scales[q.layer] = q.input_scale();
  infer::InferenceEngine int8_engine(spec, *int8_backend, ie);
  run.executed_top1 = infer::top1(int8_engine, *data.test, r.batch);
  run.executed_layers = int8_engine.int8_layers_run();
  accuracy.int8_executed_top1 = *run.executed_top1;
  CalibrationExecuted executed;
  executed.device = int8_backend->device().to_string();
  executed.between_layers = precision_name(around);
  executed.int8_layers = run.executed_layers;
  executed.int8_outputs = int8_engine.int8() ? int8_engine.int8()->outputs : std::vector<std::string>();
  accuracy.int8_executed = executed;
  out.accuracy = accuracy;
  return run;
}

std::string save_calibration(const CalibrateRequest& r, CalibrationResult& result) {
  if (!r.out.empty()) write_file_atomically(r.out, calibration_result_json(result).dump(2) + "\n");
  if (r.results_root.empty()) return "";
  const auto [iso, stamp] = utc_times(std::chrono::system_clock::now());
  result.time = iso;
  return write_new_file(report::calibration_results_dir(r.results_root, r.experiment),
                        fmt::format("{}-{}-{}", result.net.value(), r.method, stamp), ".json",
                        calibration_result_json(result).dump(2) + "\n");
}

}  // namespace cnnscale
