// `bench conv --kernels [--metrics]`: Li et al.'s Fig. 4 and 6, what each cuDNN algorithm runs. After
// a variant's timing, one more call of it is traced (a tracer of its own, so the timed repeats carry
// no instrument) and, with metrics, one call more is profiled; its kernels are the variant's, owned
// by "<problem> <pass> <algorithm>" and grouped by algorithm and pass for the roll-ups.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "measure/kernel_bench_suite.hpp"
#include "measure/kernel_metric_rollup.hpp"
#include "measure/kernel_profile.hpp"

namespace cnnscale {

class KernelBenchKernels {
 public:
  // Refuses (ConfigError) before any work where the backend cannot trace or, with metric names, profile.
  KernelBenchKernels(Backend& backend, std::vector<std::string> metric_names,
                     MetricReplay replay = MetricReplay::Kernel);

  // For KernelBenchOptions::profile_call.
  void profile_call(const measure::KernelBenchRow& row, const std::function<void()>& call);

  // The calls' kernels, one call a "step" (launches per call).
  measure::KernelProfile profile() const;
  // Each owner's group: its algorithm and pass ("IMPLICIT_PRECOMP_GEMM fwd").
  const std::map<std::string, std::string>& group_of_owner() const { return group_of_owner_; }
  // Each owner's timed median per call, for the check that its kernels account for it.
  const std::map<measure::KernelOwner, double>& measured_ms() const { return measured_ms_; }
  const measure::KernelMetricValues& raw_metrics() const { return raw_metrics_; }
  const std::optional<KernelMetricResult>& last_metric_run() const { return last_metric_run_; }
  int64_t replay_passes() const { return passes_; }
  double metric_seconds() const { return metric_seconds_; }
  measure::AttributionCounts counts() const { return counts_; }
  const std::string& sm_arch() const { return sm_arch_; }
  const std::string& gpu() const { return gpu_; }

 private:
  Backend& backend_;
  std::vector<std::string> metric_names_;
  MetricReplay replay_;
  std::unique_ptr<KernelMetricProfiler> profiler_;
  std::vector<measure::KernelRecord> records_;
  std::map<std::string, std::string> group_of_owner_;
  std::map<measure::KernelOwner, double> measured_ms_;
  measure::KernelMetricValues raw_metrics_;
  std::optional<KernelMetricResult> last_metric_run_;
  int64_t passes_ = 0;
  double metric_seconds_ = 0;
  measure::AttributionCounts counts_;
  std::string sm_arch_, gpu_;
};

}  // namespace cnnscale
