// Each rank's report, and the assembly of a train run's RunResults on rank 0 from all of them:
// /system, /timeline, /power, /epochs, and the summary (job and per rank) with each figure's method.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "solver/run_report.hpp"
#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "core/error.hpp"
#include "measure/energy_window.hpp"
#include "measure/metrics.hpp"

namespace cnnscale {

namespace {

nlohmann::json json_num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

nlohmann::json reading_json(const measure::EnergyReading& r) {
  return {{"iterations", r.iterations},
          {"seconds", r.seconds},
          {"segments", r.segments},
          {"gpu_joules", opt(r.gpu_joules)},
          {"gpu_sampled_joules", opt(r.gpu_sampled_joules)},
          {"cpu_package_joules", opt(r.cpu_package_joules)},
          {"cpu_dram_joules", opt(r.cpu_dram_joules)},
          {"gpu_method", r.gpu_method},
          {"cpu_method", r.cpu_method}};
}

}  // namespace

nlohmann::json make_rank_report(int rank, const std::string& host, const Device& device,
                                measure::EnergyMonitor& energy, const TrainResult& result, int64_t local_batch) {
  using nlohmann::json;
  json j = {{"rank", rank}, {"host", host}, {"local_batch", local_batch}};
  if (!device.is_cpu()) {
    measure::GpuPowerReader& gpu = energy.gpu();
    json g = {{"driver", opt(gpu.driver_version())}, {"power_limit_w", opt(gpu.power_limit_w())}};
    g["name"] = gpu_name(device.index);
    g["uuid"] = gpu_uuid(device.index);
    j["gpu"] = g;
  } else {
    // A CPU rank's speed depends on its BLAS thread pool (the sweep divides the cores among the
    // ranks): without it a 1-rank run with 2 threads against 2 ranks of 1 would read as a speedup.
    j["blas_threads"] = cpu_blas_threads();
  }
  // Timeline rows in run_results.hpp's phase order: the seven step phases, then the total.
  json iteration = json::array(), warmup = json::array(), seconds = json::array();
  for (const IterationPhases& p : result.phases) {
    iteration.push_back(p.iteration);
    warmup.push_back(p.warmup ? 1 : 0);
    json row = json::array();
    for (double s : p.seconds) row.push_back(json_num(s));
    row.push_back(json_num(p.total));
    seconds.push_back(row);
  }
  j["timeline"] = {{"iteration", iteration}, {"warmup", warmup}, {"seconds", seconds}};
  json means = json::array();
  for (double s : result.phase_summary.mean_seconds) means.push_back(json_num(s));
  means.push_back(json_num(result.phase_summary.mean_total));
  j["phase_means"] = means;
  j["phase_iterations"] = result.phase_summary.iterations;
  if (const measure::PowerSampler* sampler = energy.sampler()) {
    json t = json::array(), p = json::array(), a = json::array(), e = json::array(), c = json::array(),
         temp = json::array();
    for (const measure::PowerSample& s : sampler->samples(0)) {
      t.push_back(s.t_s);
      p.push_back(opt(s.power_w));
      a.push_back(opt(s.average_power_w));
      e.push_back(s.energy_mj ? json(static_cast<double>(*s.energy_mj)) : json());
      c.push_back(opt(s.sm_clock_mhz));
      temp.push_back(opt(s.temperature_c));
    }
    j["power"] = {{"t_s", t},          {"power_w", p},           {"avg_power_w", a},
                  {"energy_mj", e},    {"sm_clock_mhz", c},      {"temperature_c", temp}};
  }
  j["reads_rapl"] = energy.rapl_available();
  j["window"] = result.window ? reading_json(*result.window) : json();
  j["extension_iterations"] = result.extension_iterations;
  json loops = json::array();
  for (const PhaseLoopRecord& l : result.phase_loops)
    loops.push_back({{"repeat", l.repeat}, {"kind", l.kind}, {"reading", reading_json(l.reading)}});
  j["loops"] = loops;
  return j;
}

namespace {

using nlohmann::json;

double number(const json& v) {
  return v.is_number() ? v.get<double>() : kMissing;
}
std::optional<double> maybe(const json& v) {
  if (v.is_number()) return v.get<double>();
  return std::nullopt;
}
SummaryValue value(std::optional<double> v) {
  if (v && std::isfinite(*v)) return *v;
  return std::monostate{};
}
SummaryValue value(double v) {
  return std::isfinite(v) ? SummaryValue(v) : SummaryValue(std::monostate{});
}

SummaryValue per_iteration(std::optional<double> joules, int64_t iterations) {
  if (!joules || iterations <= 0) return std::monostate{};
  return value(*joules / static_cast<double>(iterations));
}

// Energy of one rank's reading for the run's device: the GPU counter on GPU runs; on CPU runs the
// host's RAPL package + DRAM (only on the rank that reads its host), else null.
std::optional<double> device_joules(const json& reading, bool gpu_run) {
  if (gpu_run) return maybe(reading["gpu_joules"]);
  auto pkg = maybe(reading["cpu_package_joules"]);
  if (!pkg) return std::nullopt;
  return *pkg + maybe(reading["cpu_dram_joules"]).value_or(0.0);
}

// The job's energy of one window across ranks: every GPU summed (null if any is missing); on CPU
// the RAPL-reading ranks summed (null if none reads).
std::optional<double> job_joules(const std::vector<json>& readings, const std::vector<json>& ranks, bool gpu_run) {
  std::optional<double> sum = 0.0;
  int counted = 0;
  for (size_t r = 0; r < readings.size(); ++r) {
    if (!gpu_run && !ranks[r]["reads_rapl"].get<bool>()) continue;
    auto j = device_joules(readings[r], gpu_run);
    if (!j) return std::nullopt;
    *sum += *j;
    ++counted;
  }
  if (counted == 0) return std::nullopt;
  return sum;
}

void put_metrics(std::map<std::string, SummaryValue>& out, const measure::Metrics& m) {
  out["seconds_per_batch"] = m.seconds_per_batch;
  out["samples_per_s"] = m.samples_per_second;
  out["joules_per_batch"] = value(m.joules_per_batch);
  out["watts"] = value(m.watts);
  out["joules_per_sample"] = value(m.joules_per_sample);
  out["gflops"] = value(m.gflops);
  out["gflops_per_watt"] = value(m.gflops_per_watt);
  out["edp_batch_js"] = value(m.edp_batch_js);
  out["whole_training_seconds"] = m.training_seconds;
  out["whole_training_joules"] = value(m.training_joules);
  out["edp_training_js"] = value(m.edp_training_js);
}

}  // namespace

RunResults assemble_run_results(const RunDescription& run, const TrainResult& r0, const std::vector<json>& ranks,
                                int64_t whole_epochs, int64_t whole_samples) {
  RunResults res;
  res.experiment = run.experiment;
  res.run_id = run.run_id;
  res.config_text = run.config_text;
  const bool gpu_run = run.device_kind == "gpu";
  const auto n = static_cast<int64_t>(ranks.size());

  // ---- /system ----
  for (const json& r : ranks) {
    const std::string host = r["host"].get<std::string>();
    if (std::find(res.system.hosts.begin(), res.system.hosts.end(), host) == res.system.hosts.end())
      res.system.hosts.push_back(host);
    if (!r.contains("gpu")) continue;
    const json& g = r["gpu"];
    GpuInfo info;
    info.rank = r["rank"].get<int64_t>();
    info.host = host;
    if (g.contains("name")) info.name = g["name"].get<std::string>();
    if (g.contains("uuid")) info.uuid = g["uuid"].get<std::string>();
    if (g["driver"].is_string()) info.driver = g["driver"].get<std::string>();
    info.power_limit_w = number(g["power_limit_w"]);
    res.system.gpus.push_back(info);
  }
  res.system.cuda_version = run.cuda_version;
  res.system.cudnn_version = run.cudnn_version;
  res.system.nccl_version = run.nccl_version;
  res.system.mpi_version = run.mpi_version;

  // ---- /timeline: rank 0's iterations; every rank ran the same ones ----
  res.timeline = Timeline(n);
  const json& it0 = ranks[0]["timeline"]["iteration"];
  for (size_t i = 0; i < it0.size(); ++i) res.timeline.add_iteration(it0[i].get<int64_t>(), ranks[0]["timeline"]["warmup"][i] == 1);
  for (int64_t r = 0; r < n; ++r) {
    const json& tl = ranks[static_cast<size_t>(r)]["timeline"];
    if (tl["iteration"] != it0)
      throw_runtime("results: rank {} recorded other iterations than rank 0 ({} vs {})", r, tl["iteration"].size(),
                    it0.size());
    for (size_t i = 0; i < it0.size(); ++i)
      for (int64_t p = 0; p < kTimelinePhaseCount; ++p)
        res.timeline.at(static_cast<int64_t>(i), r, static_cast<TimelinePhase>(p)) =
            number(tl["seconds"][i][static_cast<size_t>(p)]);
  }

  // ---- /power ----
  for (const json& r : ranks) {
    if (!r.contains("power")) continue;
    const json& p = r["power"];
    PowerSeries s;
    s.rank = r["rank"].get<int64_t>();
    if (r.contains("gpu") && r["gpu"].contains("uuid")) s.uuid = r["gpu"]["uuid"].get<std::string>();
    for (const auto& [key, column] : std::initializer_list<std::pair<const char*, std::vector<double>*>>{
             {"t_s", &s.t_s},
             {"power_w", &s.power_w},
             {"avg_power_w", &s.avg_power_w},
             {"energy_mj", &s.energy_mj},
             {"sm_clock_mhz", &s.sm_clock_mhz},
             {"temperature_c", &s.temperature_c}})
      for (const json& v : p[key]) column->push_back(number(v));
    res.power.push_back(std::move(s));
  }
  res.epochs = run.epochs;

  // ---- summary: identity ----
  auto& S = res.summary;
  auto& M = res.methods;
  S["net"] = run.net;
  S["data"] = run.data;
  S["device"] = run.device_kind;
  S["precision"] = std::string("fp32");
  S["measure"] = std::string(measure_mode_name(run.measure));
  S["world_size"] = static_cast<double>(n);
  S["global_batch"] = static_cast<double>(run.global_batch);
  S["seed"] = static_cast<double>(run.seed);
  S["iterations"] = static_cast<double>(run.iterations);
  S["iterations_per_epoch"] = static_cast<double>(run.iterations_per_epoch);
  S["allreduce_overlap"] = run.overlap ? 1.0 : 0.0;
  if (std::all_of(ranks.begin(), ranks.end(), [](const json& r) { return r.contains("blas_threads"); })) {
    int64_t most = 0, fewest = 0;
    for (const json& r : ranks) {
      const int64_t t = r["blas_threads"].get<int64_t>();
      most = std::max(most, t);
      fewest = fewest == 0 ? t : std::min(fewest, t);
    }
    S["threads_per_rank"] = static_cast<double>(most);
    M["threads_per_rank"] =
        fewest == most ? fmt::format("OpenBLAS threads of each of the {} CPU ranks (openblas_get_num_threads)", n)
                       : fmt::format("the most OpenBLAS threads of a rank: the ranks had {} to {}", fewest, most);
  }
  S["allreduce_algo"] = run.allreduce_algo;
  std::string names;
  for (const GpuInfo& g : res.system.gpus) names += (names.empty() ? "" : ",") + g.name.value_or("?");
  S["gpu_names"] = names;
  for (const std::string& tag : run.tags) {
    const auto eq = tag.find('=');
    S["tag." + tag.substr(0, eq)] = tag.substr(eq + 1);
  }
  S["final_loss"] = value(r0.final_loss);
  S["test_top1"] = r0.test ? value(r0.test->top1) : SummaryValue{};
  S["test_top5"] = r0.test ? value(r0.test->top5) : SummaryValue{};
  S["test_loss"] = r0.test ? value(r0.test->loss) : SummaryValue{};

  // ---- summary: steady window metrics, per rank and for the job ----
  const int64_t epochs = whole_epochs > 0 ? whole_epochs : std::max<int64_t>(1, std::llround(run.run_epochs));
  const int64_t samples = whole_samples > 0 ? whole_samples : run.train_samples;
  const int64_t whole_per_epoch = (samples + run.global_batch - 1) / run.global_batch;
  S["whole_epochs"] = static_cast<double>(epochs);
  S["whole_iterations"] = static_cast<double>(whole_per_epoch * epochs);
  // The study counts a last partial batch as an iteration; the trainer drops it (iterations_per_epoch
  // = floor(train samples / batch)). Say so wherever the two differ, so neither reads as a mistake.
  {
    std::string why = fmt::format(
        "ceil({} samples / global batch {}) = {} per epoch x {} epochs (a last partial "
        "batch counts as an iteration)",
        samples, run.global_batch, whole_per_epoch, epochs);
    if (whole_per_epoch != run.iterations_per_epoch)
      why += fmt::format(
          "; iterations_per_epoch {} is the run's own epoch: floor({} training samples / {}), the "
          "last partial batch dropped{}",
          run.iterations_per_epoch, run.train_samples, run.global_batch,
          samples != run.train_samples ? ", of a training set of another size than --whole-samples" : "");
    M["whole_iterations"] = why;
  }
  M["whole_training_seconds"] = fmt::format(
      "seconds_per_batch x ceil({} samples / global batch {}) x {} epochs", samples, run.global_batch, epochs);
  M["whole_training_joules"] = "joules_per_batch x the same iterations";
  M["gflops"] = fmt::format("2 x {:.4g} forward MACs per sample x 3 (training) x samples_per_s / 1e9", run.forward_macs);

  std::vector<json> windows;
  for (const json& r : ranks) windows.push_back(r["window"]);
  const bool have_window =
      std::all_of(windows.begin(), windows.end(), [](const json& w) { return w.is_object() && w["iterations"] > 0; });
  S["window_iterations"] = have_window ? static_cast<double>(windows[0]["iterations"].get<int64_t>()) : kMissing;
  S["window_extension_iterations"] = static_cast<double>(ranks[0]["extension_iterations"].get<int64_t>());
  if (have_window) {
    double slowest = 0;
    for (int64_t r = 0; r < n; ++r) {
      const json& w = windows[static_cast<size_t>(r)];
      const json& rep = ranks[static_cast<size_t>(r)];
      slowest = std::max(slowest, w["seconds"].get<double>());
      measure::MeasuredWindow mw{w["iterations"].get<int64_t>(), w["seconds"].get<double>(),
                                 device_joules(w, gpu_run), ""};
      if (!gpu_run && !rep["reads_rapl"].get<bool>()) mw.joules.reset();
      measure::Workload wl{rep["local_batch"].get<int64_t>(), run.forward_macs, whole_per_epoch, epochs};
      auto& out = res.rank_summary.emplace_back();
      out["rank"] = static_cast<double>(r);
      out["host"] = rep["host"].get<std::string>();
      if (rep.contains("gpu") && rep["gpu"].contains("uuid")) out["gpu_uuid"] = rep["gpu"]["uuid"].get<std::string>();
      out["local_batch"] = static_cast<double>(wl.samples_per_batch);
      put_metrics(out, measure::compute_metrics(mw, wl));
      out["gpu_sampled_joules_per_batch"] =
          per_iteration(maybe(w["gpu_sampled_joules"]), mw.iterations);
      out["cpu_package_joules_per_batch"] =
          per_iteration(maybe(w["cpu_package_joules"]), mw.iterations);
    }
    const int64_t iterations = windows[0]["iterations"].get<int64_t>();
    S["window_seconds"] = slowest;
    measure::MeasuredWindow job{iterations, slowest, job_joules(windows, ranks, gpu_run), ""};
    measure::Workload wl{run.global_batch, run.forward_macs, whole_per_epoch, epochs};
    put_metrics(S, measure::compute_metrics(job, wl));
    // CPU energy beside GPU runs (and on CPU runs): one RAPL-reading rank per host, summed.
    std::optional<double> pkg = 0.0, dram = 0.0;
    int readers = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (!ranks[static_cast<size_t>(r)]["reads_rapl"].get<bool>()) continue;
      ++readers;
      auto p = maybe(windows[static_cast<size_t>(r)]["cpu_package_joules"]);
      auto d = maybe(windows[static_cast<size_t>(r)]["cpu_dram_joules"]);
      if (pkg && p) *pkg += *p; else pkg.reset();
      if (dram && d) *dram += *d; else dram.reset();
    }
    if (readers == 0) pkg.reset(), dram.reset();
    S["cpu_package_joules_per_batch"] = per_iteration(pkg, iterations);
    S["cpu_dram_joules_per_batch"] = per_iteration(dram, iterations);
    M["seconds_per_batch"] = fmt::format(
        "slowest of {} ranks over the steady window: {} iterations after warm-up{}, {:.3f} s, evaluation and "
        "checkpoint pauses excluded",
        n, iterations,
        S["window_extension_iterations"] != SummaryValue(0.0) ? " (incl. extension steps to reach --min-window)" : "",
        slowest);
    M["joules_per_batch"] =
        gpu_run ? fmt::format("sum over {} GPUs; each: {}", n, windows[0]["gpu_method"].get<std::string>())
                : "CPU run: RAPL package + DRAM of each host; " + windows[0]["cpu_method"].get<std::string>();
    M["cpu_package_joules_per_batch"] = windows[0]["cpu_method"].get<std::string>();
  } else {
    for (const char* k : {"window_seconds", "seconds_per_batch", "samples_per_s", "joules_per_batch", "watts",
                          "joules_per_sample", "gflops", "gflops_per_watt", "edp_batch_js", "whole_training_seconds",
                          "whole_training_joules", "edp_training_js", "cpu_package_joules_per_batch",
                          "cpu_dram_joules_per_batch"})
      S[k] = std::monostate{};
    M["seconds_per_batch"] = "null: no steady window (too few iterations)";
  }

