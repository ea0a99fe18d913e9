// `cnnscale bench gemm|conv`: the problems (a DeepBench set from data/bench/, a CSV list of one's
// own, or one --shape), every variant the device offers timed with the shared harness
// (measure/kernel_bench_suite), printed as a table or JSON and saved as a result folder.
#include "app/bench_kernels.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/setting_options.hpp"
#include "backend/backend.hpp"
#include "job/job.hpp"
#include "backend/devices.hpp"
#include "backend/kernel_bench.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/kernel_bench_output.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "measure/bench_shapes.hpp"
#include "measure/kernel_bench_suite.hpp"
#include "measure/nvml.hpp"
#include "measure/rapl.hpp"
#include "net/bench_problems.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale::app {

namespace {

struct KernelBenchArgs {
  std::string kind;  // gemm or conv
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string set = "training";
  std::string shapes_file;
  std::string net;
  int64_t batch = 64;
  std::vector<std::string> shapes;
  int64_t limit = 0;
  int64_t from = 1;
  double energy_within = 0;
  std::vector<std::string> passes{"fwd", "bwd_data", "bwd_filter"};
  std::string layout = "nchw";
  std::string sweep, sweep_base = "64,128,64,11,1,3";
  std::vector<int64_t> sweep_values;
  int warmup = 3, repeats = 10;
  double min_repeat_ms = 2.0;
  double max_seconds = 2.0;
  double energy_window = -1;  // -1: the device's default
  double energy_settle = 0.5;
  bool check = false;
  double check_max_macs = 2e8;
  bool peak = true;  // false: --no-peak
  uint64_t seed = 1;
  bool json = false, quiet = false;
  std::string results_root, experiment = "bench";
  bool no_results = false;
};

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

// Whether the option was given; false for one this subcommand does not have.
bool given(const CLI::App& cmd, const char* name) {
  const CLI::Option* o = cmd.get_option_no_throw(name);
  return o != nullptr && o->count() > 0;
}

SettingFields kernel_bench_fields(KernelBenchArgs& a);

void run_kernel_bench(KernelBenchArgs& a, const CLI::App& cmd) {
  Provenance provenance = start_provenance();
  // Everything checkable is checked before the device is touched.
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
      (given(cmd, "--set")) + (!a.shapes_file.empty()) + (!a.shapes.empty()) + (!a.sweep.empty()) + (!a.net.empty());
  if (sources > 1)
    throw_config("bench {}: give one of --set, --shapes, --shape{}", a.kind,
                 spmm || rnn ? ""
                 : gemm      ? " and --net"
                             : ", --net and --sweep");
  if (a.sweep.empty() && (!a.sweep_values.empty() || given(cmd, "--sweep-base")))
    throw_config("bench conv: --sweep-values and --sweep-base need --sweep AXIS");
  std::vector<GemmProblem> gemms;
  std::vector<ConvProblem> convs;
  std::vector<SparseProblem> sparse;
  std::vector<RnnProblem> rnns;
  std::vector<std::string> names;
  if (given(cmd, "--batch") && a.net.empty()) throw_config("bench {}: --batch applies to --net", a.kind);
  if (!a.net.empty()) {
    NetProblems np = net_problems(a.net, a.batch);
    if (gemm) {
      gemms = std::move(np.gemms);
      names = std::move(np.gemm_names);
    } else {
      convs = std::move(np.convs);
      names = std::move(np.conv_names);
      for (const std::string& s : np.skipped) log::warn("bench conv --net {}: {} left out", a.net, s);
    }
    if (gemms.empty() && convs.empty())
      throw_config("bench {} --net {}: the network has no {}", a.kind, a.net,
                   gemm ? "fully connected layer" : "ungrouped convolution");
  } else if (!a.sweep.empty()) {
    convs =
        measure::conv_sweep(a.sweep, a.sweep_values.empty() ? measure::default_sweep_values(a.sweep) : a.sweep_values,
                            measure::parse_sweep_base(a.sweep_base));
  } else if (rnn) {
    if (!a.shapes.empty())
      for (const std::string& s : a.shapes) rnns.push_back(measure::parse_rnn_shape(s));
    else
      rnns = measure::read_rnn_shapes(!a.shapes_file.empty() ? a.shapes_file : measure::bench_shape_file("rnn", a.set));
  } else if (spmm) {
    if (!a.shapes.empty())
      for (const std::string& s : a.shapes) sparse.push_back(measure::parse_sparse_shape(s));
    else
      sparse = measure::read_sparse_shapes(!a.shapes_file.empty() ? a.shapes_file
                                                                  : measure::bench_shape_file("sparse", a.set));
  } else if (!a.shapes.empty()) {
    for (const std::string& s : a.shapes) {
      if (gemm)
        gemms.push_back(measure::parse_gemm_shape(s));
      else
        convs.push_back(measure::parse_conv_shape(s));
    }
  } else {
    const std::string file = !a.shapes_file.empty() ? a.shapes_file : measure::bench_shape_file(a.kind, a.set);
    if (gemm)
      gemms = measure::read_gemm_shapes(file);
    else
      convs = measure::read_conv_shapes(file);
  }
  // --from N and --limit: a slice of the list (a long set split over several runs); rows keep the
  // list's problem indices, so the parts' rows never share one.
  const size_t listed = gemm ? gemms.size() : spmm ? sparse.size() : rnn ? rnns.size() : convs.size();
  if (a.from > 1 && static_cast<size_t>(a.from) > listed)
    throw_config("bench {} --from {}: the list has {} problem(s)", a.kind, a.from, listed);
  auto slice = [&](auto& list) {
    const size_t begin = std::min(list.size(), static_cast<size_t>(a.from - 1));
    const size_t end = a.limit > 0 ? std::min(list.size(), begin + static_cast<size_t>(a.limit)) : list.size();
    list =
        std::vector(list.begin() + static_cast<std::ptrdiff_t>(begin), list.begin() + static_cast<std::ptrdiff_t>(end));
  };
  slice(gemms);
  slice(convs);
  slice(sparse);
  slice(rnns);
  if (!names.empty()) slice(names);
  const size_t kept = gemm ? gemms.size() : spmm ? sparse.size() : rnn ? rnns.size() : convs.size();
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
  measure::KernelBenchOptions o;
  o.precision = precision;
  o.layout = a.layout == "nhwc" ? Layout::NHWC : Layout::NCHW;
  o.passes.clear();
  o.rnn_passes.clear();
  for (const std::string& p : rnn ? std::vector<std::string>{} : a.passes)
    o.passes.push_back(parse_conv_pass(p, "--pass"));
  for (const std::string& p : rnn ? a.passes : std::vector<std::string>{})
    o.rnn_passes.push_back(parse_rnn_pass(p, "--pass"));
  o.seed = a.seed;
  o.timing.warmup_calls = a.warmup;
  o.timing.repeats = a.repeats;
  o.timing.min_repeat_ms = a.min_repeat_ms;
  o.timing.max_seconds = a.max_seconds;
  o.check = a.check;
  o.check_max_macs = a.check_max_macs;
  const bool save = !a.no_results && !a.results_root.empty();
  if (!save && given(cmd, "--experiment"))
    throw_config("bench {} --experiment names the results subfolder: give --results DIR too", a.kind);
  if (save) check_results_name("--experiment", a.experiment);

  // Every process benchmarks its own device, alone (under mpirun too: the ranks are independent runs).
  Job job(false);
  Backend* backend = &job.open_backend(a.device, 0, precision == KernelPrecision::TF32 ? Precision::TF32 : Precision::FP32);
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
  if (!a.quiet) o.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };

