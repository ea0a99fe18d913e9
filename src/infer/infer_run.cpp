// check_infer_request and run_infer (infer_run.hpp).
#include "infer/infer_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "backend/engine_cache.hpp"
#include "core/error.hpp"
#include "data/synthetic_dataset.hpp"
#include "infer/calibrate_run.hpp"
#include "infer/calibration.hpp"
#include "infer/result_figures.hpp"
#include "io/provenance.hpp"
#include "job/job.hpp"
#include "net/net.hpp"

namespace cnnscale::infer {

namespace {

constexpr int64_t kSyntheticCalibrationSamples = 8;

// The engine cache (CNNSCALE_ENGINE_CACHE) whose measured choices the run took, or null: its
// kernels were chosen by an earlier process's search on the same GPU model and libraries.
TextFigure engine_cache_used() {
  const EngineCache* cache = EngineCache::from_environment();
  return cache ? TextFigure(cache->path()) : TextFigure::null();
}

void parse_batches(const std::vector<std::string>& items, InferPlan& plan) {
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

// --calibration synthetic: a table measured here, on the device the run uses, as `calibrate --method
// max` measures one: the network in fp32 (batch norms folded as the run folds them) over
// kSyntheticCalibrationSamples samples of the run's own input (--fill, --seed), each quantised
// layer's input scale its max |x| / 127. It keeps the run's activations in int8's range, so the
// kernels see the values they would with a real table; it says nothing of accuracy, for which a
// table from real data (cnnscale calibrate) is needed.
std::map<std::string, double> synthetic_input_scales(const InferRequest& r, const NetSpec& spec,
                                                     const std::string& device) {
  std::unique_ptr<Backend> backend = make_backend(device, 0, Precision::FP32);
  EngineOptions eo;
  eo.checkpoint = r.checkpoint;
  eo.seed = r.seed;  // without a checkpoint, the weights the run initialises
  eo.fold_batch_norm = r.fold;
  eo.fuse_epilogues = false;  // every quantised layer's input as the unfused network computes it
  eo.cuda_graph = false;
  InferenceEngine engine(spec, *backend, eo);
  const SyntheticDataset data(Shape(spec.input_shape()), spec.classes(), kSyntheticCalibrationSamples,
                              parse_synthetic_fill(r.fill), r.seed);
  CalibrationOptions co;
  co.method = CalibrationMethod::Max;
  co.batch = kSyntheticCalibrationSamples;
  std::map<std::string, double> scales;
  for (const QuantizedLayer& q : calibrate(engine, data, kSyntheticCalibrationSamples, co).layers)
    scales[q.layer] = q.input_scale();
  return scales;
}

// What a run's figures are measured on and by, for the result and the command's table.
class InferJobRun {
 public:
  explicit InferJobRun(const InferRequest& r) : r_(r) {}

  InferRun run() {
    InferPlan& plan = run_.plan;
    Provenance provenance = start_provenance();
    // Every rank streams its own batches on its own device; rank 0 gathers their figures. The job
    // opens nothing yet: the flags are checked against it first.
    Job job = Job::of_launch();
    plan = check_infer_request(r_, job.together());
    const bool distributed = job.together();
    const std::string device = job.device_for_ranks(r_.device, r_.gpus);
    check_backend_precision(device, plan.precision);
    if (device != "cpu") EngineCache::from_environment();  // a bad CNNSCALE_ENGINE_CACHE: exit 2 before loading
    dir_ = prepare_infer_results(r_.results_root, r_.experiment, r_.run_id, r_.no_results, job.rank() == 0);

    const NetSpec spec = network_to_run(r_.net, r_.checkpoint);
    if (plan.synthetic_table) plan.engine.int8_input_scales = synthetic_input_scales(r_, spec, device);
    Backend& backend = job.open_backend(device, 0, plan.precision, {.fc_gemv = fc_gemv_from_name(r_.fc_gemv)});
    if (distributed) {
      job.bind_devices();  // no two ranks on one GPU
      provenance.hosts = distinct_hosts(job.hosts());
      for (const RankDevice& d : job.devices()) rank_devices_.push_back(d.device);
    }
    InferenceEngine engine(spec, backend, plan.engine);
    measure::EnergyMonitor* energy = &job.open_energy_monitor(r_.power_hz);
    run_.distributed = distributed;
    run_.ranks = job.size();
    const std::optional<InferResult> result = plan.offline ? offline(job, engine, energy) : scenario(job, engine, energy);
    if (!result) return std::move(run_);  // not rank 0

    run_.rank0 = true;
    run_.result = *result;
    set_end(provenance);
    run_.result.provenance = provenance;
    run_.result.settings = r_.settings;
    save_infer_result(run_.result, dir_, r_.run_id);
    run_.backend_description = backend.description();
    run_.on_cpu = backend.device().is_cpu();
    run_.folded_batch_norms = engine.folded_batch_norms();
    run_.fused_epilogues = engine.fused_epilogues();
    run_.cuda_graph = engine.cuda_graph();
    run_.graph_replays = static_cast<int64_t>(engine.graph_replays());
    return std::move(run_);
  }

 private:
  // What every result file begins with: what ran, on what, and how its passes were queued.
  InferResult run_result(InferenceEngine& engine, const std::string& scenario, int world_size) const {
    InferResult r;
    const Device device = engine.backend().device();
    r.int8 = engine.int8() ? Figure<InferInt8>(int8_result(engine, r_.calibration)) : Figure<InferInt8>::null();
    r.command = std::string("infer");
    r.scenario = scenario;
    r.net = engine.spec().name();
    r.device = device.to_string();
    r.precision = engine.int8() ? std::string("int8") : precision_name(engine.options().precision);
    r.checkpoint = text_or_null(r_.checkpoint);
    r.fill = input_fill_name(engine.options().fill);
    r.folded_batch_norms = static_cast<int64_t>(engine.folded_batch_norms());
    r.fused_epilogues = static_cast<int64_t>(engine.fused_epilogues());
    r.fc_gemv = device.is_cpu() ? TextFigure::null() : TextFigure(r_.fc_gemv);
    r.cuda_graph = engine.cuda_graph();
    r.graph_replays = static_cast<int64_t>(engine.graph_replays());
    r.engine_cache = engine_cache_used();
    r.world_size = world_size;
    r.devices = rank_devices_.empty() ? std::vector<std::string>{device.to_string()} : rank_devices_;
    return r;
  }

  // single-stream, server and server-search: one run of the scenario; under mpirun every rank runs
  // its own and rank 0 adds up their rates (server: achieved queries/s).
  std::optional<InferResult> scenario(const Job& job, InferenceEngine& engine, measure::EnergyMonitor* energy) {
    const ServerOptions& server = run_.plan.server;
    job.start_together();  // the ranks' runs start together (their rates are added up)
    ScenarioFigures f;
    if (r_.scenario == "single-stream")
      f = run_single_stream_scenario(engine, energy, r_.measure.min_seconds, r_.min_queries);
    else if (r_.scenario == "server")
      f = run_server_scenario(engine, energy, server);
    else
      f = run_server_search(engine, server, r_.rate_lo, r_.rate_hi, r_.rate_steps);
    const double rate = f.single_stream ? f.single_stream->queries / f.single_stream->seconds : f.server->achieved_rate;
    std::vector<double> rates = job.gather(rate);
    if (job.rank() != 0) return std::nullopt;
    InferResult j = run_result(engine, f.scenario, job.size());
    add_scenario_figures(j, f, rate, rates);
    run_.scenario = f;
    run_.rate = rate;
    return j;
  }

  // offline: each batch size's throughput, latency and energy; under mpirun each rank's figures
  // gathered into the job's.
  std::optional<InferResult> offline(const Job& job, InferenceEngine& engine, measure::EnergyMonitor* energy) {
    const InferPlan& plan = run_.plan;
    BatchMeasureOptions measure = r_.measure;
    if (job.together()) measure.before_window = [&job] { job.start_together(); };
    std::vector<int64_t> sizes = plan.sizes, beyond;
    std::optional<MaxBatch> max;
    if (plan.max) {
      int64_t limit = static_cast<int64_t>(r_.memory_limit_gib * double(int64_t{1} << 30));
      const Device device = engine.backend().device();
      if (limit == 0) limit = device.is_cpu() ? host_available_bytes() / 2 : gpu_facts(device.index).memory_bytes;
      if (limit <= 0) throw_config("--batch max: the device's memory is unknown here; give --memory-limit GiB");
      max = find_max_batch(engine, limit);
      int64_t batch = max->batch;
      if (job.together()) {  // every rank runs the same batch size: the smallest any rank fits
        const std::vector<double> all = job.gather(static_cast<double>(batch));
        batch = static_cast<int64_t>(*std::min_element(all.begin(), all.end()));
      }
      // Listed sizes beyond the largest that fits would fail to allocate: left out, and said so.
      std::vector<int64_t> fit;
      for (int64_t s : plan.sizes) {
        if (s < batch) fit.push_back(s);
        if (s > batch) beyond.push_back(s);
      }
      if (!beyond.empty() && job.rank() == 0)
        std::fprintf(stderr, "cnnscale infer: batch %s left out: the largest batch that fits is %lld\n",
                     fmt::format("{}", fmt::join(beyond, ",")).c_str(), static_cast<long long>(batch));
      fit.push_back(batch);
      sizes = fit;
    }

    std::vector<InferBatch> batches;
    for (int64_t batch : sizes) {
      BatchFigures f = measure_batch(engine, batch, energy, measure);
      InferBatch b = batch_result(f);
      if (job.together()) add_job_figures(b, job.gather(f.images_per_s), job.gather(f.watts.value_or(std::nan(""))));
      run_.rows.push_back(f);
      batches.push_back(b);
    }
    if (job.rank() != 0) return std::nullopt;
    InferResult out = run_result(engine, "offline", job.size());
    out.batches = batches;
    if (max) out.max_batch = max_batch_result(*max, sizes.back(), beyond);
    run_.max = max;
    return out;
  }

  const InferRequest& r_;
  InferRun run_;
  std::string dir_;                         // where rank 0 saves the result ("": nowhere)
  std::vector<std::string> rank_devices_;  // under mpirun: each rank's device, in rank order
};

}  // namespace

InferPlan check_infer_request(const InferRequest& r, bool together) {
  InferPlan plan;
  plan.int8 = r.precision == "int8";
  if (plan.int8 && r.calibration.empty())
    throw_config(
        "--precision int8 needs --calibration FILE (a table written by cnnscale calibrate --out) or --calibration "
        "synthetic (scales measured on the run's own input: for speed, not accuracy)");
  if (!plan.int8 && !r.calibration.empty()) throw_config("--calibration applies to --precision int8");
  // int8: the calibrated convolutions as int8 kernels, the rest of the network in bf16 on a GPU (whose
  // int8 engines read channels-last tensors, the order of 16-bit nets) and fp32 on the CPU.
  plan.precision = plan.int8 ? (r.device == "cpu" ? Precision::FP32 : Precision::BF16)
                             : parse_precision(r.precision, "--precision");
  parse_batches(r.batches, plan);
  EngineOptions& eo = plan.engine;
  eo.precision = plan.precision;
  plan.synthetic_table = plan.int8 && r.calibration == kSyntheticCalibration;
  if (plan.int8 && !plan.synthetic_table) eo.int8_input_scales = read_int8_input_scales(r.calibration);
  eo.fill = parse_input_fill(r.fill);
  eo.seed = r.seed;
  eo.checkpoint = r.checkpoint;
  eo.fold_batch_norm = r.fold;
  eo.fuse_epilogues = r.fuse;
  eo.cuda_graph = r.graph;
  check_options(r.measure);
  if (r.memory_limit_gib < 0) throw_config("--memory-limit must be >= 0 GiB, got {}", r.memory_limit_gib);
  if (r.net.empty() && r.checkpoint.empty()) throw_config("give --net, --checkpoint or both");
  ServerOptions& server = plan.server;
  server.rate = r.rate;
  server.max_batch = r.max_batch;
  server.latency_bound = r.latency_bound;
  server.seconds = r.measure.min_seconds;
  server.seed = r.seed;
  plan.offline = r.scenario == "offline";
  if (!plan.offline && r.batches != std::vector<std::string>{"1", "8", "64"})
    throw_config("--batch is for the offline scenario; {} sets its own batch sizes (--max-batch)", r.scenario);
  if (r.scenario == "server") validate(server);
  if (r.rate != 0 && r.scenario != "server")
    throw_config("--rate is the server scenario's offered rate; {} does not use it", r.scenario);
  if ((r.rate_lo != 0 || r.rate_hi != 0) && r.scenario != "server-search")
    throw_config("--rate-lo/--rate-hi bracket the server-search scenario; {} does not use them", r.scenario);
  if (r.memory_limit_gib != 0 && !plan.max) throw_config("--memory-limit is the budget of --batch max");
  if (r.scenario == "server-search" && together)
    throw_config("--scenario server-search searches one process's rate; under mpirun run --scenario server at a rate");
  if (r.scenario == "server-search") {
    server.rate = 1;  // each trial's own
    validate(server);
    if (r.rate_lo < 0 || r.rate_hi < 0 || (r.rate_hi > 0 && r.rate_lo >= r.rate_hi))
      throw_config("--rate-lo ({}) and --rate-hi ({}): 0 for the default, else 0 < lo < hi", r.rate_lo, r.rate_hi);
    if (r.rate_steps < 1) throw_config("--rate-steps must be >= 1, got {}", r.rate_steps);
  }
  if (r.min_queries < 1) throw_config("--min-queries must be >= 1, got {}", r.min_queries);
  return plan;
}

InferRun run_infer(const InferRequest& r) { return InferJobRun(r).run(); }

}  // namespace cnnscale::infer
