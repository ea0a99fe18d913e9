// `cnnscale calibrate`: int8 post-training calibration of a trained network (a `train` checkpoint)
// on real data, written as a table of per-tensor input thresholds and per-channel weight scales
// (infer/calibrate_run.hpp), with the accuracy int8 would cost on the test set: top-1 in fp32 and
// with that quantisation simulated.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/commands.hpp"
#include "app/setting_options.hpp"
#include "backend/backend.hpp"
#include "job/job.hpp"
#include "core/error.hpp"
#include "data/datasets.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/report_data.hpp"
#include "experiment/report_infer.hpp"
#include "infer/calibrate_run.hpp"
#include "io/atomic_file.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "net/net.hpp"

namespace cnnscale::app {

namespace {

struct CalibrateArgs {
  std::string checkpoint, net, data = "fashion-mnist", data_dir, device = "cpu", method = "percentile", out;
  int64_t samples = 1000, batch = 100, test_samples = -1;
  double percentile = 99.99;
  std::string results_root;  // "": not saved for `report` (unless $CNNSCALE_RESULTS gives a root)
  std::string experiment = "calibrate";
  bool no_results = false;
};

SettingFields calibrate_fields(CalibrateArgs& a);

void run_calibrate(CalibrateArgs& a) {
  Provenance provenance = start_provenance();
  // Everything that can be checked is, before anything is loaded.
  const infer::CalibrationMethod method = infer::calibration_method_from_name(a.method);
  if (!(a.percentile > 0 && a.percentile <= 100))
    throw_config("--percentile must be in (0, 100], got {}", a.percentile);
  if (a.samples < 1) throw_config("--samples must be >= 1, got {}", a.samples);
  if (a.batch < 1) throw_config("--batch must be >= 1, got {}", a.batch);
  if (a.test_samples < -1)
    throw_config("--test-samples: -1 (the whole test set), 0 (none) or N, got {}", a.test_samples);
  if (dataset_info(a.data).synthetic)
    throw_config("--data {}: calibration needs real data (the values the network will see)", a.data);
  const std::string results = a.no_results ? std::string() : a.results_root;
  if (a.out.empty() && results.empty())
    throw_config("--out FILE or --results DIR: the calibration table has to be written somewhere");
  std::string results_dir;
  if (!results.empty()) {  // checked now, not after the passes
    check_results_name("--experiment", a.experiment);
    results_dir = report::calibration_results_dir(results, a.experiment);
    prepare_writable_dir(results_dir);
  }

  const NetSpec spec = network_to_run(a.net, a.checkpoint);
  DatasetRequest request;
  request.name = a.data;
  request.data_dir = a.data_dir;
  request.test_samples = a.test_samples;
  const OpenedDatasets data = open_datasets(request, spec.input_shape(), spec.classes(), a.batch);
  // What the passes would only find out at their end, or not at all, checked before them.
  const Shape sample = data.train->sample_shape();
  if (sample.dims() != spec.input_shape())
    throw_config("{} takes inputs of shape {}, but {} has samples of shape {}", spec.name(),
                 Shape(spec.input_shape()).to_string(), data.train->name(), sample.to_string());
  if (data.train->classes() > spec.classes())
    throw_config("{} has {} classes, {} only {} outputs", data.train->name(), data.train->classes(), spec.name(),
                 spec.classes());
  if (a.samples > data.train->size())
    throw_config("--samples {}: {} has {} samples", a.samples, data.train->name(), data.train->size());
  if (data.test &&
      std::none_of(spec.layers().begin(), spec.layers().end(), [](const LayerInfo& l) { return l.type == "Accuracy"; }))
    throw_config("{} has no Accuracy layer to score the test set with (or give --test-samples 0)", spec.name());
  if (!a.out.empty()) {
    const std::filesystem::path parent = std::filesystem::absolute(a.out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec)) throw_config("--out {}: no folder {}", a.out, parent.string());
  }

  Job job(false);  // one process: calibrate runs on one device
  Backend* backend = &job.open_backend(a.device);
  infer::EngineOptions eo;
  eo.checkpoint = a.checkpoint;
  // Every quantised layer's input as the unfused network computes it, in its own pass.
  eo.fuse_epilogues = false;
  auto engine = std::make_unique<infer::InferenceEngine>(spec, *backend, eo);
  infer::CalibrationOptions co;
  co.method = method;
  co.percentile = a.percentile;
  co.batch = a.batch;
  const infer::CalibrationTable table = infer::calibrate(*engine, *data.train, a.samples, co);

