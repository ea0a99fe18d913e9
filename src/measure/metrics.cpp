// Derived metrics: the formulas of DESIGN.md "Measurement methodology" on one window.
#include "measure/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace cnnscale::measure {

namespace {
template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
}  // namespace

double samples_per_second(std::int64_t samples_per_batch, std::int64_t iterations, double seconds) {
  if (!(seconds > 0) || iterations <= 0) return 0.0;
  return static_cast<double>(samples_per_batch) / (seconds / static_cast<double>(iterations));
}

Metrics compute_metrics(const MeasuredWindow& w, const Workload& wl) {
  if (w.iterations <= 0 || w.seconds <= 0)
    throw_runtime("metrics need a window with iterations and time, got {} iterations in {} s", w.iterations, w.seconds);
  Metrics m;
  m.iterations = w.iterations;
  m.seconds = w.seconds;
  m.workload = wl;
  m.energy_method = w.energy_method;
  m.time_method = fmt::format("steady window of {} iterations ({:.3f} s)", w.iterations, w.seconds);
  m.seconds_per_batch = w.seconds / static_cast<double>(w.iterations);
  m.samples_per_second = samples_per_second(wl.samples_per_batch, w.iterations, w.seconds);
  double training_iterations = static_cast<double>(wl.iterations_per_epoch) * static_cast<double>(wl.epochs);
  m.training_seconds = m.seconds_per_batch * training_iterations;
  if (wl.forward_macs_per_sample)
    // 2 FLOPs per MAC; backward costs about twice the forward, so training is 3x forward.
    m.gflops = 2.0 * *wl.forward_macs_per_sample * 3.0 * m.samples_per_second / 1e9;
  if (w.joules) {
    m.joules = w.joules;
    m.joules_per_batch = *w.joules / static_cast<double>(w.iterations);
    m.watts = *w.joules / w.seconds;
    if (wl.samples_per_batch > 0) m.joules_per_sample = *m.joules_per_batch / static_cast<double>(wl.samples_per_batch);
    m.training_joules = *m.joules_per_batch * training_iterations;
    m.edp_batch_js = *m.joules_per_batch * m.seconds_per_batch;
    m.edp_training_js = *m.training_joules * m.training_seconds;
    if (m.gflops && *m.watts > 0) m.gflops_per_watt = *m.gflops / *m.watts;
  }
  return m;
}

Metrics compute_job_metrics(const std::vector<MeasuredWindow>& ranks, const Workload& job_workload) {
  if (ranks.empty()) throw_runtime("job metrics need at least one rank");
  MeasuredWindow job;
  job.iterations = ranks.front().iterations;
  std::optional<double> joules = 0.0;
  for (const auto& r : ranks) {
    if (r.iterations != job.iterations)
      throw_runtime("job metrics: ranks ran different iteration counts ({} vs {})", r.iterations, job.iterations);
    job.seconds = std::max(job.seconds, r.seconds);
    if (joules && r.joules)
      *joules += *r.joules;
    else
      joules.reset();
  }
  job.joules = joules;
  job.energy_method = joules ? fmt::format("sum over {} GPUs of: {}", ranks.size(), ranks.front().energy_method)
                             : "null: at least one rank has no GPU energy";
  Metrics m = compute_metrics(job, job_workload);
  m.time_method = fmt::format("slowest of {} ranks, {}", ranks.size(), m.time_method);
  return m;
}

nlohmann::json Metrics::to_json() const {
  return {
      {"iterations", iterations},
      {"seconds", seconds},
      {"seconds_per_batch", seconds_per_batch},
      {"samples_per_second", samples_per_second},
      {"joules", opt(joules)},
      {"joules_per_batch", opt(joules_per_batch)},
      {"watts", opt(watts)},
      {"joules_per_sample", opt(joules_per_sample)},
      {"training_seconds", training_seconds},
      {"training_joules", opt(training_joules)},
      {"gflops", opt(gflops)},
      {"gflops_per_watt", opt(gflops_per_watt)},
      {"edp_batch_js", opt(edp_batch_js)},
      {"edp_training_js", opt(edp_training_js)},
      {"samples_per_batch", workload.samples_per_batch},
      {"forward_macs_per_sample", opt(workload.forward_macs_per_sample)},
      {"iterations_per_epoch", workload.iterations_per_epoch},
      {"epochs", workload.epochs},
      {"energy_method", energy_method},
      {"time_method", time_method},
  };
}

}  // namespace cnnscale::measure
