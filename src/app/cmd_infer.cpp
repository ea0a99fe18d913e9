// `cnnscale infer`: forward-only throughput, latency percentiles and joules per image of a network
// (initialised, or trained: --checkpoint) over a list of batch sizes or the largest that fits, in
// one precision, on one device per process. Under mpirun every rank streams its own batches on its
// own device; rank 0 prints each rank's figures and the job's (images/s and watts summed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/setting_options.hpp"
#include "app/train_results.hpp"
#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "backend/engine_cache.hpp"
#include "core/error.hpp"
#include "experiment/command_settings.hpp"
#include "data/synthetic_dataset.hpp"
#include "infer/batch_measure.hpp"
#include "infer/calibrate_run.hpp"
#include "infer/inference_engine.hpp"
#include "infer/result_figures.hpp"
#include "infer/scenario_runs.hpp"
#include "io/infer_results.hpp"
#include "io/provenance.hpp"
#include "net/net.hpp"
#include "job/job.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale::app {

namespace {

// The engine cache (CNNSCALE_ENGINE_CACHE) whose measured choices the run took, or null: its
// kernels were chosen by an earlier process's search on the same GPU model and libraries.
TextFigure engine_cache_used() {
  const EngineCache* cache = EngineCache::from_environment();
  return cache ? TextFigure(cache->path()) : TextFigure::null();
}

// --calibration's value for a table measured on the run's own input (synthetic_input_scales).
const char* const kSyntheticCalibration = "synthetic";
constexpr int64_t kSyntheticCalibrationSamples = 8;

struct InferArgs {
  std::string net;         // name or path; default: the checkpoint's own network
  std::string checkpoint;  // a `train` checkpoint: its weights (and network, without --net)
  std::vector<std::string> batches = {"1", "8", "64"};
  std::string precision = "fp32";
  std::string calibration;  // --precision int8: the calibration table (cnnscale calibrate --out)
  std::string device = "cpu";
  std::vector<int> gpus;  // under mpirun: the GPU of each node-local rank
  std::string fill = "gaussian";
  double memory_limit_gib = 0;  // --batch max: 0 = the device's memory (GPU) or half the host's free memory
  uint64_t seed = 1;
  double power_hz = 10;
  bool fold = true;  // false: --no-fold
  bool fuse = true;  // false: --no-fuse
  std::string fc_gemv = "auto";  // batch-1 fully connected layers as GEMV (GPU): auto, on or off
  bool graph = true;  // false: --no-graph
  infer::BatchMeasureOptions measure;
  // Scenarios after MLPerf Inference: offline (each --batch size's throughput), single-stream,
  // server (Poisson arrivals at --rate, dynamic batching) and server-search (the highest rate whose
  // p99 meets the bound). MLPerf's ResNet-50 server bound is 15 ms.
  std::string scenario = "offline";
  double rate = 0;
  int64_t max_batch = 64;
  double latency_bound = 0.015;
  double rate_lo = 0, rate_hi = 0;
  int rate_steps = 6;
  int64_t min_queries = 100;
  bool json = false;
  std::string results_root;  // "": nothing saved (unless $CNNSCALE_RESULTS gives a root)
  std::string experiment = "infer";
  std::string run_id;  // names the result file (a sweep's run id); "": net, precision, scenario, device, time
  std::vector<std::string> rank_devices;  // under mpirun: each rank's device, in rank order (results' "devices")
  bool no_results = false;
  Provenance provenance;  // started when the run starts, its hosts once every rank's is known
  SettingValues settings;  // every entry of infer's table as the run was given it
};

SettingFields infer_fields(InferArgs& a);

// Saves the run next to train's runs (unless `dir` is "") and prints it as a JSON line (--json).
void publish(const InferArgs& a, InferResult run, const std::string& dir) {
  Provenance provenance = a.provenance;
  set_end(provenance);
  run.provenance = provenance;
  run.settings = a.settings;
  save_infer_result(run, dir, a.run_id);
  if (a.json) {
    std::printf("%s\n", infer_result_json(run).dump().c_str());
    std::fflush(stdout);
  }
}

// Batch sizes: a comma list of positive integers, "max" alone, or a list ending with max (these
// sizes, then the largest that fits: a sweep from batch 1 to the memory limit).
struct BatchPlan {
  std::vector<int64_t> sizes;
  bool max = false;
};

BatchPlan parse_batches(const std::vector<std::string>& items) {
  BatchPlan plan;
  for (const std::string& s : items) {
    if (plan.max) throw_config("--batch: max is the largest size, so it comes last");
    if (s == "max") {
      plan.max = true;
      continue;
    }
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || v < 1) throw_config("--batch: '{}' is neither a batch size >= 1 nor max", s);
    plan.sizes.push_back(v);
  }
  if (!plan.max && plan.sizes.empty()) throw_config("--batch: no batch size given");
  return plan;
}

