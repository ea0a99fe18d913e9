// TrainWatch (experiment/train_watch.hpp): the progress's watts come from the energy monitor's
// sampler, and a display step never reads the GPU on the training thread, which has just waited
// for the device and would leave it idle through an NVML call.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "experiment/train_watch.hpp"
#include "measure/energy_monitor.hpp"
#include "measure/power_sampler.hpp"
#include "common/temp_dir.hpp"

namespace cnnscale {
namespace {

using measure::EnergyMonitor;
using measure::GpuPowerReader;
using measure::PowerSample;
using testing::TempDir;

// A GPU drawing a constant power in real time, which counts the reads made on a given thread.
class WatchedGpu final : public GpuPowerReader {
 public:
  explicit WatchedGpu(double watts) : watts_(watts) {}
  bool available() const override { return true; }
  std::string description() const override { return "watched"; }
  std::optional<std::uint64_t> energy_mj() override {
    note();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return static_cast<std::uint64_t>(5e6 + watts_ * s * 1e3);
  }
  std::optional<double> power_w() override { return note(), watts_; }
  std::optional<double> average_power_w() override { return note(), watts_; }
  std::optional<double> sm_clock_mhz() override { return note(), 1500.0; }
  std::optional<double> temperature_c() override { return note(), 50.0; }
  std::optional<double> power_limit_w() override { return note(), 700.0; }
  void watch(std::thread::id id) {
    std::lock_guard lock(mutex_);
    watched_ = id;
    reads_on_watched_ = 0;
  }
  int reads_on_watched() {
    std::lock_guard lock(mutex_);
    return reads_on_watched_;
  }

 private:
  void note() {
    std::lock_guard lock(mutex_);
    if (std::this_thread::get_id() == watched_) ++reads_on_watched_;
  }
  double watts_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::thread::id watched_;
  int reads_on_watched_ = 0;
};

DisplayInfo display_at(int64_t iteration) {
  DisplayInfo d;
  d.iteration = iteration;
  d.total = 100;
  d.epoch = 1;
  d.loss = 2.0;
  d.lr = 0.1;
  d.samples_per_s = 1000;
  return d;
}

TEST(PowerSampler, LatestIsTheNewestSampleAndCounterWattsItsPace) {
  WatchedGpu gpu(250.0);
  measure::PowerSampler sampler({&gpu}, 50.0);
  EXPECT_FALSE(sampler.latest(0).has_value());
  sampler.sample_now();
  const std::optional<PowerSample> first = sampler.latest(0);
  ASSERT_TRUE(first && first->energy_mj);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  sampler.sample_now();
  const std::optional<PowerSample> second = sampler.latest(0);
  ASSERT_TRUE(second && second->t_s > first->t_s);
  EXPECT_EQ(sampler.samples(0).size(), 2u);
  // Each sample stamps its time just before reading the counter, so the two stamps are off their
  // reads by the time of the calls in between, a preemption on a loaded machine included (a few
  // ms): over a 300 ms span that is a few per cent; the counter's mJ truncation adds 2 mJ in 75 J.
  const std::optional<double> w = measure::counter_watts(*first, *second);
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR(*w, 250.0, 0.1 * 250.0);
  // Backwards (a counter reset) or no time passed: no figure.
  EXPECT_FALSE(measure::counter_watts(*second, *first).has_value());
  EXPECT_FALSE(measure::counter_watts(*first, *first).has_value());
  PowerSample unread = *second;
  unread.energy_mj.reset();
  EXPECT_FALSE(measure::counter_watts(*first, unread).has_value());
}

TEST(TrainWatch, DisplayStepsTakeWattsFromTheSamplerAndNeverReadTheGpu) {
  const TempDir root;
  auto owned = std::make_unique<WatchedGpu>(300.0);
  WatchedGpu& gpu = *owned;
  EnergyMonitor energy(std::move(owned), nullptr, 50.0);
  Provenance started;
  started.start_time = "2026-12-06T00:00:00Z";
  gpu.watch(std::this_thread::get_id());
  TrainWatch watch(root.str(), "exp", "run-1", started, &energy);
  energy.start_sampling();
  // The sampler's first reading is made on its thread as it starts.
  for (int i = 0; i < 200 && !energy.sampler()->latest(0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  watch.iteration(1, 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  watch.display(display_at(50));
  const nlohmann::json progress = nlohmann::json::parse(watch.final_progress("running", 50));
  energy.stop_sampling();
  watch.close();
  EXPECT_EQ(gpu.reads_on_watched(), 0) << "the watch read the GPU on the training thread";
  ASSERT_TRUE(progress["watts"].is_number()) << progress.dump();
  // Between two sampler readings at least 300 ms apart (see PowerSampler above for the margin).
  EXPECT_NEAR(progress["watts"].get<double>(), 300.0, 0.1 * 300.0) << progress.dump();
}

TEST(TrainWatch, NoSamplerNoWatts) {
  const TempDir root;
  EnergyMonitor energy(std::make_unique<WatchedGpu>(300.0), nullptr, 0.0);  // sampling off
  Provenance started;
  TrainWatch watch(root.str(), "exp", "run-2", started, &energy);
  watch.iteration(1, 100);
  watch.display(display_at(50));
  const nlohmann::json progress = nlohmann::json::parse(watch.final_progress("running", 50));
  watch.close();
  EXPECT_TRUE(progress["watts"].is_null()) << progress.dump();
  EXPECT_EQ(progress["loss"], 2.0);
}

}  // namespace
}  // namespace cnnscale
