// Rank 0's assembly of a train run's RunResults from every rank's report (rank_report.hpp): /system,
// /timeline, /power, /epochs, and the summary (job and per rank) with each figure's method.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "solver/run_report.hpp"

#include "solver/split_report.hpp"
#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "core/error.hpp"
#include "measure/energy_window.hpp"
#include "measure/metrics.hpp"

namespace cnnscale {

namespace {

// A finite number, else null.
NumberFigure value(std::optional<double> v) {
  return v && std::isfinite(*v) ? NumberFigure(*v) : NumberFigure::null();
}

NumberFigure per_iteration(std::optional<double> joules, int64_t iterations) {
  if (!joules || iterations <= 0) return NumberFigure::null();
  return value(*joules / static_cast<double>(iterations));
}

// The job's energy of one window across ranks: every GPU summed (null if any is missing); on CPU
// the RAPL-reading ranks summed (null if none reads).
std::optional<double> job_joules(const std::vector<const measure::EnergyReading*>& readings,
                                 const std::vector<RankReport>& ranks, bool gpu_run) {
  std::optional<double> sum = 0.0;
  int counted = 0;
  for (size_t r = 0; r < readings.size(); ++r) {
    if (!gpu_run && !ranks[r].reads_rapl) continue;
    auto j = device_joules(*readings[r], gpu_run);
    if (!j) return std::nullopt;
    *sum += *j;
    ++counted;
  }
  if (counted == 0) return std::nullopt;
  return sum;
}

void put_metrics(WindowFigures& out, const measure::Metrics& m) {
  out.seconds_per_batch = m.seconds_per_batch;
  out.samples_per_s = m.samples_per_second;
  out.joules_per_batch = value(m.joules_per_batch);
  out.watts = value(m.watts);
  out.joules_per_sample = value(m.joules_per_sample);
  out.gflops = value(m.gflops);
  out.gflops_per_watt = value(m.gflops_per_watt);
  out.edp_batch_js = value(m.edp_batch_js);
  out.whole_training_seconds = m.training_seconds;
  out.whole_training_joules = value(m.training_joules);
  out.edp_training_js = value(m.edp_training_js);
}

}  // namespace

std::optional<double> device_joules(const measure::EnergyReading& reading, bool gpu_run) {
  if (gpu_run) return reading.gpu_joules;
  if (!reading.cpu_package_joules) return std::nullopt;
  return *reading.cpu_package_joules + reading.cpu_dram_joules.value_or(0.0);
}

void put_solver_figures(RunSummary& S, const SolverConfig& solver, int64_t global_batch) {
  S.lr = solver.lr;
  S.lr_scaled = solver.scaled_lr(global_batch);
  S.lr_scaling = solver.lr_scaling;
  S.lr_base_batch = static_cast<double>(solver.lr_base_batch);
  S.lr_policy = lr_policy_name(solver.policy);
  S.lr_gamma = solver.gamma;
  S.lr_step_epochs = solver.step_epochs;
  S.lr_milestones = fmt::format("{}", fmt::join(solver.milestones, ","));
  S.lr_power = solver.power;
  S.warmup_epochs = solver.warmup_epochs;
  S.warmup_iterations = static_cast<double>(solver.warmup_iterations);
  S.warmup_start_factor = solver.warmup_start_factor;
  S.momentum = solver.momentum;
  S.weight_decay = solver.weight_decay;
}

RunResults assemble_run_results(const RunDescription& run, const TrainResult& r0, const std::vector<RankReport>& ranks,
                                int64_t whole_epochs, int64_t whole_samples) {
  RunResults res;
  res.experiment = run.experiment;
  res.run_id = run.run_id;
  res.config_text = run.config_text;
  const bool gpu_run = run.device_kind == "gpu";
  const auto n = static_cast<int64_t>(ranks.size());

  // ---- /system ----
  for (const RankReport& r : ranks) {
    if (std::find(res.system.hosts.begin(), res.system.hosts.end(), r.host) == res.system.hosts.end())
      res.system.hosts.push_back(r.host);
    if (r.gpu)
      res.system.gpus.push_back(GpuInfo{r.rank, r.host, r.gpu->name, r.gpu->uuid, r.gpu->driver, r.gpu->power_limit_w,
                                        r.gpu->sm_count, r.gpu->memory_bytes, r.gpu->peak_sm_clock_mhz,
                                        r.gpu->compute_capability});
  }
  res.system.cuda_version = run.cuda_version;
  res.system.cudnn_version = run.cudnn_version;
  res.system.nccl_version = run.nccl_version;
  res.system.mpi_version = run.mpi_version;
  res.system.nccl_env = run.nccl_env;
  res.system.engine_cache = run.engine_cache;

  // ---- /timeline: rank 0's iterations; every rank ran the same ones ----
  res.timeline = Timeline(n);
  const std::vector<int64_t>& it0 = ranks[0].iteration;
  for (size_t i = 0; i < it0.size(); ++i) res.timeline.add_iteration(it0[i], ranks[0].warmup[i] == 1);
  for (int64_t r = 0; r < n; ++r) {
    const RankReport& rep = ranks[static_cast<size_t>(r)];
    if (rep.iteration != it0 || rep.seconds.size() != it0.size())
      throw_runtime("results: rank {} recorded other iterations than rank 0 ({} vs {})", r, rep.iteration.size(),
                    it0.size());
    for (size_t i = 0; i < it0.size(); ++i)
      for (int64_t p = 0; p < kTimelinePhaseCount; ++p)
        res.timeline.at(static_cast<int64_t>(i), r, static_cast<TimelinePhase>(p)) =
            rep.seconds[i][static_cast<size_t>(p)];
  }

  // ---- /power ----
  for (const RankReport& r : ranks)
    if (r.power) res.power.push_back(*r.power);
  res.epochs = run.epochs;

  // ---- summary: identity ----
  auto& S = res.summary;
  auto& M = res.methods;
  S.net = run.net;
  S.data = run.data;
  S.device = run.device_kind;
  S.precision = run.precision;
  S.allreduce_dtype = run.allreduce_dtype;
  S.allreduce_tuning = run.allreduce_tuning;
  S.measure = std::string(measure_mode_name(run.measure));
  S.world_size = static_cast<double>(n);
  S.global_batch = static_cast<double>(run.global_batch);
  S.seed = static_cast<double>(run.seed);
  S.iterations = static_cast<double>(run.iterations);
  S.iterations_per_epoch = static_cast<double>(run.iterations_per_epoch);
  S.allreduce_overlap = run.overlap ? 1.0 : 0.0;
  put_solver_figures(S, run.solver, run.global_batch);
  if (run.one_rank_exchange) S.one_rank_exchange = 1.0;
  if (std::all_of(ranks.begin(), ranks.end(), [](const RankReport& r) { return r.blas_threads.has_value(); })) {
    int64_t most = 0, fewest = 0;
    for (const RankReport& r : ranks) {
      const int64_t t = *r.blas_threads;
      most = std::max(most, t);
      fewest = fewest == 0 ? t : std::min(fewest, t);
    }
    S.threads_per_rank = static_cast<double>(most);
    M["threads_per_rank"] =
        fewest == most ? fmt::format("OpenBLAS threads of each of the {} CPU ranks (openblas_get_num_threads)", n)
                       : fmt::format("the most OpenBLAS threads of a rank: the ranks had {} to {}", fewest, most);
  }
  S.allreduce_algo = run.allreduce_algo;
  std::string names;
  for (const GpuInfo& g : res.system.gpus) names += (names.empty() ? "" : ",") + g.name.value_or("?");
  S.gpu_names = names;
  for (const std::string& tag : run.tags) {
    const auto eq = tag.find('=');
    S.tags[tag.substr(0, eq)] = tag.substr(eq + 1);
  }
  S.final_loss = value(r0.final_loss);
  S.test_top1 = r0.test ? value(r0.test->top1) : NumberFigure::null();
  S.test_top5 = r0.test ? value(r0.test->top5) : NumberFigure::null();
  S.test_loss = r0.test ? value(r0.test->loss) : NumberFigure::null();
  // Rank 0's loss scaling: the figure of the job, as its final loss is.
  S.skipped_steps = static_cast<double>(r0.skipped_steps);
  S.final_grad_scale = r0.final_grad_scale;
  M["final_grad_scale"] = run.precision == "fp16" ? "dynamic loss scale at the end of the run (fp16)"
                                                  : "1: no loss scaling (only fp16 scales its loss)";
  {
    int64_t peak = 0;
    for (const RankReport& r : ranks) peak = std::max(peak, r.peak_memory_bytes);
    S.peak_memory_bytes = static_cast<double>(peak);
    M["peak_memory_bytes"] =
        "the most bytes of tensors and workspaces one rank's backend held at once over the run (its own count "
        "of what it allocated, not the allocator's reserve), the largest over the ranks";
  }

  // ---- summary: steady window metrics, per rank and for the job ----
  const int64_t epochs = whole_epochs > 0 ? whole_epochs : std::max<int64_t>(1, std::llround(run.run_epochs));
  const int64_t samples = whole_samples > 0 ? whole_samples : run.train_samples;
  const int64_t whole_per_epoch = (samples + run.global_batch - 1) / run.global_batch;
  S.whole_epochs = static_cast<double>(epochs);
  S.whole_iterations = static_cast<double>(whole_per_epoch * epochs);
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
  M["gflops"] =
      fmt::format("2 x {:.4g} forward MACs per sample x 3 (training) x samples_per_s / 1e9", run.forward_macs);

  std::vector<const measure::EnergyReading*> windows;
  for (const RankReport& r : ranks) windows.push_back(r.window ? &*r.window : nullptr);
  const bool have_window = std::all_of(windows.begin(), windows.end(),
                                       [](const measure::EnergyReading* w) { return w && w->iterations > 0; });
  S.window_iterations = have_window ? static_cast<double>(windows[0]->iterations) : kMissing;
  S.window_extension_iterations = static_cast<double>(ranks[0].extension_iterations);
  if (have_window) {
    double slowest = 0;
    for (int64_t r = 0; r < n; ++r) {
      const measure::EnergyReading& w = *windows[static_cast<size_t>(r)];
      const RankReport& rep = ranks[static_cast<size_t>(r)];
      slowest = std::max(slowest, w.seconds);
      measure::MeasuredWindow mw{w.iterations, w.seconds, device_joules(w, gpu_run), ""};
      if (!gpu_run && !rep.reads_rapl) mw.joules.reset();
      measure::Workload wl{rep.local_batch, run.forward_macs, whole_per_epoch, epochs};
      auto& out = res.rank_summary.emplace_back();
      out.rank = static_cast<double>(r);
      out.host = rep.host;
      if (rep.gpu) out.gpu_uuid = rep.gpu->uuid;
      out.local_batch = static_cast<double>(wl.samples_per_batch);
      put_metrics(out, measure::compute_metrics(mw, wl));
      out.gpu_sampled_joules_per_batch = per_iteration(w.gpu_sampled_joules, mw.iterations);
      out.cpu_package_joules_per_batch = per_iteration(w.cpu_package_joules, mw.iterations);
      out.peak_memory_bytes = static_cast<double>(rep.peak_memory_bytes);
    }
    const int64_t iterations = windows[0]->iterations;
    S.window_seconds = slowest;
    measure::MeasuredWindow job{iterations, slowest, job_joules(windows, ranks, gpu_run), ""};
    measure::Workload wl{run.global_batch, run.forward_macs, whole_per_epoch, epochs};
    put_metrics(S, measure::compute_metrics(job, wl));
    // CPU energy beside GPU runs (and on CPU runs): one RAPL-reading rank per host, summed.
    std::optional<double> pkg = 0.0, dram = 0.0;
    int readers = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (!ranks[static_cast<size_t>(r)].reads_rapl) continue;
      ++readers;
      const auto p = windows[static_cast<size_t>(r)]->cpu_package_joules;
      const auto d = windows[static_cast<size_t>(r)]->cpu_dram_joules;
      if (pkg && p) *pkg += *p; else pkg.reset();
      if (dram && d) *dram += *d; else dram.reset();
    }
    if (readers == 0) pkg.reset(), dram.reset();
    S.cpu_package_joules_per_batch = per_iteration(pkg, iterations);
    S.cpu_dram_joules_per_batch = per_iteration(dram, iterations);
    M["seconds_per_batch"] = fmt::format(
        "slowest of {} ranks over the steady window: {} iterations after warm-up{}, {:.3f} s, evaluation and "
        "checkpoint pauses excluded",
        n, iterations,
        S.window_extension_iterations != NumberFigure(0.0) ? " (incl. extension steps to reach --min-window)" : "",
        slowest);
    M["joules_per_batch"] =
        gpu_run ? fmt::format("sum over {} GPUs; each: {}", n, windows[0]->gpu_method)
                : "CPU run: RAPL package + DRAM of each host; " + windows[0]->cpu_method;
    M["cpu_package_joules_per_batch"] = windows[0]->cpu_method;
  } else {
    for (NumberFigure* f : {&S.window_seconds, &S.seconds_per_batch, &S.samples_per_s, &S.joules_per_batch, &S.watts,
                            &S.joules_per_sample, &S.gflops, &S.gflops_per_watt, &S.edp_batch_js,
                            &S.whole_training_seconds, &S.whole_training_joules, &S.edp_training_js,
                            &S.cpu_package_joules_per_batch, &S.cpu_dram_joules_per_batch})
      *f = NumberFigure::null();
    M["seconds_per_batch"] = "null: no steady window (too few iterations)";
  }

