// Energy building blocks against fakes: NVML counter windows (difference, reset), RAPL wrap on a fake
// sysfs, the missing-library path (one warning, nulls), a fake NVML function table for the loader's
// decoding, per-phase derivation, the power sampler's integral vs the counter, and metric formulas.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numbers>

#include "core/error.hpp"
#include "measure/energy_window.hpp"
#include "measure/metrics.hpp"
#include "measure/nvml.hpp"
#include "measure/power_sampler.hpp"
#include "measure/rapl.hpp"

namespace cnnscale::measure {
namespace {

// A GPU whose energy counter replays a scripted series, one value per energy_mj() call.
class ScriptedGpu final : public GpuPowerReader {
 public:
  explicit ScriptedGpu(std::vector<std::uint64_t> energy) : energy_(std::move(energy)) {}
  bool available() const override { return true; }
  std::string description() const override { return "scripted"; }
  std::optional<std::uint64_t> energy_mj() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_ < energy_.size() ? std::optional<std::uint64_t>(energy_[next_++]) : std::nullopt;
  }
  std::optional<double> power_w() override { return 200.0; }
  std::optional<double> average_power_w() override { return std::nullopt; }
  std::optional<double> sm_clock_mhz() override { return 1755.0; }
  std::optional<double> temperature_c() override { return 55.0; }
  std::optional<double> power_limit_w() override { return 700.0; }

 private:
  std::mutex mutex_;
  std::vector<std::uint64_t> energy_;
  std::size_t next_ = 0;
};

TEST(EnergyCounter, NvmlWindowIsTheCounterDifference) {
  auto w = nvml_window(1'000'000, 1'061'500, 3.0, 20);
  ASSERT_TRUE(w.joules);
  EXPECT_DOUBLE_EQ(*w.joules, 61.5);
  EXPECT_DOUBLE_EQ(*w.joules_per_iteration(), 61.5 / 20);
  EXPECT_DOUBLE_EQ(*w.watts(), 20.5);
  EXPECT_FALSE(w.counter_reset);
  EXPECT_NE(w.method.find("nvml energy counter difference over steady window of 20 iterations (3.000 s)"),
            std::string::npos)
      << w.method;
}

TEST(EnergyCounter, NvmlDecreaseIsAResetWithoutValue) {
  auto d = nvml_counter_difference(5000, 4000);
  EXPECT_FALSE(d.joules);
  EXPECT_TRUE(d.counter_reset);
  auto w = nvml_window(5000, 4000, 3.0, 10);
  EXPECT_FALSE(w.joules);
  EXPECT_FALSE(w.watts());
  EXPECT_TRUE(w.counter_reset);
  EXPECT_NE(w.method.find("reset"), std::string::npos);
  auto missing = nvml_window(std::nullopt, 4000, 3.0, 10);
  EXPECT_FALSE(missing.joules);
  EXPECT_FALSE(missing.counter_reset);
}

TEST(EnergyCounter, RaplWrapsAtMaxRange) {
  const std::uint64_t range = 262'143'328'850;
  auto d = rapl_counter_difference(range - 1'000'000, 2'000'000, range);
  ASSERT_TRUE(d.joules);
  EXPECT_DOUBLE_EQ(*d.joules, 3.0);
  EXPECT_DOUBLE_EQ(*rapl_counter_difference(1'000'000, 4'500'000, range).joules, 3.5);
  auto unknown = rapl_counter_difference(2'000'000, 1'000'000, std::nullopt);
  EXPECT_FALSE(unknown.joules);
  EXPECT_TRUE(unknown.counter_reset);
}

TEST(EnergyCounter, ShortWindowIsExtended) {
  EXPECT_EQ(extra_iterations_needed(10, 0.1, 3.0), 20);
  EXPECT_EQ(extra_iterations_needed(40, 0.1, 3.0), 0);
  EXPECT_EQ(extra_iterations_needed(1, 0.7, 3.0), 4);  // ceil(3 / 0.7) = 5 in all
  EXPECT_EQ(extra_iterations_needed(0, 0.25), static_cast<std::int64_t>(kMinSteadyWindowSeconds / 0.25));
  EXPECT_THROW(extra_iterations_needed(1, 0.0), RuntimeError);
}

TEST(EnergyCounter, CounterWindowReadsTheReaderAtStartAndStop) {
  ScriptedGpu gpu({10'000, 25'000, 24'000, 30'000});
  CounterWindow w(gpu);
  w.start();
  auto first = w.stop(5, "forward-only loop");
  ASSERT_TRUE(first.joules);
  EXPECT_DOUBLE_EQ(*first.joules, 15.0);
  EXPECT_GE(first.seconds, 0.0);
  EXPECT_NE(first.method.find("forward-only loop of 5 iterations"), std::string::npos) << first.method;
  w.start();  // 24'000 after 25'000 above: the driver reset between windows
  auto second = w.stop(5);
  EXPECT_DOUBLE_EQ(*second.joules, 6.0);
  w.start();  // series exhausted: counter unreadable
  EXPECT_FALSE(w.stop(5).joules);
}

int count_warnings(const std::string& err) {
  int n = 0;
  for (std::size_t p = err.find("warning:"); p != std::string::npos; p = err.find("warning:", p + 1)) ++n;
  return n;
}

TEST(Nvml, MissingLibraryGivesNullsAndOneWarning) {
  ::testing::internal::CaptureStderr();
  auto r = open_gpu_power_reader("", 0, "libcnnscale-no-such-nvml.so.1");
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(r->energy_mj());
    EXPECT_FALSE(r->power_w());
    EXPECT_FALSE(r->average_power_w());
    EXPECT_FALSE(r->sm_clock_mhz());
    EXPECT_FALSE(r->temperature_c());
    EXPECT_FALSE(r->power_limit_w());
  }
  CounterWindow w(*r);
  w.start();
  EXPECT_FALSE(w.stop(3).joules);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(r->available());
  EXPECT_EQ(count_warnings(err), 1) << err;
  EXPECT_NE(err.find("libcnnscale-no-such-nvml.so.1"), std::string::npos) << err;
  EXPECT_NE(r->description().find("unavailable"), std::string::npos);
}

