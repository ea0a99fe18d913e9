// Energy windows in training: the EnergyMonitor's segments (pauses excluded, resets, RAPL), the
// Trainer's extension of a short steady window and its phase-isolated loops, all against GPUs
// whose counters we control; and the job summary assembled from several ranks' reports.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>

#include "solver/run_report.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"
#include "data/synthetic_dataset.hpp"
#include "measure/energy_monitor.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {
namespace {

using measure::EnergyMonitor;
using measure::GpuPowerReader;

// A counter we set by hand.
class ManualGpu final : public GpuPowerReader {
 public:
  bool available() const override { return true; }
  std::string description() const override { return "manual"; }
  std::optional<std::uint64_t> energy_mj() override {
    std::lock_guard lock(mutex_);
    return mj_;
  }
  std::optional<double> power_w() override { return 100.0; }
  std::optional<double> average_power_w() override { return 100.0; }
  std::optional<double> sm_clock_mhz() override { return std::nullopt; }
  std::optional<double> temperature_c() override { return std::nullopt; }
  std::optional<double> power_limit_w() override { return 700.0; }
  void set(std::uint64_t mj) {
    std::lock_guard lock(mutex_);
    mj_ = mj;
  }

 private:
  std::mutex mutex_;
  std::uint64_t mj_ = 0;
};

// A GPU drawing a constant power in real time: its counter is watts x elapsed time. It notes when
// its counter is read: each window of the energy monitor reads it once when it opens and once when
// it closes.
class ConstantGpu final : public GpuPowerReader {
 public:
  explicit ConstantGpu(double watts) : watts_(watts) {}
  bool available() const override { return true; }
  std::string description() const override { return "constant"; }
  std::optional<std::uint64_t> energy_mj() override {
    std::lock_guard lock(mutex_);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    reads_.push_back(s);
    return static_cast<std::uint64_t>(5e6 + watts_ * s * 1e3);
  }
  std::optional<double> power_w() override { return watts_; }
  std::optional<double> average_power_w() override { return watts_; }
  std::optional<double> sm_clock_mhz() override { return 1500.0; }
  std::optional<double> temperature_c() override { return 50.0; }
  std::optional<double> power_limit_w() override { return 700.0; }
  std::vector<double> reads() {  // seconds since construction
    std::lock_guard lock(mutex_);
    return reads_;
  }