  // ---- summary: per-phase seconds, slowest rank's mean over the steady iterations ----
  for (int64_t p = 0; p < kTimelinePhaseCount; ++p) {
    double worst = kMissing;
    for (const RankReport& r : ranks) {
      const double v = r.phase_iterations > 0 ? r.phase_means[static_cast<size_t>(p)] : kMissing;
      if (std::isfinite(v)) worst = std::isfinite(worst) ? std::max(worst, v) : v;
    }
    S.*kPhaseTimeFigures[static_cast<size_t>(p)] = value(worst);
  }
  // ---- summary: does the step wait for its input? ----
  const double data_s = S.time_data_s.value_or(kMissing), total_s = S.time_total_s.value_or(kMissing);
  if (std::isfinite(data_s) && std::isfinite(total_s) && total_s > 0) {
    S.input_wait_share = data_s / total_s;
    S.input_bound = data_s / total_s > kInputBoundShare ? 1.0 : 0.0;
  } else {
    S.input_wait_share = NumberFigure::null();
    S.input_bound = NumberFigure::null();
  }
  M["input_bound"] = fmt::format(
      "1 when the step waits for its batch (time_data_s, the host's wait for the prefetching loader) more than "
      "{:.0f} % of time_total_s: a faster input (more loader threads, shards) would speed the run up",
      100 * kInputBoundShare);
  M["time_forward_s"] = gpu_run ? "CUDA events on the compute stream (comm_busy: on the communication stream), "
                                  "slowest rank's mean over the steady iterations"
                                : "host clock, slowest rank's mean over the steady iterations";

