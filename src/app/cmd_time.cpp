// `cnnscale time NET` (like `caffe time`): per-layer forward and backward time on one device,
// averaged over --iterations after --warmup, hotspot layers first with their share of the total;
// a table on stdout, or one JSON line with --json. The network is timed as training runs it: with
// epilogues fused (a fused BatchNorm or Convolution row includes its ReLU and residual sum), unless
// --no-fuse. With --inference it times the network as `cnnscale infer` runs it: batch norms folded
// (unless --no-fold), epilogues fused, forward passes alone in the test phase. --by-type sums the
// rows by layer type instead (Li et al.'s Fig. 2); --json always carries both.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/count_option.hpp"
#include "app/results_options.hpp"
#include "app/setting_options.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/precision.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/kernel_profile_summaries.hpp"
#include "experiment/option_groups.hpp"
#include "experiment/time_network.hpp"
#include "io/kernel_profile_results.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "job/job.hpp"
#include "measure/kernel_metric_set.hpp"
#include "measure/layer_timing.hpp"
#include "net/net.hpp"

namespace cnnscale::app {

namespace {

struct TimeArgs {
  std::string net;
  std::string device = "cpu";
  int sm_count = 0;  // > 0: a GPU partition of that many SMs
  std::string precision = "fp32";
  std::vector<int64_t> input_shape;
  int64_t classes = 0;
  LayerTimingOptions options;
  bool json = false;
  bool by_type = false;     // --by-type: one row per layer type
  bool fuse = true;         // false: --no-fuse
  bool fold = true;         // false: --no-fold
  std::string calibration;  // with --inference: the convolutions of this table run in int8
  std::string conv_search = "all";
  std::string layout = "auto";
  std::string batchnorm = "auto";
  bool kernels = false;  // --kernels (or --metrics): the kernel-level view
  int64_t kernel_steps = 3;
  std::string metrics;  // --metrics: "default" or a comma list of keys
  std::string metric_replay = "kernel";
  int64_t top = 10;
  std::string results_root, experiment = "time";
  bool no_results = false;
  // Given on the command line (not $CNNSCALE_RESULTS, not a default): an empty --metrics is still
  // one, and --kernel-steps, --top and --experiment mean nothing without what they belong to.
  bool results_given = false, metrics_given = false, kernel_steps_given = false, top_given = false,
       experiment_given = false, metric_replay_given = false;
};

SettingFields time_fields(TimeArgs& a);

void run_time(TimeArgs& a) {
  a.options.precision = parse_precision(a.precision, "--precision");
  if (!a.input_shape.empty() &&
      (a.input_shape.size() != 3 || a.input_shape[0] < 1 || a.input_shape[1] < 1 || a.input_shape[2] < 1))
    throw_config("--input-shape: expected three positive extents C,H,W");
  if (a.classes < 0) throw_config("--classes must be >= 1, got {}", a.classes);
  if (a.sm_count < 0) throw_config("--sm-count must be >= 1, got {}", a.sm_count);
  if (a.sm_count > 0 && a.device == "cpu") throw_config("--sm-count applies to GPU devices, not --device cpu");
  NetOptions net_options;
  if (!a.input_shape.empty()) net_options.input_shape = a.input_shape;
  if (a.classes > 0) net_options.classes = a.classes;
  const TimeRequest request{.spec = NetSpec::load(resolve_network_path(a.net), net_options),
                            .options = a.options,
                            .fuse = a.fuse,
                            .fold = a.fold,
                            .calibration = a.calibration};
  check_time_request(request);  // before a device is opened
  const bool kernels = a.kernels || a.metrics_given;
  const std::vector<std::string> metric_keys =
      a.metrics_given ? measure::parse_metric_keys(a.metrics) : std::vector<std::string>{};
  const bool save = kernels && !a.no_results && !a.results_root.empty();
  if (!kernels && a.results_given)
    throw_config("time --results saves the kernel profile: give --kernels or --metrics too");
  if (!kernels && (a.kernel_steps_given || a.top_given))
    throw_config("time --{}: applies to the kernel profile: give --kernels or --metrics too",
                 a.kernel_steps_given ? "kernel-steps" : "top");
  if (!a.metrics_given && a.metric_replay_given)
    throw_config("time --metric-replay: says how --metrics' passes are had: give --metrics too");
  if (!save && a.experiment_given)
    throw_config(
        "time --experiment names the kernel profile's results subfolder: give --kernels and --results DIR too");
  if (save) {
    check_results_name("--experiment", a.experiment);
    check_writable_dir("--results", a.results_root);  // before the profiling, not after it
  }
  const NetSpec& spec = request.spec;
  Provenance provenance = start_provenance();
  Job job(false);  // one process on one device
  Backend* backend = &job.open_backend(a.device, a.sm_count, a.options.precision,
                                       {.conv_search = conv_search_from_name(a.conv_search),
                                        .layout = layout_choice_from_name(a.layout),
                                        .batchnorm = batchnorm_kernels_from_name(a.batchnorm)});

  std::optional<NetworkKernelProfile> profiled;
  std::optional<KernelProfileSummary> kernel_summary;
  if (kernels) {
    const auto [utc_time, utc_stamp] = utc_times(std::chrono::system_clock::now());
    profiled = profile_network_kernels(request, *backend,
                                       {.steps = a.kernel_steps,
                                        .metric_names = measure::cupti_metrics_for(metric_keys),
                                        .replay = metric_replay_from_name(a.metric_replay)});
    kernel_summary = network_kernel_summary(
        *profiled, request, metric_keys, {.device = backend->description(), .host = job.host(), .utc_time = utc_time});
    kernel_summary->settings = setting_values(time_settings(), time_fields(a));
    set_end(provenance);
    kernel_summary->provenance = provenance;
    if (save)
      std::fprintf(stderr, "results: %s\n",
                   write_kernel_profile_folder(a.results_root, a.experiment, *kernel_summary, utc_stamp).c_str());
  }
  const TimedNetwork timed = profiled ? profiled->measured : time_network(request, *backend);
  const LayerTimingResult& r = timed.result;
  if (a.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerTime& t : r.layers)
      layers.push_back({{"name", t.name},
                        {"type", t.type},
                        {"forward_ms", t.forward_ms},
                        {"backward_ms", t.backward_ms},
                        {"share", t.share},
                        {"activation_bytes", t.activation_bytes},
                        {"param_bytes", t.param_bytes},
                        {"implementation", t.implementation}});
    nlohmann::json types = nlohmann::json::array();
    for (const TypeTime& t : time_by_type(r.layers))
      types.push_back({{"type", t.type},
                       {"layers", t.layers},
                       {"forward_ms", t.forward_ms},
                       {"backward_ms", t.backward_ms},
                       {"share", t.share}});
    nlohmann::json j = {{"net", spec.name()},
                        {"device", backend->device().to_string()},
                        {"precision", precision_name(r.precision)},
                        {"batch", r.batch},
                        {"iterations", r.iterations},
                        {"warmup", r.warmup},
                        {"forward_ms", r.forward_ms},
                        {"copies_ms", r.copies_ms},
                        {"backward_ms", r.backward_ms},
                        {"update_ms", r.update_ms},
                        {"step_ms", r.step_ms},
                        {"peak_memory_bytes", r.peak_memory_bytes},
                        {"h2d_ms", r.h2d_ms},
                        {"h2d_bytes", r.h2d_bytes},
                        {"fused_epilogues", timed.fused_epilogues},
                        {"inference", a.options.inference},
                        {"folded_batch_norms", timed.folded_batch_norms},
                        {"int8_layers", timed.int8_layers},
                        {"int8_outputs", timed.int8_outputs},
                        {"conv_search", a.conv_search},
                        {"layout", a.layout},
                        {"batchnorm", a.batchnorm},
                        {"layers", layers},
                        {"by_type", types},
                        // Every entry of time's table as given, as each saved result records its command's.
                        {"settings", table_values(time_settings(), fields_by_name(time_fields(a)))}};
    if (kernel_summary) j["kernel_profile"] = kernel_profile_result_json(*kernel_summary);
    set_end(provenance);
    j["provenance"] = provenance_json(provenance);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("%s on %s, precision %s, batch %lld: mean of %lld iterations after %lld warm-up\n", spec.name().c_str(),
              backend->description().c_str(), precision_name(r.precision).c_str(), static_cast<long long>(r.batch),
              static_cast<long long>(r.iterations), static_cast<long long>(r.warmup));
  if (a.options.inference)
    std::printf("inference: forward passes alone in the test phase, %zu batch norm(s) folded\n",
                timed.folded_batch_norms);
  if (timed.fused_epilogues > 0)
    std::printf(
        "%zu batch norm(s) and convolution(s) include their fused ReLU (and residual sum); --no-fuse times "
        "them apart\n",
        timed.fused_epilogues);
  if (a.by_type) {
    std::printf("%-18s %8s %12s %12s %8s\n", "type", "layers", "forward ms", "backward ms", "share");
    for (const TypeTime& t : time_by_type(r.layers))
      std::printf("%-18s %8lld %12.4f %12.4f %7.1f%%\n", t.type.c_str(), static_cast<long long>(t.layers), t.forward_ms,
                  t.backward_ms, 100.0 * t.share);
  } else {
    std::printf("%-28s %-18s %12s %12s %8s %12s\n", "layer", "type", "forward ms", "backward ms", "share",
                "memory MiB");
    for (const LayerTime& t : r.layers) {
      std::printf("%-28s %-18s %12.4f %12.4f %7.1f%% %12.2f\n", t.name.c_str(), t.type.c_str(), t.forward_ms,
                  t.backward_ms, 100.0 * t.share, static_cast<double>(t.activation_bytes + t.param_bytes) / 1048576.0);
      // Where the backend chose how to run it (a convolution's form and algorithm per direction).
      if (!t.implementation.empty()) std::printf("    %s\n", t.implementation.c_str());
    }
  }
  std::printf(
      "forward %.4f ms (%.4f ms of it the input's compute copy, and the weights' where the update does not "
      "write them, in no layer), backward %.4f ms, update %.4f ms, full step %.4f ms; peak memory %.3f GiB\n",
      r.forward_ms, r.copies_ms, r.backward_ms, r.update_ms, r.step_ms,
      static_cast<double>(r.peak_memory_bytes) / double(int64_t{1} << 30));
  if (!a.by_type)
    std::printf(
        "memory per layer: its outputs at batch %lld and its parameters with their gradients and fp32 "
        "masters\n",
        static_cast<long long>(r.batch));
  if (r.h2d_bytes > 0)
    std::printf(
        "host -> device: the batch (input and labels, %.2f MiB from pinned memory) %.4f ms per step, %.1f%% "
        "of the full step\n",
        static_cast<double>(r.h2d_bytes) / 1048576.0, r.h2d_ms, r.step_ms > 0 ? 100.0 * r.h2d_ms / r.step_ms : 0.0);
  if (kernel_summary)
    std::printf("\n%s", report::kernel_profile_tables(*kernel_summary, {.top = static_cast<size_t>(a.top)}).c_str());
}

// Where each setting of time's table (experiment/command_settings.hpp) is held.
SettingFields time_fields(TimeArgs& a) {
  return {{"net", &a.net},
          {"batch", &a.options.batch},
          {"iterations", &a.options.iterations},
          {"warmup", &a.options.warmup},
          {"device", &a.device},
          {"precision", &a.precision},
          {"sm_count", &a.sm_count},
          {"input_shape", &a.input_shape},
          {"classes", &a.classes},
          {"seed", &a.options.seed},
          {"fuse", &a.fuse},
          {"inference", &a.options.inference},
          {"fold", &a.fold},
          {"calibration", &a.calibration},
          {"conv_search", &a.conv_search},
          {"layout", &a.layout},
          {"batchnorm", &a.batchnorm},
          {"kernels", &a.kernels},
          {"kernel_steps", &a.kernel_steps},
          {"metrics", &a.metrics},
          {"metric_replay", &a.metric_replay},
          {"top", &a.top}};
}

}  // namespace

void register_time(CLI::App& app) {
  auto args = std::make_shared<TimeArgs>();
  TimeArgs& a = *args;
  CLI::App* cmd = app.add_subcommand("time", "Time each layer's forward and backward pass (hotspots first)");
  add_table_options(*cmd, time_settings(), fields_by_name(time_fields(a)));
  cmd->get_option("net")->required();
  cmd->add_flag("--json", a.json, "Print one JSON line on stdout instead of the table")->group(option_group::kResults);
  add_results_options(*cmd, {.root = a.results_root,
                             .experiment = a.experiment,
                             .no_results = a.no_results,
                             .results_help = "with --kernels: save the kernel profile to DIR/<experiment>/kernels/ "
                                             "(default: $CNNSCALE_RESULTS; without either nothing is saved)"});
  cmd->add_flag("--by-type", a.by_type,
                "One row per layer type (convolution, pooling, ...: Li et al.'s Fig. 2) instead of one per layer")
      ->group(option_group::kResults);
  cmd->callback([args, cmd] {
    args->results_given = cmd->count("--results") > 0;
    args->metrics_given = cmd->count("--metrics") > 0;
    args->kernel_steps_given = cmd->count("--kernel-steps") > 0;
    args->top_given = cmd->count("--top") > 0;
    args->experiment_given = cmd->count("--experiment") > 0;
    args->metric_replay_given = cmd->count("--metric-replay") > 0;
    run_time(*args);
  });
}

}  // namespace cnnscale::app
