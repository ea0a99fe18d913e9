// check_kernel_bench_request, run_kernel_bench and save_kernel_bench (kernel_bench_job.hpp).
#include "experiment/kernel_bench_job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "backend/kernel_bench.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "experiment/kernel_bench_kernels.hpp"
#include "experiment/kernel_bench_output.hpp"
#include "experiment/kernel_profile_summaries.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "job/job.hpp"
#include "measure/bench_shapes.hpp"
#include "measure/kernel_metric_set.hpp"
#include "measure/nvml.hpp"
#include "measure/rapl.hpp"
#include "net/bench_problems.hpp"

namespace cnnscale {

namespace {

// The device's cumulative energy counter in joules: NVML on a GPU, RAPL package energy on the CPU
// (often root-only; then none).
std::function<std::optional<double>()> energy_counter(const Backend& backend, std::string* name,
                                                      std::optional<double>* power_limit) {
  const Device d = backend.device();
  if (!d.is_cpu()) {
    std::shared_ptr<measure::GpuPowerReader> reader =
        measure::open_gpu_power_reader(gpu_uuid(d.index), static_cast<unsigned>(d.index));
    if (!reader->available()) return nullptr;
    *power_limit = reader->power_limit_w();
    *name = "NVML total energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ)";
    return measure::energy_joules(std::move(reader));
  }
  auto rapl = std::make_shared<measure::RaplReader>();
  if (!rapl->available()) return nullptr;
  *name = "RAPL package energy counters (powercap energy_uj)";
  auto start = std::make_shared<measure::RaplSnapshot>(rapl->read());
  return [rapl, start]() -> std::optional<double> { return rapl->difference(*start, rapl->read()).package_j; };
}

// The problems of r's source, in list order.
void read_problems(const KernelBenchRequest& a, KernelBenchPlan& p) {
  const bool gemm = a.kind == "gemm", spmm = a.kind == "spmm", rnn = a.kind == "rnn";
  if (!a.net.empty()) {
    NetProblems np = net_problems(a.net, a.batch);
    if (gemm) {
      p.gemms = std::move(np.gemms);
      p.names = std::move(np.gemm_names);
    } else {
      p.convs = std::move(np.convs);
      p.names = std::move(np.conv_names);
      for (const std::string& s : np.skipped) log::warn("bench conv --net {}: {} left out", a.net, s);
    }
    if (p.gemms.empty() && p.convs.empty())
      throw_config("bench {} --net {}: the network has no {}", a.kind, a.net,
                   gemm ? "fully connected layer" : "ungrouped convolution");
  } else if (!a.sweep.empty()) {
    p.convs =
        measure::conv_sweep(a.sweep, a.sweep_values.empty() ? measure::default_sweep_values(a.sweep) : a.sweep_values,
                            measure::parse_sweep_base(a.sweep_base));
  } else if (rnn) {
    if (!a.shapes.empty())
      for (const std::string& s : a.shapes) p.rnns.push_back(measure::parse_rnn_shape(s));
    else
      p.rnns =
          measure::read_rnn_shapes(!a.shapes_file.empty() ? a.shapes_file : measure::bench_shape_file("rnn", a.set));
  } else if (spmm) {
    if (!a.shapes.empty())
      for (const std::string& s : a.shapes) p.sparse.push_back(measure::parse_sparse_shape(s));
    else
      p.sparse = measure::read_sparse_shapes(!a.shapes_file.empty() ? a.shapes_file
                                                                    : measure::bench_shape_file("sparse", a.set));
  } else if (!a.shapes.empty()) {
    for (const std::string& s : a.shapes) {
      if (gemm)
        p.gemms.push_back(measure::parse_gemm_shape(s));
      else
        p.convs.push_back(measure::parse_conv_shape(s));
    }
  } else {
    const std::string file = !a.shapes_file.empty() ? a.shapes_file : measure::bench_shape_file(a.kind, a.set);
    if (gemm)
      p.gemms = measure::read_gemm_shapes(file);
    else
      p.convs = measure::read_conv_shapes(file);
  }
}

size_t problem_count(const KernelBenchRequest& a, const KernelBenchPlan& p) {
  return a.kind == "gemm"   ? p.gemms.size()
         : a.kind == "spmm" ? p.sparse.size()
         : a.kind == "rnn"  ? p.rnns.size()
                            : p.convs.size();
}

}  // namespace

KernelBenchPlan check_kernel_bench_request(const KernelBenchRequest& a) {
  KernelBenchPlan p;
  const KernelPrecision precision = parse_kernel_precision(a.precision);
  const bool gemm = a.kind == "gemm", spmm = a.kind == "spmm", rnn = a.kind == "rnn";
  if (rnn && a.device == "cpu") throw_config("bench rnn times cuDNN's RNN API: it runs on a GPU (--device gpu)");
  if (rnn && precision == KernelPrecision::INT8)
    throw_config("bench rnn --precision int8: cuDNN's RNNs have no int8 format");
  if (spmm && precision != KernelPrecision::FP32)
    throw_config("bench spmm --precision {}: cuSPARSE's SpMM and SpMV run fp32 here (DeepBench's sparse format)",
                 a.precision);
  if (spmm && a.device == "cpu") throw_config("bench spmm times cuSPARSE: it runs on a GPU (--device gpu)");
  const int sources =
      a.set_given + (!a.shapes_file.empty()) + (!a.shapes.empty()) + (!a.sweep.empty()) + (!a.net.empty());
  if (sources > 1)
    throw_config("bench {}: give one of --set, --shapes, --shape{}", a.kind,
                 spmm || rnn ? ""
                 : gemm      ? " and --net"
                             : ", --net and --sweep");
  if (a.sweep.empty() && (!a.sweep_values.empty() || a.sweep_base_given))
    throw_config("bench conv: --sweep-values and --sweep-base need --sweep AXIS");
  if (a.batch_given && a.net.empty()) throw_config("bench {}: --batch applies to --net", a.kind);
  read_problems(a, p);
  // --from N and --limit: a slice of the list (a long set split over several runs); rows keep the
  // list's problem indices, so the parts' rows never share one.
  p.listed = problem_count(a, p);
  if (a.from > 1 && static_cast<size_t>(a.from) > p.listed)
    throw_config("bench {} --from {}: the list has {} problem(s)", a.kind, a.from, p.listed);
  auto slice = [&](auto& list) {
    const size_t begin = std::min(list.size(), static_cast<size_t>(a.from - 1));
    const size_t end = a.limit > 0 ? std::min(list.size(), begin + static_cast<size_t>(a.limit)) : list.size();
    list =
        std::vector(list.begin() + static_cast<std::ptrdiff_t>(begin), list.begin() + static_cast<std::ptrdiff_t>(end));
  };
  slice(p.gemms);
  slice(p.convs);
  slice(p.sparse);
  slice(p.rnns);
  if (!p.names.empty()) slice(p.names);
  p.kept = problem_count(a, p);
  // What no device of this build can run is refused here, before the backend starts.
  if (a.device == "cpu" && precision != KernelPrecision::FP32)
    throw_config("bench {} --precision {}: the CPU backend benchmarks fp32 only (its reference format)", a.kind,
                 a.precision);
  if (a.kind == "conv" && precision == KernelPrecision::INT8)
    throw_config(
        "bench conv --precision int8: cuDNN's int8 convolutions take a fused graph (int8 inference runs "
        "them; see cnnscale infer), not the legacy algorithms this benchmark compares");
  if (!gemm && a.layout == "nhwc" && a.device == "cpu")
    throw_config("bench conv --layout nhwc runs on a GPU only: the CPU backend computes in NCHW");
  for (size_t i = 0; i < a.passes.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (a.passes[i] == a.passes[k]) throw_config("bench {} --pass: {} is listed twice", a.kind, a.passes[i]);
  measure::KernelBenchOptions& o = p.options;
  o.precision = precision;
  o.layout = a.layout == "nhwc" ? Layout::NHWC : Layout::NCHW;
  o.passes.clear();
  o.rnn_passes.clear();
  for (const std::string& s : rnn ? std::vector<std::string>{} : a.passes)
    o.passes.push_back(parse_conv_pass(s, "--pass"));
  for (const std::string& s : rnn ? a.passes : std::vector<std::string>{})
    o.rnn_passes.push_back(parse_rnn_pass(s, "--pass"));
  o.seed = a.seed;
  o.timing.warmup_calls = a.warmup;
  o.timing.repeats = a.repeats;
  o.timing.min_repeat_ms = a.min_repeat_ms;
  o.timing.max_seconds = a.max_seconds;
  o.check = a.check;
  o.check_max_macs = a.check_max_macs;
  if (a.metrics_given) p.metric_keys = measure::parse_metric_keys(a.metrics);  // refused before a device is opened
  if (!a.metrics_given && a.metric_replay_given)
    throw_config("bench {} --metric-replay: says how --metrics' passes are had: give --metrics too", a.kind);
  const bool save = !a.no_results && !a.results_root.empty();
  if (!save && a.experiment_given)
    throw_config("bench {} --experiment names the results subfolder: give --results DIR too", a.kind);
  if (save) check_results_name("--experiment", a.experiment);
  return p;
}

KernelBenchRun run_kernel_bench(const KernelBenchRequest& a) {
  Provenance provenance = start_provenance();
  // Everything checkable is checked before the device is touched.
  KernelBenchPlan p = check_kernel_bench_request(a);
  if (!a.no_results && !a.results_root.empty()) check_writable_dir("--results", a.results_root);
  measure::KernelBenchOptions& o = p.options;
  const KernelPrecision precision = o.precision;
  const bool gemm = a.kind == "gemm", spmm = a.kind == "spmm", rnn = a.kind == "rnn";

  // Every process benchmarks its own device, alone (under mpirun too: the ranks are independent runs).
  Job job(false);
  Backend* backend =
      &job.open_backend(a.device, 0, precision == KernelPrecision::TF32 ? Precision::TF32 : Precision::FP32);
  std::unique_ptr<KernelBench> bench = make_kernel_bench(*backend);
  const bool on_gpu = !backend->device().is_cpu();
  // GPU: half a second between counter updates holds about five of NVML's ~100 ms refreshes, after
  // half a second of calls for the power controller to pull a burst back to its limit.
  o.energy_window_seconds = a.energy_window >= 0 ? a.energy_window : on_gpu ? 0.5 : 0.0;
  o.energy_settle_seconds = a.energy_settle;
  o.energy_within = a.energy_within;
  o.first_problem = a.from - 1;
  std::optional<double> power_limit;
  if (o.energy_window_seconds > 0) o.counter_joules = energy_counter(*backend, &o.counter_name, &power_limit);
  o.peak_n = !a.peak ? 0 : on_gpu ? 8192 : 512;
  o.progress = a.progress;
  // conv --kernels: refused here, before any work, where the device cannot trace or profile.
  const std::vector<std::string>& metric_keys = p.metric_keys;
  std::unique_ptr<KernelBenchKernels> kernels;
  if (a.kernels || a.metrics_given) {
    kernels = std::make_unique<KernelBenchKernels>(*backend, measure::cupti_metrics_for(metric_keys),
                                                   metric_replay_from_name(a.metric_replay));
    o.profile_call = [&](const measure::KernelBenchRow& row, const std::function<void()>& call) {
      kernels->profile_call(row, call);
    };
  }

  // A stop signal (timeout's SIGTERM, a scheduler's, Ctrl-C) ends the run at the next variant: the
  // problem in hand is dropped, the whole problems before are printed and saved, marked interrupted,
  // with the --from that resumes at the dropped one.
  install_stop_signals();
  o.stop_requested = [] { return stop_signal() != 0; };
  const auto [utc_time, utc_stamp] = utc_times(std::chrono::system_clock::now());
  o.sweep_axis = a.sweep;
  o.problem_names = p.names;
  KernelBenchRun run;
  run.utc_stamp = utc_stamp;
  run.kept = p.kept;
  measure::KernelBenchResult& r = run.result;
  r = spmm   ? measure::run_spmm_bench(*backend, *bench, p.sparse, o)
      : gemm ? measure::run_gemm_bench(*backend, *bench, p.gemms, o)
      : rnn  ? measure::run_rnn_bench(*backend, *bench, p.rnns, o)
             : measure::run_conv_bench(*backend, *bench, p.convs, o);
  r.power_limit_watts = power_limit;
  r.source = !a.net.empty()           ? fmt::format("{} at batch {}", a.net, a.batch)
             : !a.sweep.empty()       ? fmt::format("sweep {} around {}", a.sweep, a.sweep_base)
             : !a.shapes.empty()      ? "--shape"
             : !a.shapes_file.empty() ? a.shapes_file
                                      : measure::bench_set_source(a.set);
  if ((a.limit > 0 || a.from > 1) && a.sweep.empty() && a.shapes.empty())
    r.source += fmt::format(" (problems {} to {} of {})", a.from, a.from - 1 + static_cast<int64_t>(p.kept), p.listed);
  if (!o.counter_name.empty() && r.energy_method.rfind("mean power", 0) == 0)
    r.energy_method = fmt::format("{} of the {}; J per call = that power x the median time per call", r.energy_method,
                                  o.counter_name);
  run.summary = report::kernel_bench_summary(r, utc_time, job.host());
  set_end(provenance);
  run.summary.provenance = provenance;
  run.summary.settings = a.settings;
  if (kernels && !r.rows.empty()) {
    // The convolutions' common batch (a --net's, or one a list shares); none where they differ.
    int64_t batch = p.convs.empty() ? 0 : p.convs.front().n;
    for (const ConvProblem& c : p.convs)
      if (c.n != batch) batch = 0;
    run.kernel_profile = bench_kernel_summary(*kernels, r.precision, r.layout, batch, metric_keys,
                                              {.device = r.device, .host = job.host(), .utc_time = utc_time});
    run.kernel_profile->provenance = provenance;
    run.kernel_profile->settings = a.settings;
  }
  return run;
}

std::string save_kernel_bench(const KernelBenchRequest& a, const KernelBenchRun& run) {
  if (a.no_results || a.results_root.empty()) return "";
  return write_kernel_bench_folder(a.results_root, a.experiment, run.summary, run.utc_stamp);
}

std::string save_kernel_bench_kernels(const KernelBenchRequest& a, const KernelBenchRun& run) {
  if (a.no_results || a.results_root.empty() || !run.kernel_profile) return "";
  return write_kernel_profile_folder(a.results_root, a.experiment, *run.kernel_profile, run.utc_stamp);
}

}  // namespace cnnscale