// A fake NVML C ABI: the functions the loader would dlsym, with state the test controls.
struct FakeNvml {
  static inline int inits = 0, shutdowns = 0;
  static inline unsigned long long energy_mj = 123'456;
  static inline bool instant_supported = true;
  static inline int dummy_device = 0;
  static nvml_abi::Device device() { return reinterpret_cast<nvml_abi::Device>(&dummy_device); }
  static nvml_abi::Return init() {
    ++inits;
    return 0;
  }
  static nvml_abi::Return shutdown() {
    ++shutdowns;
    return 0;
  }
  static const char* error_string(nvml_abi::Return r) { return r == 6 ? "Not Found" : "Unknown Error"; }
  static nvml_abi::Return by_uuid(const char* uuid, nvml_abi::Device* d) {
    if (std::strcmp(uuid, "GPU-fake-0") != 0) return 6;  // NVML_ERROR_NOT_FOUND
    *d = device();
    return 0;
  }
  static nvml_abi::Return by_index(unsigned i, nvml_abi::Device* d) {
    if (i != 0) return 6;
    *d = device();
    return 0;
  }
  static nvml_abi::Return energy(nvml_abi::Device d, unsigned long long* mj) {
    if (d != device()) return 2;
    *mj = energy_mj;
    return 0;
  }
  static nvml_abi::Return power_usage(nvml_abi::Device, unsigned* mw) {
    *mw = 199'000;
    return 0;
  }
  static nvml_abi::Return field_values(nvml_abi::Device, int n, nvml_abi::FieldValue* v) {
    for (int i = 0; i < n; ++i) {
      if (v[i].fieldId == nvml_abi::kFieldPowerInstant) {
        v[i].nvmlReturn = instant_supported ? 0 : 3;  // NVML_ERROR_NOT_SUPPORTED
        v[i].valueType = nvml_abi::kUnsignedInt;
        v[i].value.uiVal = 251'500;
      } else if (v[i].fieldId == nvml_abi::kFieldPowerAverage) {
        v[i].nvmlReturn = 0;
        v[i].valueType = nvml_abi::kDouble;
        v[i].value.dVal = 240'250.0;
      } else {
        v[i].nvmlReturn = 2;
      }
    }
    return 0;
  }
  static nvml_abi::Return clock(nvml_abi::Device, unsigned type, unsigned* mhz) {
    if (type != nvml_abi::kClockSm) return 2;
    *mhz = 1980;
    return 0;
  }
  static nvml_abi::Return temperature(nvml_abi::Device, unsigned sensor, unsigned* c) {
    if (sensor != nvml_abi::kTemperatureGpu) return 2;
    *c = 61;
    return 0;
  }
  static nvml_abi::Return limit(nvml_abi::Device, unsigned* mw) {
    *mw = 700'000;
    return 0;
  }
  static nvml_abi::Return driver(char* buf, unsigned n) {
    std::snprintf(buf, n, "%s", "550.54.15");
    return 0;
  }
  static nvml_abi::Api api() {
    nvml_abi::Api a;
    a.init = init;
    a.shutdown = shutdown;
    a.error_string = error_string;
    a.system_get_driver_version = driver;
    a.device_get_handle_by_uuid = by_uuid;
    a.device_get_handle_by_index = by_index;
    a.device_get_total_energy_consumption = energy;
    a.device_get_power_usage = power_usage;
    a.device_get_field_values = field_values;
    a.device_get_clock_info = clock;
    a.device_get_temperature = temperature;
    a.device_get_enforced_power_limit = limit;
    return a;
  }
};