 private:
  double watts_;
  std::mutex mutex_;
  std::vector<double> reads_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

TEST(EnergyMonitor, SegmentsSumAndPausesAreExcluded) {
  auto gpu = std::make_unique<ManualGpu>();
  ManualGpu& g = *gpu;
  EnergyMonitor m(std::move(gpu), nullptr, 0.0);
  g.set(1000);
  m.begin("steady window");
  g.set(3000);
  m.pause();
  g.set(10'000);  // evaluation: not the window's
  m.resume();
  g.set(11'000);
  measure::EnergyReading r = m.end(5);
  ASSERT_TRUE(r.gpu_joules);
  EXPECT_DOUBLE_EQ(*r.gpu_joules, 3.0);
  EXPECT_EQ(r.segments, 2);
  EXPECT_EQ(r.iterations, 5);
  EXPECT_FALSE(r.cpu_package_joules);
  EXPECT_NE(r.gpu_method.find("2 segments"), std::string::npos) << r.gpu_method;
  EXPECT_FALSE(r.gpu_sampled_joules) << "no sampler at 0 Hz";

  // A counter that goes backwards in any segment voids the window.
  m.begin("again");
  g.set(500);
  r = m.end(1);
  EXPECT_FALSE(r.gpu_joules);
  EXPECT_TRUE(r.counter_reset);
  EXPECT_NE(r.gpu_method.find("backwards"), std::string::npos);
  EXPECT_THROW(m.pause(), RuntimeError);  // no window open
}

TEST(EnergyMonitor, UnavailableGpuGivesNullEnergyButTime) {
  EnergyMonitor m(std::make_unique<measure::UnavailableGpuReader>("CPU run"), nullptr, 10.0);
  EXPECT_FALSE(m.measures_energy());
  EXPECT_EQ(m.sampler(), nullptr) << "nothing to sample";
  m.begin("w");
  measure::EnergyReading r = m.end(3);
  EXPECT_FALSE(r.gpu_joules);
  EXPECT_GE(r.seconds, 0.0);
  EXPECT_NE(r.gpu_method.find("CPU run"), std::string::npos);
}

struct TinyRun {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml");
  std::shared_ptr<const Dataset> data =
      std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 256, SyntheticFill::Gaussian, 3);
  TrainOptions options() const {
    TrainOptions o;
    o.batch = 8;
    o.iterations = 6;
    o.device_pool = true;
    o.timing_warmup = 1;
    o.display = 3;
    return o;
  }
};

TEST(EnergyTraining, ShortSteadyWindowIsExtendedToTheMinimum) {
  TinyRun run;
  EnergyMonitor energy(std::make_unique<ConstantGpu>(50.0), nullptr, 0.0);
  TrainOptions o = run.options();
  TrainMeasurement m;
  m.energy = &energy;
  m.min_window_seconds = 0.4;
  Trainer trainer(run.spec, *run.backend, run.data, nullptr, SolverConfig{}, o, {}, m);
  TrainResult r = trainer.run();
  ASSERT_TRUE(r.window);
  EXPECT_GE(r.window->seconds, 0.4);
  EXPECT_GT(r.extension_iterations, 0);
  EXPECT_EQ(r.window->iterations, 5 + r.extension_iterations) << "6 iterations, 1 of them warm-up";
  EXPECT_EQ(r.timed_iterations, r.window->iterations);
  EXPECT_EQ(r.iterations, 6) << "the extension is not training the user asked for";
  ASSERT_EQ(static_cast<int64_t>(r.phases.size()), 6 + r.extension_iterations);
  EXPECT_EQ(r.phases.back().iteration, 6 + r.extension_iterations - 1);
  ASSERT_TRUE(r.window->gpu_joules);
  // 50 W for the window's duration; the counter and the clock are read microseconds apart.
  EXPECT_NEAR(*r.window->gpu_joules, 50.0 * r.window->seconds, 0.02 * 50.0 * r.window->seconds);
}

// --split energy chooses by joules: the probe's windows (the idle power, each probe batch, the
// update) last at least min_window_seconds however short --probe-seconds is, so that the counter's
// coarse steps are a small part of what they read. On one rank there is no exchange to time; the
// steady window that follows is extended to the same floor.
TEST(EnergyTraining, ProbeWindowsOfTheEnergyPoliciesLastTheEnergyWindow) {
  TinyRun run;
  auto gpu = std::make_unique<ConstantGpu>(50.0);
  ConstantGpu& clocked = *gpu;
  EnergyMonitor energy(std::move(gpu), nullptr, 0.0);
  TrainOptions o = run.options();
  TrainMeasurement m;
  m.energy = &energy;
  o.split = SplitPolicy::Energy;
  o.probe_seconds = 0.005;
  m.min_window_seconds = 0.3;
  Trainer trainer(run.spec, *run.backend, run.data, nullptr, SolverConfig{}, o, {}, m);
  const TrainResult r = trainer.run();
  // The windows before training, in order: the idle power, the probe batches 4 and 8 (around the
  // one rank's 8), the update. Each read pair brackets the trainer's own clock of the window, so
  // its span is at least that window's length, which must reach the floor.
  const std::vector<double> reads = clocked.reads();
  ASSERT_GE(reads.size(), 8u);
  for (size_t w = 0; w < 4; ++w) EXPECT_GE(reads[2 * w + 1] - reads[2 * w], 0.3) << "window " << w;
  ASSERT_EQ(r.split.probe.size(), 2u);
  for (const ProbePoint& p : r.split.probe) {
    // Joules per pass = 50 W x seconds per pass; the counter and the clock are read microseconds
    // apart in a window of 0.3 s or more.
    ASSERT_TRUE(std::isfinite(p.joules)) << p.batch;
    EXPECT_NEAR(p.joules, 50.0 * p.seconds, 0.02 * 50.0 * p.seconds) << p.batch;
  }
}

TEST(EnergyTraining, NoExtensionWithoutAnEnergyCounter) {
  TinyRun run;
  EnergyMonitor energy(std::make_unique<measure::UnavailableGpuReader>("CPU run"), nullptr, 0.0);
  TrainOptions o = run.options();
  TrainMeasurement m;
  m.energy = &energy;
  m.min_window_seconds = 30.0;  // would take far longer than the test if it extended
  Trainer trainer(run.spec, *run.backend, run.data, nullptr, SolverConfig{}, o, {}, m);
  TrainResult r = trainer.run();
  ASSERT_TRUE(r.window);
  EXPECT_EQ(r.extension_iterations, 0);
  EXPECT_EQ(r.window->iterations, 5);
  EXPECT_FALSE(r.window->gpu_joules);
}

TEST(EnergyTraining, PhaseLoopsAreLongEnoughAndInOrder) {
  TinyRun run;
  EnergyMonitor energy(std::make_unique<ConstantGpu>(80.0), nullptr, 0.0);
  TrainOptions o = run.options();
  TrainMeasurement m;
  m.energy = &energy;
  m.min_window_seconds = 0.0;
  m.measure = MeasureMode::Phases;
  m.phase_window_seconds = 0.05;
  m.phase_repeats = 2;
  Trainer trainer(run.spec, *run.backend, run.data, nullptr, SolverConfig{}, o, {}, m);
  TrainResult r = trainer.run();
  ASSERT_EQ(r.phase_loops.size(), 6u);
  const char* kinds[] = {"forward", "forward_backward", "full_step"};
  for (size_t i = 0; i < r.phase_loops.size(); ++i) {
    const PhaseLoopRecord& l = r.phase_loops[i];
    EXPECT_EQ(l.repeat, static_cast<int>(i / 3));
    EXPECT_EQ(l.kind, kinds[i % 3]);
    EXPECT_GE(l.reading.seconds, 0.05);
    EXPECT_GE(l.reading.iterations, 3);
    ASSERT_TRUE(l.reading.gpu_joules);
    EXPECT_NEAR(*l.reading.gpu_joules, 80.0 * l.reading.seconds, 0.05 * 80.0 * l.reading.seconds);
  }
  // Which loop is faster per iteration is a timing, not a property: on a loaded machine the
  // forward-only loop can come out slower than forward+backward. The derivation copes with that
  // (PhaseEnergy.OutOfOrderLoopsNeverGiveNegativePhases); here only the loops' order and lengths count.
}

// Two ranks' reports as make_rank_report fills them, with numbers chosen by hand.
RankReport report(int rank, double seconds, std::optional<double> gpu_joules, bool reads_rapl) {
  RankReport rep;
  rep.rank = rank;
  rep.host = "node0";
  rep.local_batch = 32;
  rep.gpu =
      RankGpu{"Test GPU", "GPU-" + std::to_string(rank), "1.0", 700.0, 132 - 66 * rank, 80LL << 30, 1980.0, "9.0"};
  rep.iteration = {0, 1, 2};
  rep.warmup = {1, 0, 0};
  rep.seconds = {PhaseSeconds{0, 0, .1, .2, 0, 0, .01, .31}, PhaseSeconds{0, 0, .1, .2, 0, 0, .01, .31},
                 PhaseSeconds{0, 0, .1 * (rank + 1), .2, 0, 0, .01, .31}};
  rep.phase_means = {0, 0, .1 * (rank + 1), .2, .01, .05, .01, .32};
  rep.phase_iterations = 2;
  rep.reads_rapl = reads_rapl;
  rep.extension_iterations = 0;
  measure::EnergyReading& w = rep.window.emplace();
  w.iterations = 10;
  w.seconds = seconds;
  w.segments = 1;
  w.gpu_joules = gpu_joules;
  if (reads_rapl) {
    w.cpu_package_joules = 40.0;
    w.cpu_dram_joules = 10.0;
  }
  w.gpu_method = "nvml";
  w.cpu_method = "rapl";
  // measure phases: forward 2 J/it, forward+backward 5 J/it, full step 6 J/it, on each rank.
  for (int rep_i = 0; rep_i < 2; ++rep_i)
    for (auto [kind, jpi, spi] : {std::tuple{"forward", 2.0, 0.1}, std::tuple{"forward_backward", 5.0, 0.3},
                                  std::tuple{"full_step", 6.0 + rep_i, 0.4}}) {
      measure::EnergyReading reading;
      reading.iterations = 20;
      reading.seconds = 20 * spi * (rank + 1);
      reading.gpu_joules = 20 * jpi;
      rep.loops.push_back({rep_i, kind, reading});
    }
  return rep;
}

RunDescription description() {
  RunDescription d;
  d.experiment = "e";
  d.run_id = "r";
  d.net = "net";
  d.data = "synthetic";
  d.device_kind = "gpu";
  d.world_size = 2;
  d.global_batch = 64;
  d.iterations = 30;
  d.iterations_per_epoch = 10;
  d.train_samples = 640;
  d.run_epochs = 3;
  d.forward_macs = 1e6;
  d.measure = MeasureMode::Phases;
  d.tags = {"repeat=2"};
  return d;
}

// The report travels between ranks as JSON text: what rank 0 reads back is what the rank filled in.
TEST(RankReport, RoundTripsThroughItsJsonText) {
  RankReport sent = report(1, 2.5, std::nullopt, false);
  sent.power = PowerSeries{1, "GPU-1", {0.0, 0.1}, {300.0, kMissing}, {290.0, 295.0}, {1e9, 1e9 + 30}, {1980, 1755},
                           {60, 61}};
  const nlohmann::json wire = nlohmann::json::parse(nlohmann::json(sent).dump());
  const RankReport got = wire.get<RankReport>();
  EXPECT_EQ(nlohmann::json(got), wire);
  EXPECT_EQ(got.gpu->uuid, "GPU-1");
  EXPECT_FALSE(got.window->gpu_joules.has_value());
  EXPECT_TRUE(std::isnan(got.power->power_w[1]));
  EXPECT_EQ(got.power->uuid, "GPU-1");
  ASSERT_EQ(got.loops.size(), 6u);
  EXPECT_EQ(got.loops[5].kind, "full_step");
  EXPECT_DOUBLE_EQ(got.loops[5].reading.gpu_joules.value(), 20 * 7.0);
  // The assembly from the reports as gathered (through their JSON text) is the assembly from the structs.
  const std::vector<RankReport> ranks = {report(0, 2.0, 100.0, true), sent};
  const std::vector<RankReport> gathered = {nlohmann::json::parse(nlohmann::json(ranks[0]).dump()).get<RankReport>(),
                                            got};
  EXPECT_EQ(assemble_run_results(description(), TrainResult{}, gathered, 1, 0).summary,
            assemble_run_results(description(), TrainResult{}, ranks, 1, 0).summary);
}

// A report of the wrong shape (another version's rank, a bug) is refused with the key at fault.
TEST(RankReport, MalformedReportNamesTheKey) {
  const nlohmann::json good = report(0, 2.0, 100.0, true);
  nlohmann::json j = good;
  j["loops"][2]["reading"].erase("seconds");
  try {
    j.get<RankReport>();
    FAIL() << "a loop without seconds was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("missing \"loops[2].reading.seconds\""), std::string::npos) << e.what();
  }
  j = good;
  j["timeline"]["seconds"][1][2] = "slow";
  try {
    j.get<RankReport>();
    FAIL() << "a text phase time was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"timeline.seconds[1][2]\" is not a number"), std::string::npos)
        << e.what();
  }
  j = good;
  j["gpu"]["sm_count"] = 1.5;
  EXPECT_THROW(j.get<RankReport>(), ConfigError);
  // Optional parts absent (a CPU rank: no gpu, no power) read as absent.
  j = good;
  j.erase("gpu");
  EXPECT_FALSE(j.get<RankReport>().gpu.has_value());
}

