// Runtime-weighted roll-up of per-kernel metric values, with the runtime share each value covers.
#include "measure/kernel_metric_rollup.hpp"

#include "core/error.hpp"

namespace cnnscale::measure {

std::vector<MetricRollup> rollup_metrics(const KernelProfile& profile, const KernelMetricValues& values,
                                         const OwnerGroup& group_of) {
  // A kernel's time over all its launch configurations: the profiler's value is per kernel.
  std::map<KernelKey, int64_t> kernel_ns;
  for (const KernelSummary& s : profile.kernels) kernel_ns[KernelKey{s.owner, s.name}] += s.total_ns;
  for (const auto& [key, metrics] : values)
    if (!kernel_ns.contains(key))
      throw_config("kernel metrics: '{}' of {} has metric values but no record in the profile", key.name,
                   owner_label(key.owner));

  struct Sums {
    int64_t total_ns = 0;
    std::map<std::string, std::pair<double, int64_t>> weighted;  // metric -> (sum of value x ns, ns)
  };
  std::map<std::string, Sums> groups;
  for (const auto& [key, ns] : kernel_ns) {
    Sums& g = groups[group_of(key.owner)];
    g.total_ns += ns;
    const auto it = values.find(key);
    if (it == values.end()) continue;
    for (const auto& [metric, value] : it->second) {
      auto& [weighted_value, covered_ns] = g.weighted[metric];
      weighted_value += value * static_cast<double>(ns);
      covered_ns += ns;
    }
  }
  std::vector<MetricRollup> out;
  for (const auto& [group, sums] : groups) {
    MetricRollup r;
    r.group = group;
    r.total_ns = sums.total_ns;
    for (const auto& [metric, weighted] : sums.weighted) {
      const auto& [weighted_value, covered_ns] = weighted;
      RolledMetric m;
      // Kernels of zero time carry no weight; if all the covered ones are, their plain mean would be
      // a guess at a weight, so the value stays 0 with 0 coverage.
      if (covered_ns > 0) {
        m.value = weighted_value / static_cast<double>(covered_ns);
        m.covered_share = static_cast<double>(covered_ns) / static_cast<double>(sums.total_ns);
      }
      r.metrics.emplace(metric, m);
    }
    out.push_back(std::move(r));
  }
  return out;
}

OwnerGroup group_by_layer_type(std::map<std::string, std::string> type_of_layer) {
  return [types = std::move(type_of_layer)](const KernelOwner& owner) {
    if (owner.pass == KernelPass::Unattributed || owner.layer.empty()) return owner_label(owner);
    const auto it = types.find(owner.layer);
    if (it == types.end()) throw_config("kernel metrics: layer '{}' has no type to group by", owner.layer);
    return it->second + " " + kernel_pass_name(owner.pass);
  };
}

}  // namespace cnnscale::measure