TEST(Nvml, FakeLibraryDecodesUnitsAndFields) {
  FakeNvml::inits = FakeNvml::shutdowns = 0;
  FakeNvml::instant_supported = true;
  {
    auto lib = NvmlLibrary::from_api(FakeNvml::api());
    EXPECT_EQ(FakeNvml::inits, 1);
    EXPECT_EQ(lib->driver_version().value_or(""), "550.54.15");
    auto r = open_gpu_power_reader(lib, "GPU-fake-0");
    ASSERT_TRUE(r->available());
    EXPECT_EQ(r->energy_mj().value_or(0), 123'456u);
    EXPECT_DOUBLE_EQ(r->power_w().value_or(0), 251.5);  // field 186, mW -> W
    EXPECT_DOUBLE_EQ(r->average_power_w().value_or(0), 240.25);
    EXPECT_DOUBLE_EQ(r->sm_clock_mhz().value_or(0), 1980);
    EXPECT_DOUBLE_EQ(r->temperature_c().value_or(0), 61);
    EXPECT_DOUBLE_EQ(r->power_limit_w().value_or(0), 700);
    FakeNvml::instant_supported = false;  // older GPUs: fall back to nvmlDeviceGetPowerUsage
    EXPECT_DOUBLE_EQ(r->power_w().value_or(0), 199);
    auto by_index = open_gpu_power_reader(lib, "", 0);
    EXPECT_TRUE(by_index->available());
    ::testing::internal::CaptureStderr();
    auto unknown = open_gpu_power_reader(lib, "GPU-not-here");
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(unknown->available());
    EXPECT_FALSE(unknown->energy_mj());
    EXPECT_EQ(count_warnings(err), 1) << err;
    EXPECT_NE(err.find("Not Found"), std::string::npos) << err;
    EXPECT_EQ(FakeNvml::shutdowns, 0);  // readers keep the library alive
  }
  EXPECT_EQ(FakeNvml::shutdowns, 1);
  // The real field struct must have NVML's layout (the driver writes into it): 8-byte value at 32.
  EXPECT_EQ(sizeof(nvml_abi::FieldValue), 40u);
  EXPECT_EQ(offsetof(nvml_abi::FieldValue, value), 32u);
}

PhaseLoop loop(double joules_per_iteration, std::int64_t n = 100, double seconds = 1.5) {
  return {joules_per_iteration * static_cast<double>(n), n, seconds};
}

TEST(PhaseEnergy, DerivedByDifferenceWithMeanAndStd) {
  std::vector<PhaseRepeat> r{{loop(1.0), loop(3.0), loop(4.0)}, {loop(1.2, 50), loop(3.2), loop(4.4, 80)}};
  auto p = derive_phase_energy(r);
  EXPECT_NEAR(p.forward.mean, 1.1, 1e-12);
  EXPECT_NEAR(p.forward.stddev, std::sqrt(0.02), 1e-12);
  EXPECT_NEAR(p.backward.mean, 2.0, 1e-12);
  EXPECT_NEAR(p.backward.stddev, 0.0, 1e-12);
  EXPECT_NEAR(p.update_allreduce.mean, 1.1, 1e-12);
  EXPECT_NEAR(p.update_allreduce.min, 1.0, 1e-12);
  EXPECT_NEAR(p.update_allreduce.max, 1.2, 1e-12);
  EXPECT_NEAR(p.full_step.mean, 4.2, 1e-12);
  EXPECT_EQ(p.forward.n, 2);
  EXPECT_NE(p.method.find("phase-isolated windows"), std::string::npos);
  EXPECT_NE(p.method.find("2 repeats"), std::string::npos);
  std::vector<PhaseRepeat> short_loop{{loop(1.0), loop(3.0, 100, 0.4), loop(4.0)}};
  EXPECT_THROW(derive_phase_energy(short_loop), RuntimeError);
  EXPECT_THROW(derive_phase_energy({}), RuntimeError);
}

// A loaded machine can time the forward-only loop slower per iteration than forward+backward (the
// -1.25 ms "backward" once seen under ctest -j2): the phases still come out >= 0, by the
// non-decreasing least-squares fit, and the repeat is counted as pooled.
TEST(PhaseEnergy, OutOfOrderLoopsNeverGiveNegativePhases) {
  std::vector<PhaseRepeat> r{{loop(3.0), loop(2.0), loop(4.0)},   // fwd > fwd+bwd: pooled to 2.5, 2.5
                             {loop(1.0), loop(3.0), loop(2.0)},   // fwd+bwd > full: pooled to 2.5, 2.5
                             {loop(5.0), loop(3.0), loop(1.0)},   // all three out of order: all 3.0
                             {loop(1.0), loop(2.0), loop(3.0)}};  // in order: untouched
  auto p = derive_phase_energy(r);
  EXPECT_EQ(p.pooled_repeats, 3);
  EXPECT_GE(p.backward.min, 0.0);
  EXPECT_GE(p.update_allreduce.min, 0.0);
  EXPECT_NEAR(p.forward.mean, (2.5 + 1.0 + 3.0 + 1.0) / 4, 1e-12);
  EXPECT_NEAR(p.backward.mean, (0.0 + 1.5 + 0.0 + 1.0) / 4, 1e-12);
  EXPECT_NEAR(p.update_allreduce.mean, (1.5 + 0.0 + 0.0 + 1.0) / 4, 1e-12);
  EXPECT_NEAR(p.full_step.mean, (4.0 + 2.5 + 3.0 + 3.0) / 4, 1e-12);
  EXPECT_NE(p.method.find("3 of 4 repeats"), std::string::npos) << p.method;

  std::vector<double> v = {4, 1, 3, 2, 5};  // PAV: {4,1} -> 2.5; {2.5,2.5,3,2} -> 2.5 2.5 2.5 2.5
  EXPECT_TRUE(pool_adjacent_violators(v));
  EXPECT_EQ(v, (std::vector<double>{2.5, 2.5, 2.5, 2.5, 5}));
  std::vector<double> sorted = {1, 2, 2, 3};
  EXPECT_FALSE(pool_adjacent_violators(sorted));
}

std::vector<PowerSample> series(double rate_hz, double seconds, double (*watts)(double)) {
  std::vector<PowerSample> s;
  for (int i = 0; i <= static_cast<int>(seconds * rate_hz); ++i) {
    PowerSample p;
    p.t_s = i / rate_hz;
    p.power_w = watts(p.t_s);
    s.push_back(p);
  }
  return s;
}

TEST(PowerIntegral, TrapezoidMatchesTheCounterOnSyntheticSeries) {
  auto ramp = series(10, 5, [](double t) { return 100 + 50 * t; });
  EXPECT_NEAR(*integrate_power_j(ramp, 0, 5), 100 * 5 + 25 * 25, 1e-9);  // linear: exact
  EXPECT_NEAR(*integrate_power_j(ramp, 0.55, 1.55), 100 + 25 * (1.55 * 1.55 - 0.55 * 0.55), 1e-9);
  // A GPU oscillating at 0.7 Hz sampled at 10 Hz over 5 s: counter (exact integral) vs samples.
  auto wave = series(10, 5, [](double t) { return 300 + 120 * std::sin(2 * std::numbers::pi * 0.7 * t); });
  double counter = 300 * 5 + 120 / (2 * std::numbers::pi * 0.7) * (1 - std::cos(2 * std::numbers::pi * 0.7 * 5));
  double integral = *integrate_power_j(wave, 0, 5);
  EXPECT_LT(relative_difference(integral, counter), 0.10);
  EXPECT_GT(relative_difference(integral, counter * 1.2), 0.10);  // the check can fail
  EXPECT_FALSE(integrate_power_j({ramp[0]}, 0, 1));
  EXPECT_FALSE(integrate_power_j(ramp, 2, 2));
  EXPECT_FALSE(integrate_power_j(ramp, 0, 5, /*average=*/true));  // no average-power samples
}

// A GPU drawing 250 + 100 sin(2 pi t) W in real time, its counter the exact integral since creation.
class SineGpu final : public GpuPowerReader {
 public:
  bool available() const override { return true; }
  std::string description() const override { return "sine"; }
  std::optional<std::uint64_t> energy_mj() override {
    double t = now();
    double j = 250 * t + 100 / (2 * std::numbers::pi) * (1 - std::cos(2 * std::numbers::pi * t));
    return static_cast<std::uint64_t>(1e9 + j * 1e3);
  }
  std::optional<double> power_w() override { return 250 + 100 * std::sin(2 * std::numbers::pi * now()); }
  std::optional<double> average_power_w() override { return 250.0; }
  std::optional<double> sm_clock_mhz() override { return 1980.0; }
  std::optional<double> temperature_c() override { return std::nullopt; }
  std::optional<double> power_limit_w() override { return 700.0; }
  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

TEST(PowerSampler, ThreadSamplesAtRateAndIntegralMatchesCounter) {
  SineGpu a;
  ScriptedGpu b(std::vector<std::uint64_t>(1000, 7));
  PowerSampler sampler({&a, &b}, 50.0);
  sampler.start();
  EXPECT_TRUE(sampler.running());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  sampler.stop();
  EXPECT_FALSE(sampler.running());
  auto s = sampler.samples(0);
  ASSERT_GE(s.size(), 20u);  // 50 Hz for 0.8 s is 40; leave room for a loaded CI machine
  EXPECT_LE(s.size(), 45u);
  for (std::size_t i = 1; i < s.size(); ++i) EXPECT_GT(s[i].t_s, s[i - 1].t_s);
  ASSERT_TRUE(s.front().energy_mj && s.back().energy_mj);
  double counter = (static_cast<double>(*s.back().energy_mj) - static_cast<double>(*s.front().energy_mj)) / 1e3;
  double integral = *integrate_power_j(s, s.front().t_s, s.back().t_s);
  EXPECT_LT(relative_difference(integral, counter), 0.10) << integral << " J vs " << counter << " J";
  EXPECT_DOUBLE_EQ(s.front().average_power_w.value_or(0), 250.0);
  EXPECT_FALSE(s.front().temperature_c);
  auto other = sampler.samples(1);
  EXPECT_EQ(other.size(), s.size());
  EXPECT_EQ(other.front().energy_mj.value_or(0), 7u);
  EXPECT_DOUBLE_EQ(other.front().temperature_c.value_or(0), 55.0);
  std::size_t n = s.size();
  sampler.sample_now();
  EXPECT_EQ(sampler.samples(0).size(), n + 1);
  EXPECT_THROW(PowerSampler({&a}, 0.0), RuntimeError);
}

struct FakeSysfs {
  std::filesystem::path root;
  FakeSysfs() {
    root = std::filesystem::temp_directory_path() / ("cnnscale_rapl_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root);
  }
  ~FakeSysfs() { std::filesystem::remove_all(root); }
  void zone(const std::string& z, const std::string& name, std::optional<std::uint64_t> energy, std::uint64_t range) {
    std::filesystem::create_directories(root / z);
    std::ofstream(root / z / "name") << name << "\n";
    std::ofstream(root / z / "max_energy_range_uj") << range << "\n";
    if (energy) set(z, *energy);
  }
  void set(const std::string& z, std::uint64_t energy) { std::ofstream(root / z / "energy_uj") << energy << "\n"; }
};

TEST(Rapl, PackageAndDramFromFakeSysfsWithWrap) {
  FakeSysfs fs;
  const std::uint64_t range = 262'143'328'850;
  fs.zone("intel-rapl:0", "package-0", range - 2'000'000, range);
  fs.zone("intel-rapl:0:0", "core", 10, range);
  fs.zone("intel-rapl:0:1", "dram", 5'000'000, 65'712'999'613);
  fs.zone("intel-rapl:1", "package-1", 1'000'000, range);
  fs.zone("intel-rapl-mmio:0", "package-0", 0, range);  // duplicate of package 0: ignored
  RaplReader rapl(fs.root);
  ASSERT_EQ(rapl.domains().size(), 4u);
  EXPECT_TRUE(rapl.available());
  auto before = rapl.read();
  fs.set("intel-rapl:0", 3'000'000);      // wrapped: 2 J to the range, then 3 J
  fs.set("intel-rapl:0:0", 999'999'999);  // core is part of the package: not added
  fs.set("intel-rapl:0:1", 6'500'000);
  fs.set("intel-rapl:1", 11'000'000);
  auto e = rapl.difference(before, rapl.read());
  ASSERT_TRUE(e.package_j && e.dram_j);
  EXPECT_DOUBLE_EQ(*e.package_j, 5.0 + 10.0);
  EXPECT_DOUBLE_EQ(*e.dram_j, 1.5);
  EXPECT_NE(e.method.find("2 package, 1 dram"), std::string::npos) << e.method;
  // An unreadable DRAM counter nulls DRAM only.
  std::filesystem::remove(fs.root / "intel-rapl:0:1" / "energy_uj");
  auto partial = rapl.difference(before, rapl.read());
  EXPECT_TRUE(partial.package_j);
  EXPECT_FALSE(partial.dram_j);
}

TEST(Rapl, NoZonesMeansNull) {
  RaplReader rapl("/nonexistent/cnnscale/powercap");
  EXPECT_FALSE(rapl.available());
  auto e = rapl.difference(rapl.read(), rapl.read());
  EXPECT_FALSE(e.package_j);
  EXPECT_FALSE(e.dram_j);
  EXPECT_NE(e.method.find("not readable"), std::string::npos);
}

TEST(Metrics, FormulasMatchHandComputedValues) {
  Workload wl{64, 1.8e9, 1000, 90};
  auto m = compute_metrics({100, 20.0, 5000.0, "nvml"}, wl);
  EXPECT_DOUBLE_EQ(m.seconds_per_batch, 0.2);
  EXPECT_DOUBLE_EQ(m.samples_per_second, 320.0);
  EXPECT_DOUBLE_EQ(*m.joules_per_batch, 50.0);
  EXPECT_DOUBLE_EQ(*m.watts, 250.0);
  EXPECT_DOUBLE_EQ(*m.joules_per_sample, 0.78125);
  EXPECT_DOUBLE_EQ(m.training_seconds, 18000.0);
  EXPECT_DOUBLE_EQ(*m.training_joules, 4.5e6);
  EXPECT_NEAR(*m.gflops, 3456.0, 1e-9);  // 2 x 1.8e9 x 3 x 320 / 1e9
  EXPECT_NEAR(*m.gflops_per_watt, 13.824, 1e-12);
  EXPECT_NEAR(*m.edp_batch_js, 10.0, 1e-12);
  EXPECT_NEAR(*m.edp_training_js, 8.1e10, 1e-2);
  auto j = m.to_json();
  EXPECT_DOUBLE_EQ(j["watts"].get<double>(), 250.0);
  EXPECT_EQ(j["energy_method"], "nvml");

  auto no_energy = compute_metrics({100, 20.0, std::nullopt, "unavailable"}, Workload{64, std::nullopt, 1000, 90});
  auto jn = no_energy.to_json();
  for (const char* k : {"joules", "joules_per_batch", "watts", "joules_per_sample", "training_joules", "gflops",
                        "gflops_per_watt", "edp_batch_js", "edp_training_js"})
    EXPECT_TRUE(jn[k].is_null()) << k;
  EXPECT_DOUBLE_EQ(jn["samples_per_second"].get<double>(), 320.0);
  EXPECT_THROW(compute_metrics({0, 1.0, 1.0, ""}, wl), RuntimeError);
}

TEST(Metrics, JobSumsEnergyAndTakesTheSlowestRank) {
  Workload job{128, 1.8e9, 500, 90};
  auto m = compute_job_metrics({{100, 20.0, 5000.0, "nvml"}, {100, 22.0, 5500.0, "nvml"}}, job);
  EXPECT_DOUBLE_EQ(m.seconds, 22.0);
  EXPECT_DOUBLE_EQ(*m.joules, 10500.0);
  EXPECT_DOUBLE_EQ(m.seconds_per_batch, 0.22);
  EXPECT_NEAR(m.samples_per_second, 128 / 0.22, 1e-9);
  EXPECT_NEAR(*m.watts, 10500.0 / 22.0, 1e-9);
  EXPECT_NE(m.time_method.find("slowest of 2 ranks"), std::string::npos);
  auto partial = compute_job_metrics({{100, 20.0, 5000.0, "nvml"}, {100, 21.0, std::nullopt, ""}}, job);
  EXPECT_FALSE(partial.joules);
  EXPECT_FALSE(partial.watts);
  EXPECT_THROW(compute_job_metrics({{100, 20.0, 1.0, ""}, {90, 20.0, 1.0, ""}}, job), RuntimeError);
}

}  // namespace
}  // namespace cnnscale::measure