// MemAvailable from /proc/meminfo, bytes (0 when unreadable).
int64_t host_available_bytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

std::string fmt_opt(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

// What every result file begins with: what ran, on what, and how its passes were queued.
InferResult run_result(const InferArgs& a, const NetSpec& spec, infer::InferenceEngine& engine,
                       const std::string& scenario, int world_size) {
  InferResult r;
  const Device device = engine.backend().device();
  r.int8 = engine.int8() ? Figure<InferInt8>(infer::int8_result(engine, a.calibration)) : Figure<InferInt8>::null();
  r.command = std::string("infer");
  r.scenario = scenario;
  r.net = spec.name();
  r.device = device.to_string();
  r.precision = engine.int8() ? std::string("int8") : precision_name(engine.options().precision);
  r.checkpoint = text_or_null(a.checkpoint);
  r.fill = infer::input_fill_name(engine.options().fill);
  r.folded_batch_norms = static_cast<int64_t>(engine.folded_batch_norms());
  r.fused_epilogues = static_cast<int64_t>(engine.fused_epilogues());
  r.fc_gemv = device.is_cpu() ? TextFigure::null() : TextFigure(a.fc_gemv);
  r.cuda_graph = engine.cuda_graph();
  r.graph_replays = static_cast<int64_t>(engine.graph_replays());
  r.engine_cache = engine_cache_used();
  r.world_size = world_size;
  r.devices = a.rank_devices.empty() ? std::vector<std::string>{device.to_string()} : a.rank_devices;
  return r;
}

// single-stream, server and server-search: one run of the scenario; under mpirun every rank runs
// its own and rank 0 prints each rank's rate (server: achieved queries/s) and their sum.
void run_scenario(const InferArgs& a, const NetSpec& spec, infer::InferenceEngine& engine,
                  measure::EnergyMonitor* energy, const infer::ServerOptions& server, const Job& job,
                  const std::string& dir) {
  const bool distributed = job.together();
  job.start_together();  // the ranks' runs start together (their rates are added up)
  infer::ScenarioFigures f;
  if (a.scenario == "single-stream")
    f = infer::run_single_stream_scenario(engine, energy, a.measure.min_seconds, a.min_queries);
  else if (a.scenario == "server")
    f = infer::run_server_scenario(engine, energy, server);
  else
    f = infer::run_server_search(engine, server, a.rate_lo, a.rate_hi, a.rate_steps);
  const double rate = f.single_stream ? f.single_stream->queries / f.single_stream->seconds
                                      : f.server->achieved_rate;
  std::vector<double> rates = job.gather(rate);
  if (job.rank() != 0) return;
  InferResult j = run_result(a, spec, engine, f.scenario, job.size());
  infer::add_scenario_figures(j, f, rate, rates);
  publish(a, j, dir);
  if (a.json) return;
  std::printf("%s on %s, %s, %s scenario%s\n", spec.name().c_str(), engine.backend().description().c_str(),
              a.precision.c_str(), f.scenario.c_str(),
              distributed ? (", rank 0 of " + std::to_string(job.size())).c_str() : "");
  auto ms = [](double s) { return 1e3 * s; };
  if (f.single_stream) {
    const infer::LatencyStats& l = f.single_stream->latency;
    std::printf("%lld queries in %.2f s: %.1f queries/s; latency p50 %.3f ms, p90 %.3f ms (MLPerf's metric), "
                "p99 %.3f ms%s\n",
                static_cast<long long>(f.single_stream->queries), f.single_stream->seconds, rate, ms(l.p50),
                ms(l.p90), ms(l.p99),
                f.energy.joules_per_sample ? fmt::format("; {:.5f} J/query", *f.energy.joules_per_sample).c_str()
                                           : "");
  }
  auto server_line = [&](const infer::ServerResult& r) {
    std::printf("offered %.1f/s, achieved %.1f/s, %lld queries in %lld batches (mean %.2f), p50 %.3f ms, p99 %.3f ms "
                "(bound %.3f ms: %s, %.1f%% within)\n",
                r.offered_rate, r.achieved_rate, static_cast<long long>(r.queries), static_cast<long long>(r.batches),
                r.mean_batch, ms(r.latency.p50), ms(r.latency.p99), ms(r.latency_bound),
                r.meets_bound ? "met" : "missed", 100 * r.within_bound);
  };
  if (f.search) {
    for (const infer::ServerResult& t : f.search->trials) server_line(t);
    std::printf("highest rate meeting the bound: %.1f queries/s (resolution %.1f)\n", f.search->best_rate,
                f.search->resolution);
  } else if (f.server) {
    server_line(*f.server);
  }
  std::printf("batch sizes prepared: %s; padding %.1f%% of the samples computed%s\n",
              fmt::format("{}", fmt::join(f.prepared_sizes, ",")).c_str(), 100 * f.padded_fraction,
              distributed ? fmt::format("; job {:.1f} queries/s", j.job_queries_per_s.value()).c_str() : "");
}

// --calibration synthetic: a table measured here, on the device the run uses, as `calibrate --method
// max` measures one: the network in fp32 (batch norms folded as the run folds them) over
// kSyntheticCalibrationSamples samples of the run's own input (--fill, --seed), each quantised
// layer's input scale its max |x| / 127. It keeps the run's activations in int8's range, so the
// kernels see the values they would with a real table; it says nothing of accuracy, for which a
// table from real data (cnnscale calibrate) is needed.
std::map<std::string, double> synthetic_input_scales(const InferArgs& a, const NetSpec& spec,
                                                     const std::string& device) {
  std::unique_ptr<Backend> backend = make_backend(device, 0, Precision::FP32);
  infer::EngineOptions eo;
  eo.checkpoint = a.checkpoint;
  eo.seed = a.seed;  // without a checkpoint, the weights the run initialises
  eo.fold_batch_norm = a.fold;
  eo.fuse_epilogues = false;  // every quantised layer's input as the unfused network computes it
  eo.cuda_graph = false;
  infer::InferenceEngine engine(spec, *backend, eo);
  const SyntheticDataset data(Shape(spec.input_shape()), spec.classes(), kSyntheticCalibrationSamples,
                              parse_synthetic_fill(a.fill), a.seed);
  infer::CalibrationOptions co;
  co.method = infer::CalibrationMethod::Max;
  co.batch = kSyntheticCalibrationSamples;
  std::map<std::string, double> scales;
  for (const infer::QuantizedLayer& q : infer::calibrate(engine, data, kSyntheticCalibrationSamples, co).layers)
    scales[q.layer] = q.input_scale();
  return scales;
}

void run_infer(InferArgs& a) {
  // Everything that can be checked is, before anything is loaded.
  a.provenance = start_provenance();
  a.settings = setting_values(infer_settings(), infer_fields(a));
  const bool int8 = a.precision == "int8";
  if (int8 && a.calibration.empty())
    throw_config(
        "--precision int8 needs --calibration FILE (a table written by cnnscale calibrate --out) or --calibration "
        "synthetic (scales measured on the run's own input: for speed, not accuracy)");
  if (!int8 && !a.calibration.empty()) throw_config("--calibration applies to --precision int8");
  // int8: the calibrated convolutions as int8 kernels, the rest of the network in bf16 on a GPU (whose
  // int8 engines read channels-last tensors, the order of 16-bit nets) and fp32 on the CPU.
  const Precision precision =
      int8 ? (a.device == "cpu" ? Precision::FP32 : Precision::BF16) : parse_precision(a.precision, "--precision");
  const BatchPlan plan = parse_batches(a.batches);
  infer::EngineOptions eo;
  eo.precision = precision;
  const bool synthetic_table = int8 && a.calibration == kSyntheticCalibration;
  if (int8 && !synthetic_table) eo.int8_input_scales = infer::read_int8_input_scales(a.calibration);
  eo.fill = infer::parse_input_fill(a.fill);
  eo.seed = a.seed;
  eo.checkpoint = a.checkpoint;
  eo.fold_batch_norm = a.fold;
  eo.fuse_epilogues = a.fuse;
  eo.cuda_graph = a.graph;
  infer::check_options(a.measure);
  if (a.memory_limit_gib < 0) throw_config("--memory-limit must be >= 0 GiB, got {}", a.memory_limit_gib);
  if (a.net.empty() && a.checkpoint.empty()) throw_config("give --net, --checkpoint or both");
  infer::ServerOptions server;
  server.rate = a.rate;
  server.max_batch = a.max_batch;
  server.latency_bound = a.latency_bound;
  server.seconds = a.measure.min_seconds;
  server.seed = a.seed;
  const bool offline = a.scenario == "offline";
  if (!offline && a.batches != std::vector<std::string>{"1", "8", "64"})
    throw_config("--batch is for the offline scenario; {} sets its own batch sizes (--max-batch)", a.scenario);
  if (a.scenario == "server") infer::validate(server);
  if (a.rate != 0 && a.scenario != "server")
    throw_config("--rate is the server scenario's offered rate; {} does not use it", a.scenario);
  if ((a.rate_lo != 0 || a.rate_hi != 0) && a.scenario != "server-search")
    throw_config("--rate-lo/--rate-hi bracket the server-search scenario; {} does not use them", a.scenario);
  if (a.memory_limit_gib != 0 && !plan.max) throw_config("--memory-limit is the budget of --batch max");
  // Every rank streams its own batches on its own device; rank 0 gathers their figures. The job
  // opens nothing yet: the flags are checked against it first.
  Job job = Job::of_launch();
  const bool distributed = job.together();
  if (a.scenario == "server-search" && distributed)
    throw_config("--scenario server-search searches one process's rate; under mpirun run --scenario server at a rate");
  if (a.scenario == "server-search") {
    server.rate = 1;  // each trial's own
    infer::validate(server);
    if (a.rate_lo < 0 || a.rate_hi < 0 || (a.rate_hi > 0 && a.rate_lo >= a.rate_hi))
      throw_config("--rate-lo ({}) and --rate-hi ({}): 0 for the default, else 0 < lo < hi", a.rate_lo, a.rate_hi);
    if (a.rate_steps < 1) throw_config("--rate-steps must be >= 1, got {}", a.rate_steps);
  }
  if (a.min_queries < 1) throw_config("--min-queries must be >= 1, got {}", a.min_queries);
  const int rank = job.rank();
  const std::string device = job.device_for_ranks(a.device, a.gpus);
  check_backend_precision(device, precision);
  if (device != "cpu") EngineCache::from_environment();  // a bad CNNSCALE_ENGINE_CACHE: exit 2 before loading
  const std::string dir = prepare_infer_results(a.results_root, a.experiment, a.run_id, a.no_results, rank == 0);

  const NetSpec spec = infer::network_to_run(a.net, a.checkpoint);
  if (synthetic_table) eo.int8_input_scales = synthetic_input_scales(a, spec, device);
  Backend* backend = &job.open_backend(device, 0, precision, {.fc_gemv = fc_gemv_from_name(a.fc_gemv)});
  if (distributed) {
    job.bind_devices();  // no two ranks on one GPU
    a.provenance.hosts = distinct_hosts(job.hosts());
    for (const RankDevice& r : job.devices()) a.rank_devices.push_back(r.device);
  }
  infer::InferenceEngine engine(spec, *backend, eo);
  measure::EnergyMonitor* energy = &job.open_energy_monitor(a.power_hz);

  if (!offline) return run_scenario(a, spec, engine, energy, server, job, dir);

  if (distributed) a.measure.before_window = [&job] { job.start_together(); };
  std::vector<int64_t> sizes = plan.sizes, beyond;
  std::optional<infer::MaxBatch> max;
  if (plan.max) {
    int64_t limit = static_cast<int64_t>(a.memory_limit_gib * double(int64_t{1} << 30));
    if (limit == 0)
      limit = backend->device().is_cpu() ? host_available_bytes() / 2 : gpu_facts(backend->device().index).memory_bytes;
    if (limit <= 0) throw_config("--batch max: the device's memory is unknown here; give --memory-limit GiB");
    max = infer::find_max_batch(engine, limit);
    int64_t batch = max->batch;
    if (distributed) {  // every rank runs the same batch size: the smallest any rank fits
      const std::vector<double> all = job.gather(static_cast<double>(batch));
      batch = static_cast<int64_t>(*std::min_element(all.begin(), all.end()));
    }
    // Listed sizes beyond the largest that fits would fail to allocate: left out, and said so.
    std::vector<int64_t> fit;
    for (int64_t s : plan.sizes) {
      if (s < batch) fit.push_back(s);
      if (s > batch) beyond.push_back(s);
    }
    if (!beyond.empty() && rank == 0)
      std::fprintf(stderr, "cnnscale infer: batch %s left out: the largest batch that fits is %lld\n",
                   fmt::format("{}", fmt::join(beyond, ",")).c_str(), static_cast<long long>(batch));
    fit.push_back(batch);
    sizes = fit;
  }

  std::vector<infer::BatchFigures> rows;
  std::vector<InferBatch> batches;
  for (int64_t batch : sizes) {
    infer::BatchFigures f = infer::measure_batch(engine, batch, energy, a.measure);
    InferBatch b = infer::batch_result(f);
    if (distributed) infer::add_job_figures(b, job.gather(f.images_per_s), job.gather(f.watts.value_or(std::nan(""))));
    rows.push_back(f);
    batches.push_back(b);
  }
  if (rank != 0) return;

  {
    InferResult out = run_result(a, spec, engine, "offline", job.size());
    out.batches = batches;
    if (max) out.max_batch = infer::max_batch_result(*max, sizes.back(), beyond);
    publish(a, out, dir);
    if (a.json) return;
  }
  std::printf("%s on %s, %s, %s input%s, %zu batch norm(s) folded, %zu epilogue(s) fused%s\n", spec.name().c_str(),
              backend->description().c_str(), int8 ? "int8" : precision_name(precision).c_str(),
              infer::input_fill_name(eo.fill).c_str(),
              a.checkpoint.empty() ? ", initialised weights" : (", weights of " + a.checkpoint).c_str(),
              engine.folded_batch_norms(), engine.fused_epilogues(),
              distributed ? (", rank 0 of " + std::to_string(job.size())).c_str() : "");
  if (!backend->device().is_cpu())
    std::printf("CUDA graph: %s (%lld forward passes replayed)\n", engine.cuda_graph().c_str(),
                static_cast<long long>(engine.graph_replays()));
  if (max)
    std::printf("largest batch in %.2f GiB: %lld (model: %.3f GiB + %.3f MiB per sample)\n",
                static_cast<double>(max->limit_bytes) / double(int64_t{1} << 30), static_cast<long long>(sizes.back()),
                static_cast<double>(max->fixed_bytes) / double(int64_t{1} << 30),
                static_cast<double>(max->bytes_per_sample) / double(1 << 20));
  std::printf("%7s %12s %10s %10s %10s %11s %9s %11s %9s %9s\n", "batch", "images/s", "p50 ms", "p90 ms", "p99 ms",
              "J/image", "W", "images/J", "SM MHz", "peak GiB");
  for (size_t i = 0; i < rows.size(); ++i) {
    const infer::BatchFigures& f = rows[i];
    std::printf("%7lld %12.1f %10.3f %10.3f %10.3f %11s %9s %11s %9s %9.3f\n", static_cast<long long>(f.batch),
                f.images_per_s, 1e3 * f.latency.p50, 1e3 * f.latency.p90, 1e3 * f.latency.p99,
                fmt_opt(f.joules_per_image, "%.5f").c_str(), fmt_opt(f.watts, "%.1f").c_str(),
                fmt_opt(f.images_per_joule, "%.1f").c_str(), fmt_opt(f.sm_clock_mhz, "%.0f").c_str(),
                static_cast<double>(f.peak_memory_bytes) / double(int64_t{1} << 30));
    if (distributed)
      std::printf("%7s job of %d ranks: %.1f images/s%s\n", "", job.size(),
                  batches[i].job_images_per_s.value(),
                  batches[i].job_watts.has_value() ? fmt::format(", {:.1f} W", batches[i].job_watts.value()).c_str() : "");
  }
}

// Where each setting of infer's table (experiment/command_settings.hpp) is held.
SettingFields infer_fields(InferArgs& a) {
  return {{"network", &a.net},
          {"checkpoint", &a.checkpoint},
          {"batch", &a.batches},
          {"calibration", &a.calibration},
          {"precision", &a.precision},
          {"device", &a.device},
          {"gpu_mix", &a.gpus},
          {"fill", &a.fill},
          {"seconds", &a.measure.min_seconds},
          {"latency_seconds", &a.measure.latency_seconds},
          {"warmup", &a.measure.warmup},
          {"memory_limit", &a.memory_limit_gib},
          {"power_hz", &a.power_hz},
          {"seed", &a.seed},
          {"fold", &a.fold},
          {"fc_gemv", &a.fc_gemv},
          {"fuse", &a.fuse},
          {"graph", &a.graph},
          {"scenario", &a.scenario},
          {"rate", &a.rate},
          {"max_batch", &a.max_batch},
          {"latency_bound", &a.latency_bound},
          {"rate_lo", &a.rate_lo},
          {"rate_hi", &a.rate_hi},
          {"rate_steps", &a.rate_steps},
          {"min_queries", &a.min_queries}};
}

}  // namespace