  CalibrationResult out;
  out.format = std::string(kCalibrationFormat);
  out.net = spec.name();
  out.checkpoint = a.checkpoint;
  out.data = data.train->name();
  out.method = infer::calibration_method_name(method);
  out.percentile = method == infer::CalibrationMethod::Percentile ? NumberFigure(a.percentile) : NumberFigure::null();
  out.folded_batch_norms = static_cast<int64_t>(engine->folded_batch_norms());
  out.device = backend->device().to_string();
  table.record(out);
  std::optional<infer::AccuracyPair> cost;
  std::optional<double> executed_top1;
  std::vector<std::string> executed_layers;
  if (data.test) {
    cost = infer::int8_accuracy_cost(*engine, *data.test, table, a.batch);
    CalibrationAccuracy accuracy;
    accuracy.test_set = data.test->name();
    accuracy.samples = cost->samples;
    accuracy.fp32_top1 = cost->fp32_top1;
    accuracy.int8_top1 = cost->int8_top1;
    accuracy.int8_cost_points = 100.0 * (cost->fp32_top1 - cost->int8_top1);
    accuracy.int8_arithmetic = std::string("simulated: quantised inputs and weights, products summed in fp32");
    // The same table executed: its layers as the backend's int8 kernels (int32 sums), the rest
    // of the network in bf16 on a GPU and fp32 on the CPU, epilogues fused as infer runs them.
    const Precision around = backend->device().is_cpu() ? Precision::FP32 : Precision::BF16;
    std::unique_ptr<Backend> int8_backend = job.another_backend(around);
    infer::EngineOptions ie;
    ie.checkpoint = a.checkpoint;
    ie.precision = around;
    for (const infer::QuantizedLayer& q : table.layers) ie.int8_input_scales[q.layer] = q.input_scale();
    infer::InferenceEngine int8_engine(spec, *int8_backend, ie);
    executed_top1 = infer::top1(int8_engine, *data.test, a.batch);
    executed_layers = int8_engine.int8_layers_run();
    const std::vector<std::string> outputs =
        int8_engine.int8() ? int8_engine.int8()->outputs : std::vector<std::string>();
    accuracy.int8_executed_top1 = *executed_top1;
    CalibrationExecuted executed;
    executed.device = int8_backend->device().to_string();
    executed.between_layers = precision_name(around);
    executed.int8_layers = executed_layers;
    executed.int8_outputs = outputs;
    accuracy.int8_executed = executed;
    out.accuracy = accuracy;
  }
  set_end(provenance);
  out.provenance = provenance;
  out.settings = setting_values(calibrate_settings(), calibrate_fields(a));
  if (!a.out.empty()) write_file_atomically(a.out, calibration_result_json(out).dump(2) + "\n");
  std::string saved;
  if (!results_dir.empty()) {
    const auto [iso, stamp] = utc_times(std::chrono::system_clock::now());
    out.time = iso;
    saved = write_new_file(results_dir, fmt::format("{}-{}-{}", spec.name(), a.method, stamp), ".json",
                           calibration_result_json(out).dump(2) + "\n");
  }

  std::printf("%s: int8 calibration on %lld samples of %s (%s), %zu batch norm(s) folded -> %s\n", spec.name().c_str(),
              static_cast<long long>(table.samples), data.train->name().c_str(),
              infer::calibration_method_name(method).c_str(), engine->folded_batch_norms(),
              (a.out.empty() ? saved : a.out + (saved.empty() ? "" : " and " + saved)).c_str());
  std::printf("%-16s %-14s %-16s %10s %10s %8s\n", "layer", "type", "input", "max |x|", "threshold", "channels");
  for (const infer::QuantizedLayer& q : table.layers)
    std::printf("%-16s %-14s %-16s %10.4g %10.4g %8zu\n", q.layer.c_str(), q.type.c_str(), q.input.c_str(),
                q.input_max_abs, q.input_threshold, q.weight_scales.size());
  if (cost)
    std::printf("top-1 on %lld test samples: fp32 %.2f %%, int8 (simulated) %.2f %%: int8 costs %.2f points\n",
                static_cast<long long>(cost->samples), 100 * cost->fp32_top1, 100 * cost->int8_top1,
                100 * (cost->fp32_top1 - cost->int8_top1));
  if (executed_top1)
    std::printf("int8 executed (%zu layer(s) as int8 kernels): %.2f %%: int8 costs %.2f points\n",
                executed_layers.size(), 100 * *executed_top1, 100 * (cost->fp32_top1 - *executed_top1));
}

// Where each setting of calibrate's table (experiment/command_settings.hpp) is held.
SettingFields calibrate_fields(CalibrateArgs& a) {
  return {{"checkpoint", &a.checkpoint}, {"net", &a.net},
          {"data", &a.data},             {"data_dir", &a.data_dir},
          {"samples", &a.samples},       {"batch", &a.batch},
          {"method", &a.method},         {"percentile", &a.percentile},
          {"test_samples", &a.test_samples}, {"device", &a.device}};
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CalibrateArgs& a = *args;
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "int8 post-training calibration of a trained network on real data, and its accuracy cost");
  add_table_options(*cmd, calibrate_settings(), fields_by_name(calibrate_fields(a)));
  cmd->get_option("--checkpoint")->required();
  cmd->get_option("--data")->check(dataset_name_error);
  cmd->add_option("--out", a.out, "The calibration table (JSON), written whole or not at all");
  if (const char* env = std::getenv("CNNSCALE_RESULTS"); env && *env) a.results_root = env;
  CLI::Option* results =
      cmd->add_option("--results", a.results_root,
                      "Also save the table under DIR/<experiment>/calibration/ for `cnnscale report`'s int8 "
                      "accuracy table (default: $CNNSCALE_RESULTS)");
  cmd->add_option("--experiment", a.experiment, "experiment name (the results subfolder)")->capture_default_str();
  cmd->add_flag("--no-results", a.no_results, "save nothing under a results root, even with $CNNSCALE_RESULTS set")
      ->excludes(results);
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace cnnscale::app