  // ---- summary: measure phases ----
  // A stop during the loops (an interrupted run) keeps only whole repeats: maybe none.
  if (run.measure == MeasureMode::Phases && ranks[0].loops.size() < 3) {
    for (NumberFigure* f :
         {&S.loop_forward_s, &S.loop_forward_s_std, &S.loop_backward_s, &S.loop_backward_s_std,
          &S.loop_update_allreduce_s, &S.loop_update_allreduce_s_std, &S.loop_pooled_repeats, &S.energy_forward_j,
          &S.energy_forward_j_std, &S.energy_backward_j, &S.energy_backward_j_std, &S.energy_update_allreduce_j,
          &S.energy_update_allreduce_j_std, &S.energy_full_step_j, &S.energy_full_step_j_std})
      *f = NumberFigure::null();
    M["loop_forward_s"] = "null: the run was stopped before one whole repeat of the phase loops";
    M["energy_forward_j"] = M["loop_forward_s"];
  } else if (run.measure == MeasureMode::Phases) {
    const std::vector<PhaseLoopRecord>& loops0 = ranks[0].loops;
    std::vector<measure::PhaseRepeat> energy_repeats, time_repeats;
    bool all_energy = true;
    for (size_t i = 0; i + 2 < loops0.size(); i += 3) {
      measure::PhaseRepeat e, t;
      measure::PhaseLoop* e_loops[] = {&e.forward, &e.forward_backward, &e.full_step};
      measure::PhaseLoop* t_loops[] = {&t.forward, &t.forward_backward, &t.full_step};
      for (size_t k = 0; k < 3; ++k) {
        std::vector<const measure::EnergyReading*> readings;
        double seconds = 0;
        for (const RankReport& r : ranks) {
          readings.push_back(&r.loops.at(i + k).reading);
          seconds = std::max(seconds, readings.back()->seconds);
        }
        const int64_t iters = readings[0]->iterations;
        auto joules = job_joules(readings, ranks, gpu_run);
        all_energy = all_energy && joules.has_value();
        *e_loops[k] = {joules.value_or(0.0), iters, seconds};
        *t_loops[k] = {seconds, iters, seconds};  // seconds in the "joules" slot: the same difference
      }
      energy_repeats.push_back(e);
      time_repeats.push_back(t);
    }
    auto put = [](NumberFigure& mean, NumberFigure& stddev, const measure::Stat& s) {
      mean = s.mean;
      stddev = s.stddev;
    };
    measure::PhaseEnergy times = measure::derive_phase_energy(time_repeats, 0.0);
    put(S.loop_forward_s, S.loop_forward_s_std, times.forward);
    put(S.loop_backward_s, S.loop_backward_s_std, times.backward);
    put(S.loop_update_allreduce_s, S.loop_update_allreduce_s_std, times.update_allreduce);
    S.loop_pooled_repeats = static_cast<double>(times.pooled_repeats);
    M["loop_forward_s"] = fmt::format(
        "phase-isolated loops after training (forward only, forward+backward, full step; each >= {} s, input "
        "batch fixed, no data loading), slowest rank, {} repeats; backward = (fwd+bwd) - fwd, update_allreduce = "
        "full - (fwd+bwd), after a non-decreasing least-squares fit of the three per-iteration times per repeat "
        "(loop_pooled_repeats: repeats whose loops came out of order and were pooled), so no phase is negative",
        run.phase_window, time_repeats.size());
    if (all_energy && !energy_repeats.empty()) {
      measure::PhaseEnergy e = measure::derive_phase_energy(energy_repeats, 0.0);
      put(S.energy_forward_j, S.energy_forward_j_std, e.forward);
      put(S.energy_backward_j, S.energy_backward_j_std, e.backward);
      put(S.energy_update_allreduce_j, S.energy_update_allreduce_j_std, e.update_allreduce);
      put(S.energy_full_step_j, S.energy_full_step_j_std, e.full_step);
      M["energy_forward_j"] = (gpu_run ? "sum over GPUs of " : "RAPL package+DRAM per host, ") + e.method;
    } else {
      for (NumberFigure* f : {&S.energy_forward_j, &S.energy_forward_j_std, &S.energy_backward_j,
                              &S.energy_backward_j_std, &S.energy_update_allreduce_j,
                              &S.energy_update_allreduce_j_std, &S.energy_full_step_j, &S.energy_full_step_j_std})
        *f = NumberFigure::null();
      M["energy_forward_j"] = "null: no energy counter readable in the phase loops";
    }
  }
  put_split_figures(res, r0, ranks);
  return res;
}

}  // namespace cnnscale
