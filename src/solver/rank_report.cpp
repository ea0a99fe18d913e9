// Each rank's report of a train run (see rank_report.hpp), filled from the Trainer's result and the
// energy monitor; its JSON form is rank_report_json.cpp.
#include "solver/rank_report.hpp"

#include <cmath>

#include "backend/devices.hpp"

namespace cnnscale {

namespace {

// A step's seven phases, then its total: the TimelinePhase order.
PhaseSeconds phase_seconds(const std::array<double, kStepPhases>& step, double total) {
  static_assert(kStepPhases + 1 == kTimelinePhaseCount);
  PhaseSeconds s;
  std::copy(step.begin(), step.end(), s.begin());
  s.back() = total;
  return s;
}

double or_missing(const std::optional<double>& v) {
  return v.value_or(kMissing);
}

}  // namespace

RankReport make_rank_report(int rank, const std::string& host, const Device& device, measure::EnergyMonitor& energy,
                            const TrainResult& result, int64_t local_batch) {
  RankReport r;
  r.rank = rank;
  r.host = host;
  r.local_batch = local_batch;
  if (!device.is_cpu()) {
    measure::GpuPowerReader& gpu = energy.gpu();
    const GpuFacts facts = gpu_facts(device.index);
    r.gpu = RankGpu{facts.name,       gpu_uuid(device.index), gpu.driver_version(), or_missing(gpu.power_limit_w()),
                    facts.sm_count,   facts.memory_bytes,     facts.peak_sm_clock_mhz,
                    facts.compute_capability};
  } else {
    // A CPU rank's speed depends on its BLAS thread pool (the sweep divides the cores among the
    // ranks): without it a 1-rank run with 2 threads against 2 ranks of 1 would read as a speedup.
    r.blas_threads = cpu_blas_threads();
  }
  for (const IterationPhases& p : result.phases) {
    r.iteration.push_back(p.iteration);
    r.warmup.push_back(p.warmup ? 1 : 0);
    r.seconds.push_back(phase_seconds(p.seconds, p.total));
  }
  r.phase_means = phase_seconds(result.phase_summary.mean_seconds, result.phase_summary.mean_total);
  r.phase_iterations = result.phase_summary.iterations;
  if (const measure::PowerSampler* sampler = energy.sampler()) {
    PowerSeries& s = r.power.emplace();
    s.rank = rank;
    if (r.gpu) s.uuid = r.gpu->uuid;
    for (const measure::PowerSample& p : sampler->samples(0)) {
      s.t_s.push_back(p.t_s);
      s.power_w.push_back(or_missing(p.power_w));
      s.avg_power_w.push_back(or_missing(p.average_power_w));
      s.energy_mj.push_back(p.energy_mj ? static_cast<double>(*p.energy_mj) : kMissing);
      s.sm_clock_mhz.push_back(or_missing(p.sm_clock_mhz));
      s.temperature_c.push_back(or_missing(p.temperature_c));
    }
  }
  r.reads_rapl = energy.rapl_available();
  r.window = result.window;
  r.extension_iterations = result.extension_iterations;
  r.loops = result.phase_loops;
  r.wait_watts = result.wait_watts;
  r.peak_memory_bytes = result.peak_memory_bytes;
  return r;
}

}  // namespace cnnscale