  // ---- summary: per-phase seconds, slowest rank's mean over the steady iterations ----
  for (int64_t p = 0; p < kTimelinePhaseCount; ++p) {
    double worst = kMissing;
    for (const json& r : ranks) {
      const double v = r["phase_iterations"].get<int64_t>() > 0 ? number(r["phase_means"][static_cast<size_t>(p)])
                                                                : kMissing;
      if (std::isfinite(v)) worst = std::isfinite(worst) ? std::max(worst, v) : v;
    }
    S[fmt::format("time_{}_s", kTimelinePhaseNames[static_cast<size_t>(p)])] = value(worst);
  }
  M["time_forward_s"] = gpu_run ? "CUDA events on the compute stream (comm_busy: on the communication stream), "
                                  "slowest rank's mean over the steady iterations"
                                : "host clock, slowest rank's mean over the steady iterations";

  // ---- summary: measure phases ----
  if (run.measure == MeasureMode::Phases) {
    const json& loops0 = ranks[0]["loops"];
    std::vector<measure::PhaseRepeat> energy_repeats, time_repeats;
    bool all_energy = true;
    for (size_t i = 0; i + 2 < loops0.size(); i += 3) {
      measure::PhaseRepeat e, t;
      measure::PhaseLoop* e_loops[] = {&e.forward, &e.forward_backward, &e.full_step};
      measure::PhaseLoop* t_loops[] = {&t.forward, &t.forward_backward, &t.full_step};
      for (size_t k = 0; k < 3; ++k) {
        std::vector<json> readings;
        double seconds = 0;
        for (const json& r : ranks) {
          readings.push_back(r["loops"][i + k]["reading"]);
          seconds = std::max(seconds, readings.back()["seconds"].get<double>());
        }
        const int64_t iters = readings[0]["iterations"].get<int64_t>();
        auto joules = job_joules(readings, ranks, gpu_run);
        all_energy = all_energy && joules.has_value();
        *e_loops[k] = {joules.value_or(0.0), iters, seconds};
        *t_loops[k] = {seconds, iters, seconds};  // seconds in the "joules" slot: the same difference
      }
      energy_repeats.push_back(e);
      time_repeats.push_back(t);
    }
    auto put = [&](const std::string& key, const measure::Stat& s) {
      S[key] = s.mean;
      S[key + "_std"] = s.stddev;
    };
    measure::PhaseEnergy times = measure::derive_phase_energy(time_repeats, 0.0);
    put("loop_forward_s", times.forward);
    put("loop_backward_s", times.backward);
    put("loop_update_allreduce_s", times.update_allreduce);
    S["loop_pooled_repeats"] = static_cast<double>(times.pooled_repeats);
    M["loop_forward_s"] = fmt::format(
        "phase-isolated loops after training (forward only, forward+backward, full step; each >= {} s, input "
        "batch fixed, no data loading), slowest rank, {} repeats; backward = (fwd+bwd) - fwd, update_allreduce = "
        "full - (fwd+bwd), after a non-decreasing least-squares fit of the three per-iteration times per repeat "
        "(loop_pooled_repeats: repeats whose loops came out of order and were pooled), so no phase is negative",
        run.phase_window, time_repeats.size());
    if (all_energy && !energy_repeats.empty()) {
      measure::PhaseEnergy e = measure::derive_phase_energy(energy_repeats, 0.0);
      put("energy_forward_j", e.forward);
      put("energy_backward_j", e.backward);
      put("energy_update_allreduce_j", e.update_allreduce);
      put("energy_full_step_j", e.full_step);
      M["energy_forward_j"] = (gpu_run ? "sum over GPUs of " : "RAPL package+DRAM per host, ") + e.method;
    } else {
      for (const char* k : {"energy_forward_j", "energy_backward_j", "energy_update_allreduce_j",
                            "energy_full_step_j"}) {
        S[k] = std::monostate{};
        S[std::string(k) + "_std"] = std::monostate{};
      }
      M["energy_forward_j"] = "null: no energy counter readable in the phase loops";
    }
  }
  return res;
}

}  // namespace cnnscale
