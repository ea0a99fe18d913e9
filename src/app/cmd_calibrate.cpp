// `cnnscale calibrate`: int8 post-training calibration of a trained network (a `train` checkpoint)
// on real data, written as a table of per-tensor input thresholds and per-channel weight scales
// (infer/calibrate_run.hpp), with the accuracy int8 would cost on the test set: top-1 in fp32 and
// with that quantisation simulated.
#include <cstdio>
#include <string>

#include "app/commands.hpp"
#include "app/results_options.hpp"
#include "app/setting_options.hpp"
#include "data/datasets.hpp"
#include "experiment/calibration_run.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/option_groups.hpp"
#include "io/provenance.hpp"
#include "job/job.hpp"

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

CalibrateRequest request_of(const CalibrateArgs& a) {
  return {.checkpoint = a.checkpoint,
          .net = a.net,
          .data = a.data,
          .data_dir = a.data_dir,
          .device = a.device,
          .method = a.method,
          .out = a.out,
          .samples = a.samples,
          .batch = a.batch,
          .test_samples = a.test_samples,
          .percentile = a.percentile,
          .results_root = a.no_results ? std::string() : a.results_root,
          .experiment = a.experiment};
}

void run_calibrate(CalibrateArgs& a) {
  Provenance provenance = start_provenance();
  const CalibrateRequest request = request_of(a);
  check_calibrate_request(request);  // everything that can be checked is, before anything is loaded
  Job job(false);                    // one process: calibrate runs on one device
  CalibrationRun run = run_calibration(request, job);
  CalibrationResult& out = run.result;
  set_end(provenance);
  out.provenance = provenance;
  out.settings = setting_values(calibrate_settings(), calibrate_fields(a));
  const std::string saved = save_calibration(request, out);

  const infer::CalibrationTable& table = run.table;
  std::printf("%s: int8 calibration on %lld samples of %s (%s), %lld batch norm(s) folded -> %s\n",
              out.net.value().c_str(), static_cast<long long>(table.samples), run.train_set.c_str(),
              out.method.value().c_str(), static_cast<long long>(out.folded_batch_norms.value()),
              (a.out.empty() ? saved : a.out + (saved.empty() ? "" : " and " + saved)).c_str());
  std::printf("%-16s %-14s %-16s %10s %10s %8s\n", "layer", "type", "input", "max |x|", "threshold", "channels");
  for (const infer::QuantizedLayer& q : table.layers)
    std::printf("%-16s %-14s %-16s %10.4g %10.4g %8zu\n", q.layer.c_str(), q.type.c_str(), q.input.c_str(),
                q.input_max_abs, q.input_threshold, q.weight_scales.size());
  if (run.cost)
    std::printf("top-1 on %lld test samples: fp32 %.2f %%, int8 (simulated) %.2f %%: int8 costs %.2f points\n",
                static_cast<long long>(run.cost->samples), 100 * run.cost->fp32_top1, 100 * run.cost->int8_top1,
                100 * (run.cost->fp32_top1 - run.cost->int8_top1));
  if (run.executed_top1)
    std::printf("int8 executed (%zu layer(s) as int8 kernels): %.2f %%: int8 costs %.2f points\n",
                run.executed_layers.size(), 100 * *run.executed_top1, 100 * (run.cost->fp32_top1 - *run.executed_top1));
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
  cmd->add_option("--out", a.out, "The calibration table (JSON), written whole or not at all")
      ->group(option_group::kResults);
  // --out is written either way: --no-results leaves out only the copy under a results root.
  add_results_options(*cmd, {.root = a.results_root,
                             .experiment = a.experiment,
                             .no_results = a.no_results,
                             .results_help = "Also save the table under DIR/<experiment>/calibration/ for `cnnscale "
                                             "report`'s int8 accuracy table (default: $CNNSCALE_RESULTS)",
                             .no_results_help = "save nothing under a results root, even with $CNNSCALE_RESULTS set"});
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace cnnscale::app