TEST(RunAssembly, JobSumsGpuEnergyAndTakesTheSlowestRank) {
  std::vector<RankReport> ranks = {report(0, 2.0, 100.0, true), report(1, 2.5, 140.0, false)};
  TrainResult r0;
  r0.final_loss = 1.5;
  RunResults res = assemble_run_results(description(), r0, ranks, 90, 1'281'167);
  EXPECT_DOUBLE_EQ(res.summary.window_seconds.value(), 2.5);
  EXPECT_DOUBLE_EQ(res.summary.seconds_per_batch.value(), 0.25);
  EXPECT_DOUBLE_EQ(res.summary.samples_per_s.value(), 64 / 0.25);
  EXPECT_DOUBLE_EQ(res.summary.joules_per_batch.value(), 24.0);  // (100 + 140) J / 10 iterations
  EXPECT_DOUBLE_EQ(res.summary.watts.value(), 240.0 / 2.5);
  EXPECT_DOUBLE_EQ(res.summary.whole_iterations.value(), 90.0 * 20019);  // ceil(1,281,167 / 64) per epoch
  EXPECT_DOUBLE_EQ(res.summary.whole_training_seconds.value(), 0.25 * 90 * 20019);
  EXPECT_DOUBLE_EQ(res.summary.whole_training_joules.value(), 24.0 * 90 * 20019);
  EXPECT_DOUBLE_EQ(res.summary.gflops.value(), 2 * 1e6 * 3 * 256 / 1e9);
  EXPECT_DOUBLE_EQ(res.summary.cpu_package_joules_per_batch.value(), 4.0) << "only rank 0 reads its host";
  EXPECT_DOUBLE_EQ(res.summary.time_forward_s.value(), 0.2) << "slowest rank's mean";
  // No wait for data: not input-bound. Then rank 1 waits 0.02 s of its 0.32 s step (6.25 % > 5 %).
  EXPECT_DOUBLE_EQ(res.summary.input_wait_share.value(), 0.0);
  EXPECT_DOUBLE_EQ(res.summary.input_bound.value(), 0.0);
  {
    std::vector<RankReport> waiting = ranks;
    waiting[1].phase_means[0] = 0.02;
    const RunSummary s = assemble_run_results(description(), r0, waiting, 90, 1'281'167).summary;
    EXPECT_DOUBLE_EQ(s.input_wait_share.value(), 0.02 / 0.32);
    EXPECT_DOUBLE_EQ(s.input_bound.value(), 1.0);
  }
  EXPECT_DOUBLE_EQ(res.summary.world_size.value(), 2);
  EXPECT_EQ(res.summary.gpu_names.value(), "Test GPU,Test GPU");
  EXPECT_EQ(res.summary.tags.at("repeat"), "2");
  EXPECT_DOUBLE_EQ(res.summary.final_loss.value(), 1.5);
  EXPECT_TRUE(res.summary.test_top1.is_null());
  // Per rank: each its own GPU and time.
  ASSERT_EQ(res.rank_summary.size(), 2u);
  EXPECT_DOUBLE_EQ(res.rank_summary[1].joules_per_batch.value(), 14.0);
  EXPECT_DOUBLE_EQ(res.rank_summary[1].seconds_per_batch.value(), 0.25);
  EXPECT_DOUBLE_EQ(res.rank_summary[0].samples_per_s.value(), 32 / 0.2);
  // Phases, job level: energies summed over both GPUs, times of the slowest (rank 1, 2x rank 0's).
  EXPECT_DOUBLE_EQ(res.summary.energy_forward_j.value(), 4.0);
  EXPECT_DOUBLE_EQ(res.summary.energy_backward_j.value(), 6.0);
  EXPECT_DOUBLE_EQ(res.summary.energy_update_allreduce_j.value(), 3.0);   // (12 - 10 + 14 - 10) / 2
  EXPECT_NEAR(res.summary.energy_update_allreduce_j_std.value(), std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(res.summary.loop_forward_s.value(), 0.2, 1e-12);
  EXPECT_NEAR(res.summary.loop_backward_s.value(), 0.4, 1e-12);
  EXPECT_NEAR(res.summary.loop_update_allreduce_s.value(), 0.2, 1e-12);
  // The timeline keeps every rank; /system every GPU.
  EXPECT_EQ(res.timeline.ranks(), 2);
  EXPECT_EQ(res.timeline.iterations(), 3);
  EXPECT_DOUBLE_EQ(res.timeline.at(2, 1, TimelinePhase::Forward), 0.2);
  ASSERT_EQ(res.system.gpus.size(), 2u);
  EXPECT_EQ(res.system.gpus[1].uuid.value_or(""), "GPU-1");
  EXPECT_EQ(res.system.hosts, std::vector<std::string>{"node0"});
  EXPECT_FALSE(res.methods.at("joules_per_batch").empty());
}

TEST(RunAssembly, OneRankWithoutGpuEnergyMakesTheJobEnergyNull) {
  std::vector<RankReport> ranks = {report(0, 2.0, 100.0, true), report(1, 2.5, std::nullopt, false)};
  RunResults res = assemble_run_results(description(), TrainResult{}, ranks, 1, 0);
  EXPECT_TRUE(res.summary.joules_per_batch.is_null());
  EXPECT_TRUE(res.summary.gflops_per_watt.is_null());
  EXPECT_DOUBLE_EQ(res.summary.seconds_per_batch.value(), 0.25) << "time stays known";
  EXPECT_DOUBLE_EQ(res.summary.whole_iterations.value(), 10.0) << "640 samples / 64";
}

TEST(RunAssembly, CpuRunCountsEachHostsRaplOnce) {
  RunDescription d = description();
  d.device_kind = "cpu";
  d.measure = MeasureMode::Steady;
  std::vector<RankReport> ranks = {report(0, 2.0, std::nullopt, true), report(1, 2.0, std::nullopt, false)};
  for (auto& r : ranks) r.gpu.reset();
  RunResults res = assemble_run_results(d, TrainResult{}, ranks, 1, 0);
  EXPECT_DOUBLE_EQ(res.summary.joules_per_batch.value(), 5.0) << "(40 + 10) J / 10 iterations";
  EXPECT_TRUE(res.system.gpus.empty());
  EXPECT_FALSE(res.summary.energy_forward_j.written()) << "steady mode has no phase loops";
}

}  // namespace
}  // namespace cnnscale