  // A stop signal (timeout's SIGTERM, a scheduler's, Ctrl-C) ends the run at the next variant: the
  // problem in hand is dropped, the whole problems before are printed and saved, marked interrupted,
  // with the --from that resumes at the dropped one.
  install_stop_signals();
  o.stop_requested = [] { return stop_signal() != 0; };
  const auto [utc_time, utc_stamp] = utc_times(std::chrono::system_clock::now());
  o.sweep_axis = a.sweep;
  o.problem_names = names;
  measure::KernelBenchResult r = spmm   ? measure::run_spmm_bench(*backend, *bench, sparse, o)
                                 : gemm ? measure::run_gemm_bench(*backend, *bench, gemms, o)
                                 : rnn  ? measure::run_rnn_bench(*backend, *bench, rnns, o)
                                        : measure::run_conv_bench(*backend, *bench, convs, o);
  r.power_limit_watts = power_limit;
  r.source = !a.net.empty()           ? fmt::format("{} at batch {}", a.net, a.batch)
             : !a.sweep.empty()       ? fmt::format("sweep {} around {}", a.sweep, a.sweep_base)
             : !a.shapes.empty()      ? "--shape"
             : !a.shapes_file.empty() ? a.shapes_file
                                      : fmt::format("DeepBench {} set", a.set);
  if ((a.limit > 0 || a.from > 1) && a.sweep.empty() && a.shapes.empty())
    r.source += fmt::format(" (problems {} to {} of {})", a.from, a.from - 1 + static_cast<int64_t>(kept), listed);
  if (!o.counter_name.empty() && r.energy_method.rfind("mean power", 0) == 0)
    r.energy_method = fmt::format("{} of the {}; J per call = that power x the median time per call", r.energy_method,
                                  o.counter_name);
  KernelBenchSummary summary = report::kernel_bench_summary(r, utc_time, job.host());
  set_end(provenance);
  summary.provenance = provenance;
  summary.settings = setting_values(kernel_bench_settings(a.kind), kernel_bench_fields(a));
  const nlohmann::json j = kernel_bench_result_json(summary);
  if (a.json)
    std::cout << j.dump(2) << "\n";
  else
    std::cout << report::kernel_bench_table(r);
  std::cout.flush();
  if (save)
    std::fprintf(stderr, "results: %s\n",
                 write_kernel_bench_folder(a.results_root, a.experiment, summary, utc_stamp).c_str());
  if (r.stopped_before) {
    const int64_t resume = *r.stopped_before + 1, last = a.from - 1 + static_cast<int64_t>(kept);
    log::warn("bench {}: stopped by {} before problem {} of the list; --from {}{} runs the rest", a.kind,
              stop_signal_name(stop_signal()), resume, resume,
              a.limit > 0 ? fmt::format(" --limit {}", last - resume + 1) : std::string());
    requested_exit_code() = kExitRequeue;
  }
  int mismatches = 0;
  for (const measure::KernelBenchRow& row : r.rows) mismatches += row.check == "MISMATCH";
  if (mismatches > 0)
    log::warn("bench {} --check: {} variant(s) disagree with the reference beyond the tolerance (check column)", a.kind,
              mismatches);
}