void register_infer(CLI::App& app) {
  auto args = std::make_shared<InferArgs>();
  InferArgs& a = *args;
  CLI::App* cmd = app.add_subcommand(
      "infer", "Inference throughput, latency percentiles and joules per image over batch sizes (forward only)");
  add_table_options(*cmd, infer_settings(), fields_by_name(infer_fields(a)));
  cmd->add_flag("--json", a.json, "Print one JSON line on stdout instead of the table");
  // As train and bench: a batch script or a test harness can turn on every run's results.
  if (const char* env = std::getenv("CNNSCALE_RESULTS"); env && *env) a.results_root = env;
  CLI::Option* results = cmd->add_option(
      "--results", a.results_root,
      "rank 0 saves the run's JSON object to DIR/<experiment>/infer/ for `cnnscale report` (default: "
      "$CNNSCALE_RESULTS; without either nothing is saved)");
  cmd->add_option("--experiment", a.experiment, "experiment name (the results subfolder)")->capture_default_str();
  cmd->add_option("--run-id", a.run_id,
                  "Name of the result file, DIR/<experiment>/infer/ID.json (as a sweep names its runs); refused when "
                  "it exists (default: network, precision, scenario, device and time)");
  cmd->add_flag("--no-results", a.no_results, "save nothing, even with $CNNSCALE_RESULTS set")->excludes(results);
  cmd->callback([args] { run_infer(*args); });
}

}  // namespace cnnscale::app
