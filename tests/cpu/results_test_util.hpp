// A synthetic training run for the results-file tests (every kind of value: NaN, null, empty
// series, quoted text) and a temporary results root per test.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "io/run_results.hpp"

namespace cnnscale::testing {

class ResultsDir {
 public:
  ResultsDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        std::filesystem::temp_directory_path() / fmt::format("cnnscale_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ResultsDir() { std::filesystem::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::vector<std::string> entries(const std::string& sub) const {
    std::vector<std::string> out;
    if (!std::filesystem::exists(path_ / sub)) return out;
    for (const auto& e : std::filesystem::directory_iterator(path_ / sub)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

inline RunResults sample() {
  RunResults r;
  r.experiment = "resnet_scaling";
  r.run_id = "20261122T044300Z-0badc0de";
  r.config_text = "net: resnet34\nbatch: 64  # per rank\nname: \"naïve, test\"\n";
  r.system.hosts = {"node-a", "node-b"};
  r.system.gpus = {
      GpuInfo{0, "node-a", "NVIDIA H100", "GPU-1111", "550.54", 700.0, 132, 85'520'809'984, 1980.0, "9.0"},
      GpuInfo{1, "node-b", std::nullopt, "GPU-2222", std::nullopt, kMissing, 0, 0, kMissing, std::nullopt}};
  r.system.cuda_version = "12.4";
  r.system.nccl_version = "2.21.5";
  r.system.mpi_version = "Open MPI v4.1.6";  // cuDNN unknown: null
  r.system.nccl_env = "NCCL_ALGO=Ring NCCL_NVLS_ENABLE=0";
  r.system.engine_cache = "/data/engines.txt";
  r.timeline = Timeline(2);
  for (int it = 0; it < 3; ++it) {
    int64_t row = r.timeline.add_iteration(100 + it, it == 0);
    for (int rank = 0; rank < 2; ++rank)
      for (int p = 0; p < kTimelinePhaseCount; ++p)
        r.timeline.at(row, rank, static_cast<TimelinePhase>(p)) = 0.001 * (1 + p) + 0.1 * rank + 1.0 * it + 1e-12;
  }
  r.timeline.at(1, 1, TimelinePhase::CommBusy) = kMissing;  // e.g. no communication stream on CPU
  PowerSeries g0;
  g0.rank = 0;
  g0.uuid = "GPU-1111";
  g0.t_s = {0.0, 0.1, 0.2};
  g0.power_w = {250.5, 260.25, 270.125};
  g0.avg_power_w = {240.0, kMissing, 250.0};
  g0.energy_mj = {1e12, 1e12 + 25050, 1e12 + 51075};
  g0.sm_clock_mhz = {1980, 1980, 1755};
  g0.temperature_c = {kMissing, kMissing, kMissing};
  PowerSeries g1;  // a GPU whose sampler recorded nothing
  g1.rank = 1;
  r.power = {g0, g1};
  r.epochs = {EpochRecord{1, 500, 2.3, 0.11, 0.5, 0.1}, EpochRecord{2, 1000, 1.7, 0.42, kMissing, 0.01}};
  r.summary.seconds_per_batch = 0.123456789012345;
  r.summary.joules_per_batch = NumberFigure::null();
  r.summary.samples_per_s = 1040.5;
  r.summary.gflops_per_watt = kMissing;
  r.summary.measure = std::string("steady");
  r.summary.tags["note"] = "a, \"quoted\" value";
  r.methods = {{"seconds_per_batch", "slowest rank, mean over steady iterations"},
               {"joules_per_batch", "unavailable: NVML not loaded"}};
  r.split =
      SplitRecord{"auto",
                  20,
                  {SplitChange{100, {32, 32}}, SplitChange{150, {40, 24}}},
                  {ProbePoint{0, 8, 0.01, 2.5}, ProbePoint{1, 8, 0.02, kMissing}},
                  {RankModel{0, 0.002, 0.001, 0.5, 0.25, 60.0}, RankModel{1, 0.004, 0.002, kMissing, kMissing, 55.0}},
                  {ProbePoint{0, 32, 0.05, 9.5}, ProbePoint{1, 32, 0.051, kMissing}},
                  0.0035,
                  kMissing,
                  "step_ratio"};
  return r;
}

}  // namespace cnnscale::testing