// Where each setting of a kernel bench's table (experiment/command_settings.hpp) is held; a kind's
// table names those of its own.
SettingFields kernel_bench_fields(KernelBenchArgs& a) {
  return {{"device", &a.device},
          {"precision", &a.precision},
          {"set", &a.set},
          {"shapes", &a.shapes_file},
          {"shape", &a.shapes},
          {"net", &a.net},
          {"batch", &a.batch},
          {"limit", &a.limit},
          {"from", &a.from},
          {"pass", &a.passes},
          {"layout", &a.layout},
          {"sweep", &a.sweep},
          {"sweep_base", &a.sweep_base},
          {"sweep_values", &a.sweep_values},
          {"warmup", &a.warmup},
          {"repeats", &a.repeats},
          {"min_repeat_ms", &a.min_repeat_ms},
          {"max_seconds", &a.max_seconds},
          {"energy_window", &a.energy_window},
          {"energy_settle", &a.energy_settle},
          {"energy_within", &a.energy_within},
          {"check", &a.check},
          {"check_max_macs", &a.check_max_macs},
          {"peak", &a.peak},
          {"seed", &a.seed}};
}

void register_one(CLI::App& bench, const std::string& kind) {
  const bool gemm = kind == "gemm", spmm = kind == "spmm", rnn = kind == "rnn";
  CLI::App* cmd = bench.add_subcommand(
      kind, rnn ? "One recurrent layer (vanilla ReLU, LSTM, GRU) through cuDNN's RNN API per algorithm, inference and "
                  "training (forward, backward-data, backward-weights): time, TFLOP/s, energy per call (DeepBench's "
                  "RNN sets; GPU)"
            : spmm ? "Sparse times dense (cuSPARSE SpMM, SpMV for one column, each CSR algorithm) against the dense "
                     "GEMM of the same shape: time, speedup over dense, energy per call (DeepBench's sparse sets)"
            : gemm
                ? "GEMM per variant (cuBLAS, cuBLASLt heuristic and returned algorithms; OpenBLAS on the CPU): time, "
                  "TFLOP/s, share of a measured peak, energy per call (DeepBench's GEMM sets)"
                : "Convolution per cuDNN algorithm and pass (im2col + OpenBLAS on the CPU): time, workspace, "
                  "TFLOP/s, energy per call (DeepBench's conv sets)");
  auto a = std::make_shared<KernelBenchArgs>();
  a->kind = kind;
  add_table_options(*cmd, kernel_bench_settings(kind), fields_by_name(kernel_bench_fields(*a)));
  // Each --shape is one problem, its extents comma-separated: repeated, never split.
  cmd->get_option("--shape")->delimiter('\0');
  cmd->add_flag("--json", a->json, "print one JSON object (every variant) instead of the table");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress lines on stderr");
  if (const char* env = std::getenv("CNNSCALE_RESULTS"); env && *env) a->results_root = env;
  CLI::Option* results = cmd->add_option("--results", a->results_root,
                                         "save the result folder under DIR/<experiment>/bench/ (default: "
                                         "$CNNSCALE_RESULTS; without either nothing is saved)");
  cmd->add_option("--experiment", a->experiment, "experiment name (the results subfolder)")->capture_default_str();
  cmd->add_flag("--no-results", a->no_results, "save nothing, even with $CNNSCALE_RESULTS set")->excludes(results);
  cmd->callback([a, cmd] { run_kernel_bench(*a, *cmd); });
}

}  // namespace

void register_kernel_benches(CLI::App& bench) {
  register_one(bench, "gemm");
  register_one(bench, "conv");
  register_one(bench, "spmm");
  register_one(bench, "rnn");
}

}  // namespace cnnscale::app
