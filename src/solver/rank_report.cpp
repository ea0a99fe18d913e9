// Each rank's report of a train run (see rank_report.hpp): filled from the Trainer's result and the
// energy monitor, and its JSON form, the one place that names the report's keys.
#include "solver/rank_report.hpp"

#include <cmath>

#include "backend/devices.hpp"

namespace cnnscale {

namespace {

using nlohmann::json;

// The wire format writes NaN and unknown values as null (JSON has no NaN).
json json_num(double v) {
  return std::isfinite(v) ? json(v) : json();
}
template <class T>
json json_opt(const std::optional<T>& v) {
  return v ? json(*v) : json();
}
double number_of(const json& v) {
  return v.is_number() ? v.get<double>() : kMissing;
}
std::optional<double> optional_number(const json& v) {
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}
std::optional<std::string> optional_text(const json& v) {
  return v.is_string() ? std::optional<std::string>(v.get<std::string>()) : std::nullopt;
}

json phase_seconds_json(const PhaseSeconds& s) {
  json row = json::array();
  for (double v : s) row.push_back(json_num(v));
  return row;
}
PhaseSeconds phase_seconds_of(const json& row) {
  PhaseSeconds s;
  s.fill(kMissing);
  for (size_t p = 0; p < s.size() && p < row.size(); ++p) s[p] = number_of(row[p]);
  return s;
}

// A step's seven phases, then its total: the TimelinePhase order.
PhaseSeconds phase_seconds(const std::array<double, kStepPhases>& step, double total) {
  static_assert(kStepPhases + 1 == kTimelinePhaseCount);
  PhaseSeconds s;
  std::copy(step.begin(), step.end(), s.begin());
  s.back() = total;
  return s;
}

json reading_json(const measure::EnergyReading& r) {
  return {{"iterations", r.iterations},
          {"seconds", r.seconds},
          {"segments", r.segments},
          {"gpu_joules", json_opt(r.gpu_joules)},
          {"gpu_sampled_joules", json_opt(r.gpu_sampled_joules)},
          {"cpu_package_joules", json_opt(r.cpu_package_joules)},
          {"cpu_dram_joules", json_opt(r.cpu_dram_joules)},
          {"gpu_method", r.gpu_method},
          {"cpu_method", r.cpu_method}};
}
measure::EnergyReading reading_of(const json& j) {
  measure::EnergyReading r;
  r.iterations = j.at("iterations").get<int64_t>();
  r.seconds = j.at("seconds").get<double>();
  r.segments = j.at("segments").get<int>();
  r.gpu_joules = optional_number(j.at("gpu_joules"));
  r.gpu_sampled_joules = optional_number(j.at("gpu_sampled_joules"));
  r.cpu_package_joules = optional_number(j.at("cpu_package_joules"));
  r.cpu_dram_joules = optional_number(j.at("cpu_dram_joules"));
  r.gpu_method = j.at("gpu_method").get<std::string>();
  r.cpu_method = j.at("cpu_method").get<std::string>();
  return r;
}

// The power columns by their /power dataset names; rank and uuid come with the report.
const std::array<std::pair<const char*, std::vector<double> PowerSeries::*>, 6> kPowerColumns = {{
    {"t_s", &PowerSeries::t_s},
    {"power_w", &PowerSeries::power_w},
    {"avg_power_w", &PowerSeries::avg_power_w},
    {"energy_mj", &PowerSeries::energy_mj},
    {"sm_clock_mhz", &PowerSeries::sm_clock_mhz},
    {"temperature_c", &PowerSeries::temperature_c},
}};

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

void to_json(json& j, const RankReport& r) {
  j = {{"rank", r.rank}, {"host", r.host}, {"local_batch", r.local_batch}};
  if (r.gpu)
    j["gpu"] = {{"name", r.gpu->name},
                {"uuid", r.gpu->uuid},
                {"driver", json_opt(r.gpu->driver)},
                {"power_limit_w", json_num(r.gpu->power_limit_w)},
                {"sm_count", r.gpu->sm_count},
                {"memory_bytes", r.gpu->memory_bytes},
                {"peak_sm_clock_mhz", json_num(r.gpu->peak_sm_clock_mhz)},
                {"compute_capability", json_opt(r.gpu->compute_capability)}};
  if (r.blas_threads) j["blas_threads"] = *r.blas_threads;
  json seconds = json::array();
  for (const PhaseSeconds& row : r.seconds) seconds.push_back(phase_seconds_json(row));
  j["timeline"] = {{"iteration", r.iteration}, {"warmup", r.warmup}, {"seconds", seconds}};
  j["phase_means"] = phase_seconds_json(r.phase_means);
  j["phase_iterations"] = r.phase_iterations;
  if (r.power) {
    json& p = j["power"];
    for (const auto& [key, column] : kPowerColumns) {
      json values = json::array();
      for (double v : (*r.power).*column) values.push_back(json_num(v));
      p[key] = values;
    }
  }
  j["reads_rapl"] = r.reads_rapl;
  j["window"] = r.window ? reading_json(*r.window) : json();
  j["extension_iterations"] = r.extension_iterations;
  json loops = json::array();
  for (const PhaseLoopRecord& l : r.loops)
    loops.push_back({{"repeat", l.repeat}, {"kind", l.kind}, {"reading", reading_json(l.reading)}});
  j["loops"] = loops;
  j["wait_watts"] = json_num(r.wait_watts);
  j["sms"] = r.sms;
  j["slowdown"] = r.slowdown;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
}

void from_json(const json& j, RankReport& r) {
  r = RankReport{};
  r.rank = j.at("rank").get<int64_t>();
  r.host = j.at("host").get<std::string>();
  r.local_batch = j.at("local_batch").get<int64_t>();
  if (j.contains("gpu")) {
    const json& g = j["gpu"];
    r.gpu = RankGpu{g.at("name").get<std::string>(),
                    g.at("uuid").get<std::string>(),
                    optional_text(g.at("driver")),
                    number_of(g.at("power_limit_w")),
                    g.at("sm_count").get<int64_t>(),
                    g.at("memory_bytes").get<int64_t>(),
                    number_of(g.at("peak_sm_clock_mhz")),
                    optional_text(g.at("compute_capability"))};
  }
  if (j.contains("blas_threads")) r.blas_threads = j["blas_threads"].get<int64_t>();
  const json& tl = j.at("timeline");
  r.iteration = tl.at("iteration").get<std::vector<int64_t>>();
  r.warmup = tl.at("warmup").get<std::vector<uint8_t>>();
  for (const json& row : tl.at("seconds")) r.seconds.push_back(phase_seconds_of(row));
  r.phase_means = phase_seconds_of(j.at("phase_means"));
  r.phase_iterations = j.at("phase_iterations").get<int64_t>();
  if (j.contains("power")) {
    PowerSeries& s = r.power.emplace();
    s.rank = r.rank;
    if (r.gpu) s.uuid = r.gpu->uuid;
    for (const auto& [key, column] : kPowerColumns)
      for (const json& v : j["power"].at(key)) (s.*column).push_back(number_of(v));
  }
  r.reads_rapl = j.at("reads_rapl").get<bool>();
  if (const json& w = j.at("window"); !w.is_null()) r.window = reading_of(w);
  r.extension_iterations = j.at("extension_iterations").get<int64_t>();
  for (const json& l : j.at("loops"))
    r.loops.push_back({l.at("repeat").get<int>(), l.at("kind").get<std::string>(), reading_of(l.at("reading"))});
  r.wait_watts = number_of(j.at("wait_watts"));
  r.sms = j.at("sms").get<int64_t>();
  r.slowdown = j.at("slowdown").get<double>();
  r.peak_memory_bytes = j.at("peak_memory_bytes").get<int64_t>();
}

}  // namespace cnnscale
