// Hardware metrics of kernels rolled up to a layer, a pass or a layer type by runtime share, as Li et
// al. (Fig. 6) weight nvprof's per-kernel metrics by each kernel's share of the implementation's
// runtime. A kernel without a value for a metric drops out of that metric's weights, and the roll-up
// says what share of the group's kernel time the value covers, so a figure from half the runtime is
// never shown as the whole.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "measure/kernel_profile.hpp"

namespace cnnscale::measure {

struct KernelKey {
  KernelOwner owner;
  std::string name;
  auto operator<=>(const KernelKey&) const = default;
};

// Per kernel of an owner, metric name -> value (one value per kernel, as a profiler reports it).
using KernelMetricValues = std::map<KernelKey, std::map<std::string, double>>;

struct RolledMetric {
  double value = 0.0;          // runtime-weighted mean over the kernels that have it
  double covered_share = 0.0;  // their share of the group's kernel time, in [0, 1]
};

struct MetricRollup {
  std::string group;
  int64_t total_ns = 0;  // the group's kernel time, all kernels
  std::map<std::string, RolledMetric> metrics;
};

// The group of an owner: owner_label for per-owner roll-ups, or a layer type with the pass.
using OwnerGroup = std::function<std::string(const KernelOwner&)>;

// Groups whose kernels have no value for a metric do not list it. Throws ConfigError for a metric
// value of a kernel the profile does not hold (a feed that does not match its metrics).
std::vector<MetricRollup> rollup_metrics(const KernelProfile& profile, const KernelMetricValues& values,
                                         const OwnerGroup& group_of);

// "Convolution forward", from the type of each layer; "update", "exchange", "input copy" and
// "unattributed" stay as they are. Throws ConfigError for a layer the map does not type.
OwnerGroup group_by_layer_type(std::map<std::string, std::string> type_of_layer);

}  // namespace cnnscale::measure
