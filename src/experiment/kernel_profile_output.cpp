// The kernel profile as the results schema's struct (see kernel_profile_output.hpp): a row per
// kernel, per owner and per group and pass, the metrics rolled up by runtime share
// (measure::rollup_metrics) with the share of kernel time each value covers.
#include "experiment/kernel_profile_output.hpp"

#include <algorithm>
#include <set>

#include "core/error.hpp"

namespace cnnscale::report {

namespace {

using measure::KernelOwner;
using measure::KernelPass;
using measure::KernelSummary;

bool is_step_part(const KernelOwner& owner) {
  return owner.pass == KernelPass::Unattributed || owner.layer.empty();
}

// The layer type or algorithm of an owner; the step's parts (update, exchange, input copy,
// unattributed) are groups of their own name.
std::string group_of(const KernelOwner& owner, const KernelProfileContext& c) {
  if (is_step_part(owner)) return measure::kernel_pass_name(owner.pass);
  const auto it = c.group_of_layer.find(owner.layer);
  if (it == c.group_of_layer.end())
    throw_config("kernel profile: layer '{}' has no {} to group it by", owner.layer, c.group_kind);
  return it->second;
}

// The key of a group and pass for rollup_metrics, split again by the caller.
constexpr char kGroupPassSeparator = '\n';
std::string group_pass_key(const KernelOwner& owner, const KernelProfileContext& c) {
  return group_of(owner, c) + kGroupPassSeparator + measure::kernel_pass_name(owner.pass);
}

// The measured metrics' columns, checked against the results' columns.
std::vector<size_t> measured_columns(const KernelProfileContext& c, const measure::KernelMetricValues& values) {
  std::vector<size_t> out;
  for (const std::string& key : c.metric_set) out.push_back(kernel_metric_index(key));
  const std::set<std::string> listed(c.metric_set.begin(), c.metric_set.end());
  for (const auto& [kernel, metrics] : values)
    for (const auto& [key, value] : metrics) {
      kernel_metric_index(key);  // a key with no column is refused, never dropped
      if (!listed.contains(key))
        throw_config("kernel profile: '{}' of {} has a value for '{}', which the metric set does not list", kernel.name,
                     measure::owner_label(kernel.owner), key);
    }
  return out;
}

// With metrics, every column is written: the measured ones with their value or null, the others
// null. Without, none is (the files of a run without --metrics carry no metric fields).
void fill_kernel_metrics(KernelMetricFigures& out, const std::vector<size_t>& measured,
                         const std::map<std::string, double>* values) {
  if (measured.empty()) return;
  for (NumberFigure& f : out) f = NumberFigure::null();
  if (!values) return;
  for (const auto& [key, value] : *values) out[kernel_metric_index(key)] = value;
}

void fill_rolled(RolledKernelMetrics& out, const std::vector<size_t>& measured, const measure::MetricRollup* rollup) {
  if (measured.empty()) return;
  for (size_t i = 0; i < kKernelMetricCount; ++i) out.metrics[i] = out.coverage[i] = NumberFigure::null();
  for (const size_t i : measured) {
    out.coverage[i] = 0.0;  // measured, but no kernel of the row has a value
    if (!rollup) continue;
    const auto it = rollup->metrics.find(std::string(kernel_metric_columns()[i].key));
    if (it == rollup->metrics.end() || it->second.covered_share <= 0) continue;
    out.metrics[i] = it->second.value;
    out.coverage[i] = it->second.covered_share;
  }
}

std::map<std::string, measure::MetricRollup> by_group(std::vector<measure::MetricRollup> rollups) {
  std::map<std::string, measure::MetricRollup> out;
  for (measure::MetricRollup& r : rollups) out.emplace(r.group, std::move(r));
  return out;
}

const measure::MetricRollup* find_rollup(const std::map<std::string, measure::MetricRollup>& m, const std::string& k) {
  const auto it = m.find(k);
  return it == m.end() ? nullptr : &it->second;
}

TextFigure layer_of(const KernelOwner& owner) {
  return is_step_part(owner) ? TextFigure::null() : TextFigure(owner.layer);
}

}  // namespace

KernelProfileSummary kernel_profile_summary(const measure::KernelProfile& profile,
                                            const measure::KernelMetricValues& metrics, const KernelProfileContext& c) {
  if (profile.profiled_steps < 1) throw_config("kernel profile: no profiled step");
  const std::vector<size_t> measured = measured_columns(c, metrics);
  const double steps = static_cast<double>(profile.profiled_steps);
  auto ms_per_step = [&](int64_t ns) { return static_cast<double>(ns) / steps / 1e6; };
  const double step_ns = static_cast<double>(profile.kernel_ns);
  auto share = [&](int64_t ns) { return step_ns > 0 ? static_cast<double>(ns) / step_ns : 0.0; };

  KernelProfileSummary s;
  s.command = c.command;
  s.net = c.command == "time" ? TextFigure(c.net) : TextFigure::null();
  s.device = c.device;
  s.gpu = text_or_null(c.gpu);
  s.sm_arch = text_or_null(c.sm_arch);
  s.host = c.host;
  s.time = c.utc_time;
  s.precision = c.precision;
  s.layout = text_or_null(c.layout);
  s.batch = c.batch > 0 ? CountFigure(c.batch) : CountFigure::null();
  s.inference = c.inference;
  s.warmup = c.warmup;
  s.profiled_steps = profile.profiled_steps;
  s.graph_note = c.graph_note;
  s.group_kind = c.group_kind;
  s.attributed_kernels = c.counts.attributed;
  s.unattributed_kernels = c.counts.unattributed;
  s.dropped_records = c.dropped_records;
  s.kernel_ms_per_step = ms_per_step(profile.kernel_ns);
  s.step_ms = number_or_null(c.step_ms);
  s.profiled_step_ms = number_or_null(c.profiled_step_ms);
  s.profiling_overhead = c.step_ms && c.profiled_step_ms && *c.step_ms > 0
                             ? NumberFigure(*c.profiled_step_ms / *c.step_ms - 1.0)
                             : NumberFigure::null();
  s.overhead_note = c.overhead_note;
  s.metric_set = c.metric_set;
  const bool with_metrics = !c.metric_set.empty();
  s.metric_method = with_metrics ? text_or_null(c.metric_method) : TextFigure::null();
  s.chip = with_metrics ? text_or_null(c.chip) : TextFigure::null();
  s.replay_passes = with_metrics ? CountFigure(c.replay_passes) : CountFigure::null();
  s.metric_seconds = with_metrics ? NumberFigure(c.metric_seconds) : NumberFigure::null();
  s.provenance = c.provenance;
  s.settings = c.settings;

  // Kernels, in the profile's order (by owner, longest first).
  std::vector<KernelProfileKernel> kernels;
  struct OwnerSums {
    int64_t ns = 0, rows = 0;
    double launches = 0;
  };
  std::map<KernelOwner, OwnerSums> owners;
  for (const KernelSummary& k : profile.kernels) {
    KernelProfileKernel r;
    r.owner = measure::owner_label(k.owner);
    r.layer = layer_of(k.owner);
    r.pass = std::string(measure::kernel_pass_name(k.owner.pass));
    r.group = group_of(k.owner, c);
    r.name = k.name;
    r.grid_x = k.launch.grid[0];
    r.grid_y = k.launch.grid[1];
    r.grid_z = k.launch.grid[2];
    r.block_x = k.launch.block[0];
    r.block_y = k.launch.block[1];
    r.block_z = k.launch.block[2];
    r.cluster_x = k.launch.cluster[0];
    r.cluster_y = k.launch.cluster[1];
    r.cluster_z = k.launch.cluster[2];
    r.registers_per_thread = k.launch.registers_per_thread;
    r.static_shared_bytes = k.launch.static_shared_memory;
    r.dynamic_shared_bytes = k.launch.dynamic_shared_memory;
    r.carveout_bytes = k.launch.shared_memory_carveout;
    r.launches_per_step = k.launches_per_step;
    r.ms_per_step = ms_per_step(k.total_ns);
    r.mean_us = k.mean_ns / 1e3;
    r.share_of_owner = k.share_of_owner;
    r.share_of_step = k.share_of_step;
    r.occupancy = k.occupancy.occupancy;
    r.active_blocks_per_sm = k.occupancy.active_blocks_per_sm;
    r.active_warps_per_sm = k.occupancy.active_warps_per_sm;
    r.limiters = measure::limiter_names(k.occupancy.limiters);
    const auto values = metrics.find(measure::KernelKey{k.owner, k.name});
    fill_kernel_metrics(r.metrics, measured, values == metrics.end() ? nullptr : &values->second);
    kernels.push_back(std::move(r));
    OwnerSums& o = owners[k.owner];
    o.ns += k.total_ns;
    o.rows += 1;
    o.launches += k.launches_per_step;
  }

  // Owners, hotspots first (as `time` lists its layers).
  const auto owner_rollups =
      by_group(measure::rollup_metrics(profile, metrics, [](const KernelOwner& o) { return measure::owner_label(o); }));
  std::vector<std::pair<KernelOwner, OwnerSums>> ordered(owners.begin(), owners.end());
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::vector<KernelProfileOwner> owner_rows;
  struct GroupSums {
    int64_t ns = 0, rows = 0, owners = 0;
    double launches = 0;
  };
  std::map<std::string, GroupSums> groups;
  std::vector<std::string> group_order;
  for (const auto& [owner, sums] : ordered) {
    KernelProfileOwner r;
    r.owner = measure::owner_label(owner);
    r.layer = layer_of(owner);
    r.pass = std::string(measure::kernel_pass_name(owner.pass));
    r.group = group_of(owner, c);
    r.kernel_ms_per_step = ms_per_step(sums.ns);
    const auto measured_it = c.measured_ms.find(owner);
    const bool timed = measured_it != c.measured_ms.end() && measured_it->second > 0;
    r.measured_ms_per_step = timed ? NumberFigure(measured_it->second) : NumberFigure::null();
    r.kernel_vs_measured = timed ? NumberFigure(ms_per_step(sums.ns) / measured_it->second) : NumberFigure::null();
    const auto gap_it = profile.gap_before_ns.find(owner);
    const int64_t gap_ns = gap_it == profile.gap_before_ns.end() ? 0 : gap_it->second;
    r.gap_ms_per_step = ms_per_step(gap_ns);
    r.kernel_and_gap_vs_measured =
        timed ? NumberFigure(ms_per_step(sums.ns + gap_ns) / measured_it->second) : NumberFigure::null();
    r.share_of_step = share(sums.ns);
    r.kernels = sums.rows;
    r.launches_per_step = sums.launches;
    fill_rolled(r, measured, find_rollup(owner_rollups, measure::owner_label(owner)));
    owner_rows.push_back(std::move(r));
    const std::string key = group_pass_key(owner, c);
    if (!groups.contains(key)) group_order.push_back(key);
    GroupSums& g = groups[key];
    g.ns += sums.ns;
    g.rows += sums.rows;
    g.owners += 1;
    g.launches += sums.launches;
  }

  // Groups and passes, the longest first.
  const auto group_rollups =
      by_group(measure::rollup_metrics(profile, metrics, [&c](const KernelOwner& o) { return group_pass_key(o, c); }));
  std::stable_sort(group_order.begin(), group_order.end(),
                   [&](const std::string& a, const std::string& b) { return groups.at(a).ns > groups.at(b).ns; });
  std::vector<KernelProfileGroup> group_rows;
  for (const std::string& key : group_order) {
    const GroupSums& g = groups.at(key);
    const size_t cut = key.find(kGroupPassSeparator);
    KernelProfileGroup r;
    r.group = key.substr(0, cut);
    r.pass = key.substr(cut + 1);
    r.owners = g.owners;
    r.kernels = g.rows;
    r.kernel_ms_per_step = ms_per_step(g.ns);
    r.share_of_step = share(g.ns);
    r.launches_per_step = g.launches;
    fill_rolled(r, measured, find_rollup(group_rollups, key));
    group_rows.push_back(std::move(r));
  }
  // Kernel rows in the owners' order (hotspots first), each owner's longest first as profiled.
  std::map<std::string, size_t> owner_rank;
  for (size_t i = 0; i < ordered.size(); ++i) owner_rank[measure::owner_label(ordered[i].first)] = i;
  std::stable_sort(kernels.begin(), kernels.end(), [&](const KernelProfileKernel& a, const KernelProfileKernel& b) {
    return owner_rank.at(a.owner.value()) < owner_rank.at(b.owner.value());
  });
  s.kernels = std::move(kernels);
  s.owners = std::move(owner_rows);
  s.groups = std::move(group_rows);
  return s;
}

}  // namespace cnnscale::report
