// RankReport's JSON form (see rank_report.hpp) through schema tables (io/result_schema.hpp): the
// report is copied into records of Figures, one table row per key, so the keys, their types and
// which must be there are declared once and a malformed report is refused with its key path. NaN
// and unknown values travel as null.
#include <cmath>

#include "io/result_schema.hpp"
#include "solver/rank_report.hpp"

namespace cnnscale {

namespace {

constexpr Presence R = Presence::Required;
constexpr Presence O = Presence::Optional;
const std::string kWire = "rank report";  // what errors name in place of a file

using Series = std::vector<NumberFigure>;  // numbers of which some may be NaN

NumberFigure number(double v) { return std::isfinite(v) ? NumberFigure(v) : NumberFigure::null(); }
double number_of(const NumberFigure& f) { return f.value_or(kMissing); }
template <class T>
Figure<T> optional_figure(const std::optional<T>& v) {
  return v ? Figure<T>(*v) : Figure<T>::null();
}
template <class T>
std::optional<T> optional_of(const Figure<T>& f) {
  return f.has_value() ? std::optional<T>(f.value()) : std::nullopt;
}
template <class Values>
Series series(const Values& values) {
  Series out;
  for (double v : values) out.push_back(number(v));
  return out;
}
std::vector<double> numbers_of(const Figure<Series>& f) {
  std::vector<double> out;
  for (const NumberFigure& v : f.value_or({})) out.push_back(number_of(v));
  return out;
}
PhaseSeconds phase_seconds_of(const Series& row) {
  PhaseSeconds s;
  s.fill(kMissing);
  for (size_t p = 0; p < s.size() && p < row.size(); ++p) s[p] = number_of(row[p]);
  return s;
}

struct GpuRecord {
  TextFigure name, uuid, driver;
  NumberFigure power_limit_w;
  CountFigure sm_count, memory_bytes;
  NumberFigure peak_sm_clock_mhz;
  TextFigure compute_capability;
  static std::span<const SchemaField<GpuRecord>> fields() {
    using G = GpuRecord;
    static const std::vector<SchemaField<G>> f = {
        field<&G::name>("name", "", R, "the GPU's name"),
        field<&G::uuid>("uuid", "", R, "its UUID"),
        field<&G::driver>("driver", "", R, "the driver's version (null: unknown)"),
        field<&G::power_limit_w>("power_limit_w", "W", R, "the enforced power limit (null: unknown)"),
        field<&G::sm_count>("sm_count", "", R, "its SMs"),
        field<&G::memory_bytes>("memory_bytes", "bytes", R, "its memory"),
        field<&G::peak_sm_clock_mhz>("peak_sm_clock_mhz", "MHz", R, "its highest SM clock (null: unknown)"),
        field<&G::compute_capability>("compute_capability", "", R, "major.minor (null: unknown)"),
    };
    return f;
  }
};

struct ReadingRecord {
  CountFigure iterations;
  NumberFigure seconds;
  CountFigure segments;
  NumberFigure gpu_joules, gpu_sampled_joules, cpu_package_joules, cpu_dram_joules;
  TextFigure gpu_method, cpu_method;
  static std::span<const SchemaField<ReadingRecord>> fields() {
    using E = ReadingRecord;
    static const std::vector<SchemaField<E>> f = {
        field<&E::iterations>("iterations", "", R, "iterations in the window"),
        field<&E::seconds>("seconds", "s", R, "its length, summed over segments"),
        field<&E::segments>("segments", "", R, "its segments"),
        field<&E::gpu_joules>("gpu_joules", "J", R, "the GPU's energy counter (null: not read)"),
        field<&E::gpu_sampled_joules>("gpu_sampled_joules", "J", R, "sampled power integrated (null: none)"),
        field<&E::cpu_package_joules>("cpu_package_joules", "J", R, "RAPL package (null: not read)"),
        field<&E::cpu_dram_joules>("cpu_dram_joules", "J", R, "RAPL DRAM (null: not read)"),
        field<&E::gpu_method>("gpu_method", "", R, "how the GPU's energy was read"),
        field<&E::cpu_method>("cpu_method", "", R, "how the CPU's energy was read"),
    };
    return f;
  }
};

struct LoopRecord {
  CountFigure repeat;
  TextFigure kind;
  Figure<ReadingRecord> reading;
  static std::span<const SchemaField<LoopRecord>> fields() {
    using L = LoopRecord;
    static const std::vector<SchemaField<L>> f = {
        field<&L::repeat>("repeat", "", R, "the repeat"),
        field<&L::kind>("kind", "", R, "forward, forward_backward or full_step"),
        field<&L::reading>("reading", "", R, "its energy window"),
    };
    return f;
  }
};

struct TimelineRecord {
  CountListFigure iteration, warmup;
  Figure<std::vector<Series>> seconds;
  static std::span<const SchemaField<TimelineRecord>> fields() {
    using T = TimelineRecord;
    static const std::vector<SchemaField<T>> f = {
        field<&T::iteration>("iteration", "", R, "per recorded iteration: its number"),
        field<&T::warmup>("warmup", "", R, "1: a warm-up iteration"),
        field<&T::seconds>("seconds", "s", R, "its phases in TimelinePhase order (null: not measured)"),
    };
    return f;
  }
};

struct PowerRecord {
  Figure<Series> t_s, power_w, avg_power_w, energy_mj, sm_clock_mhz, temperature_c;
  static std::span<const SchemaField<PowerRecord>> fields() {
    using P = PowerRecord;
    // The /power dataset names; rank and uuid come with the report.
    static const std::vector<SchemaField<P>> f = {
        field<&P::t_s>("t_s", "s", R, "since the run's time origin"),
        field<&P::power_w>("power_w", "W", R, "instant power"),
        field<&P::avg_power_w>("avg_power_w", "W", R, "NVML's averaged power"),
        field<&P::energy_mj>("energy_mj", "mJ", R, "the total-energy counter"),
        field<&P::sm_clock_mhz>("sm_clock_mhz", "MHz", R, "SM clock"),
        field<&P::temperature_c>("temperature_c", "C", R, "temperature"),
    };
    return f;
  }
};

struct RankReportRecord {
  CountFigure rank;
  TextFigure host;
  CountFigure local_batch;
  Figure<GpuRecord> gpu;
  CountFigure blas_threads;
  Figure<TimelineRecord> timeline;
  Figure<Series> phase_means;
  CountFigure phase_iterations;
  Figure<PowerRecord> power;
  FlagFigure reads_rapl;
  Figure<ReadingRecord> window;
  CountFigure extension_iterations;
  Figure<std::vector<LoopRecord>> loops;
  NumberFigure wait_watts;
  CountFigure sms;
  NumberFigure slowdown;
  CountFigure peak_memory_bytes;
  static std::span<const SchemaField<RankReportRecord>> fields() {
    using K = RankReportRecord;
    static const std::vector<SchemaField<K>> f = {
        field<&K::rank>("rank", "", R, "the rank"),
        field<&K::host>("host", "", R, "its host"),
        field<&K::local_batch>("local_batch", "samples", R, "its batch"),
        field<&K::gpu>("gpu", "", O, "GPU ranks: the GPU"),
        field<&K::blas_threads>("blas_threads", "", O, "CPU ranks: its BLAS thread pool"),
        field<&K::timeline>("timeline", "", R, "one row per recorded iteration, warm-up included"),
        field<&K::phase_means>("phase_means", "s", R, "over the steady iterations"),
        field<&K::phase_iterations>("phase_iterations", "", R, "the steady iterations"),
        field<&K::power>("power", "", O, "its GPU's power samples, when sampled"),
        field<&K::reads_rapl>("reads_rapl", "", R, "the rank that reads its host's RAPL counters"),
        field<&K::window>("window", "", R, "the steady energy window (null: none)"),
        field<&K::extension_iterations>("extension_iterations", "", R, "iterations added to fill the window"),
        field<&K::loops>("loops", "", R, "--measure phases: three loops per repeat"),
        field<&K::wait_watts>("wait_watts", "W", R, "the power waiting is charged at (null: not measured)"),
        field<&K::sms>("sms", "", R, "its GPU partition's SMs (0: the whole GPU, or a CPU rank)"),
        field<&K::slowdown>("slowdown", "", R, "its emulated straggler factor (1: none)"),
        field<&K::peak_memory_bytes>("peak_memory_bytes", "bytes", R, "the most its backend held at once"),
    };
    return f;
  }
};

ReadingRecord reading_record(const measure::EnergyReading& r) {
  ReadingRecord e;
  e.iterations = r.iterations;
  e.seconds = number(r.seconds);
  e.segments = int64_t{r.segments};
  e.gpu_joules = optional_figure(r.gpu_joules);
  e.gpu_sampled_joules = optional_figure(r.gpu_sampled_joules);
  e.cpu_package_joules = optional_figure(r.cpu_package_joules);
  e.cpu_dram_joules = optional_figure(r.cpu_dram_joules);
  e.gpu_method = r.gpu_method;
  e.cpu_method = r.cpu_method;
  return e;
}
measure::EnergyReading reading_of(const ReadingRecord& e) {
  measure::EnergyReading r;
  r.iterations = e.iterations.value_or(0);
  r.seconds = number_of(e.seconds);
  r.segments = static_cast<int>(e.segments.value_or(0));
  r.gpu_joules = optional_of(e.gpu_joules);
  r.gpu_sampled_joules = optional_of(e.gpu_sampled_joules);
  r.cpu_package_joules = optional_of(e.cpu_package_joules);
  r.cpu_dram_joules = optional_of(e.cpu_dram_joules);
  r.gpu_method = e.gpu_method.value_or("");
  r.cpu_method = e.cpu_method.value_or("");
  return r;
}

// The power columns by their /power dataset names.
const std::array<std::pair<Figure<Series> PowerRecord::*, std::vector<double> PowerSeries::*>, 6> kPowerColumns = {{
    {&PowerRecord::t_s, &PowerSeries::t_s},
    {&PowerRecord::power_w, &PowerSeries::power_w},
    {&PowerRecord::avg_power_w, &PowerSeries::avg_power_w},
    {&PowerRecord::energy_mj, &PowerSeries::energy_mj},
    {&PowerRecord::sm_clock_mhz, &PowerSeries::sm_clock_mhz},
    {&PowerRecord::temperature_c, &PowerSeries::temperature_c},
}};

}  // namespace

void to_json(nlohmann::json& j, const RankReport& r) {
  RankReportRecord k;
  k.rank = r.rank;
  k.host = r.host;
  k.local_batch = r.local_batch;
  if (r.gpu) {
    GpuRecord g;
    g.name = r.gpu->name;
    g.uuid = r.gpu->uuid;
    g.driver = optional_figure(r.gpu->driver);
    g.power_limit_w = number(r.gpu->power_limit_w);
    g.sm_count = r.gpu->sm_count;
    g.memory_bytes = r.gpu->memory_bytes;
    g.peak_sm_clock_mhz = number(r.gpu->peak_sm_clock_mhz);
    g.compute_capability = optional_figure(r.gpu->compute_capability);
    k.gpu = g;
  }
  if (r.blas_threads) k.blas_threads = *r.blas_threads;
  TimelineRecord t;
  t.iteration = r.iteration;
  t.warmup = std::vector<int64_t>(r.warmup.begin(), r.warmup.end());
  std::vector<Series> seconds;
  for (const PhaseSeconds& row : r.seconds) seconds.push_back(series(row));
  t.seconds = std::move(seconds);
  k.timeline = t;
  k.phase_means = series(r.phase_means);
  k.phase_iterations = r.phase_iterations;
  if (r.power) {
    PowerRecord p;
    for (const auto& [record, column] : kPowerColumns) p.*record = series((*r.power).*column);
    k.power = p;
  }
  k.reads_rapl = r.reads_rapl;
  k.window = r.window ? Figure<ReadingRecord>(reading_record(*r.window)) : Figure<ReadingRecord>::null();
  k.extension_iterations = r.extension_iterations;
  std::vector<LoopRecord> loops;
  for (const PhaseLoopRecord& l : r.loops) {
    LoopRecord x;
    x.repeat = int64_t{l.repeat};
    x.kind = l.kind;
    x.reading = reading_record(l.reading);
    loops.push_back(std::move(x));
  }
  k.loops = std::move(loops);
  k.wait_watts = number(r.wait_watts);
  k.sms = r.sms;
  k.slowdown = number(r.slowdown);
  k.peak_memory_bytes = r.peak_memory_bytes;
  j = to_json_object(k);
}

void from_json(const nlohmann::json& j, RankReport& r) {
  const RankReportRecord k = from_json_object<RankReportRecord>(j, kWire);
  r = RankReport{};
  r.rank = k.rank.value_or(0);
  r.host = k.host.value_or("");
  r.local_batch = k.local_batch.value_or(0);
  if (k.gpu.has_value()) {
    const GpuRecord& g = k.gpu.value();
    r.gpu = RankGpu{g.name.value_or(""),
                    g.uuid.value_or(""),
                    optional_of(g.driver),
                    number_of(g.power_limit_w),
                    g.sm_count.value_or(0),
                    g.memory_bytes.value_or(0),
                    number_of(g.peak_sm_clock_mhz),
                    optional_of(g.compute_capability)};
  }
  r.blas_threads = optional_of(k.blas_threads);
  if (k.timeline.has_value()) {
    const TimelineRecord& t = k.timeline.value();
    r.iteration = t.iteration.value_or({});
    for (int64_t w : t.warmup.value_or({})) r.warmup.push_back(static_cast<uint8_t>(w));
    for (const Series& row : t.seconds.value_or({})) r.seconds.push_back(phase_seconds_of(row));
  }
  r.phase_means = phase_seconds_of(k.phase_means.value_or({}));
  r.phase_iterations = k.phase_iterations.value_or(0);
  if (k.power.has_value()) {
    PowerSeries& s = r.power.emplace();
    s.rank = r.rank;
    if (r.gpu) s.uuid = r.gpu->uuid;
    for (const auto& [record, column] : kPowerColumns) s.*column = numbers_of(k.power.value().*record);
  }
  r.reads_rapl = k.reads_rapl.value_or(false);
  if (k.window.has_value()) r.window = reading_of(k.window.value());
  r.extension_iterations = k.extension_iterations.value_or(0);
  for (const LoopRecord& l : k.loops.value_or({}))
    r.loops.push_back({static_cast<int>(l.repeat.value_or(0)), l.kind.value_or(""),
                       reading_of(l.reading.value_or(ReadingRecord{}))});
  r.wait_watts = number_of(k.wait_watts);
  r.sms = k.sms.value_or(0);
  r.slowdown = number_of(k.slowdown);
  r.peak_memory_bytes = k.peak_memory_bytes.value_or(0);
}

}  // namespace cnnscale
