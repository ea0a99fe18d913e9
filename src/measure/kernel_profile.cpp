// Attribution by correlation id and the per-owner, per-kernel roll-up of a profiled step.
#include "measure/kernel_profile.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"

namespace cnnscale::measure {

const char* kernel_pass_name(KernelPass pass) {
  switch (pass) {
    case KernelPass::Forward:
      return "forward";
    case KernelPass::Backward:
      return "backward";
    case KernelPass::Update:
      return "update";
    case KernelPass::Exchange:
      return "exchange";
    case KernelPass::InputCopy:
      return "input copy";
    case KernelPass::Unattributed:
      return "unattributed";
  }
  return "unattributed";
}

KernelOwner unattributed_owner() {
  return KernelOwner{"", KernelPass::Unattributed};
}

std::string owner_label(const KernelOwner& owner) {
  const std::string pass = kernel_pass_name(owner.pass);
  if (owner.pass == KernelPass::Unattributed || owner.layer.empty()) return pass;
  return owner.layer + " " + pass;
}

AttributionCounts attribute_kernels(std::vector<KernelRecord>& records, const AttributionInput& input) {
  std::unordered_map<uint64_t, uint64_t> external_of;
  for (const ExternalCorrelation& link : input.links) {
    if (!input.owner_of_external.contains(link.external_id))
      throw_runtime("kernel profile: correlation id {} links to external id {}, which no layer or pass pushed",
                    link.correlation_id, link.external_id);
    const auto [it, inserted] = external_of.emplace(link.correlation_id, link.external_id);
    if (!inserted && it->second != link.external_id)
      throw_runtime("kernel profile: correlation id {} links to two external ids ({} and {})", link.correlation_id,
                    it->second, link.external_id);
  }
  AttributionCounts counts;
  for (KernelRecord& record : records) {
    const auto it = external_of.find(record.correlation_id);
    if (it == external_of.end()) {
      record.owner = unattributed_owner();
      record.external_id = 0;
      ++counts.unattributed;
    } else {
      record.owner = input.owner_of_external.at(it->second);
      record.external_id = it->second;
      ++counts.attributed;
    }
  }
  return counts;
}

LaunchResources launch_resources(const KernelLaunch& launch) {
  return LaunchResources{launch.block[0] * launch.block[1] * launch.block[2], launch.registers_per_thread,
                         launch.static_shared_memory, launch.dynamic_shared_memory};
}

SmLimits sm_limits_for_launch(const SmLimits& sm, const KernelLaunch& launch) {
  SmLimits out = sm;
  if (launch.shared_memory_carveout > 0) {
    if (launch.shared_memory_carveout > sm.shared_memory_per_sm)
      throw_config("kernel profile: a carveout of {} bytes exceeds the {} bytes of shared memory an {} SM has",
                   launch.shared_memory_carveout, sm.shared_memory_per_sm, sm.name);
    out.shared_memory_per_sm = launch.shared_memory_carveout;
  }
  return out;
}

namespace {

// KernelProfile::gap_before_ns. Records in start order against the latest end of all before them,
// any step's or none's: an unattributed kernel, or another step's on a second stream, keeps the GPU
// busy, so concurrent kernels add no gap; only attributed kernels are given one.
std::map<KernelOwner, int64_t> gap_before_owners(const std::vector<KernelRecord>& records) {
  std::vector<const KernelRecord*> by_start;
  by_start.reserve(records.size());
  for (const KernelRecord& r : records) by_start.push_back(&r);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [](const KernelRecord* a, const KernelRecord* b) { return a->start_ns < b->start_ns; });
  std::map<KernelOwner, int64_t> gaps;
  std::set<int64_t> started;  // steps whose first kernel has been seen
  std::optional<int64_t> latest_end;
  for (const KernelRecord* r : by_start) {
    const bool steps_first = r->step >= 0 && started.insert(r->step).second;
    if (r->step >= 0 && !steps_first && latest_end && r->start_ns > *latest_end)
      gaps[r->owner] += r->start_ns - *latest_end;
    latest_end = std::max(latest_end.value_or(r->end_ns), r->end_ns);
  }
  return gaps;
}

}  // namespace

KernelProfile summarize_kernels(const std::vector<KernelRecord>& records, int64_t profiled_steps, const SmLimits& sm) {
  if (profiled_steps < 1) throw_config("kernel profile: {} profiled steps (at least 1)", profiled_steps);
  KernelProfile profile;
  profile.profiled_steps = profiled_steps;
  std::map<std::tuple<KernelOwner, std::string, KernelLaunch>, size_t> row_of;  // a row's identity
  std::map<KernelOwner, int64_t> owner_ns;
  for (const KernelRecord& r : records) {
    if (r.end_ns < r.start_ns)
      throw_config("kernel profile: kernel '{}' (correlation id {}) ends at {} ns before it starts at {} ns", r.name,
                   r.correlation_id, r.end_ns, r.start_ns);
    const int64_t ns = r.end_ns - r.start_ns;
    const auto [it, inserted] = row_of.emplace(std::make_tuple(r.owner, r.name, r.launch), profile.kernels.size());
    if (inserted) {
      KernelSummary s;
      s.owner = r.owner;
      s.name = r.name;
      s.launch = r.launch;
      s.occupancy = theoretical_occupancy(sm_limits_for_launch(sm, r.launch), launch_resources(r.launch));
      profile.kernels.push_back(std::move(s));
    }
    KernelSummary& s = profile.kernels[it->second];
    ++s.launches;
    s.total_ns += ns;
    owner_ns[r.owner] += ns;
    profile.kernel_ns += ns;
  }
  for (KernelSummary& s : profile.kernels) {
    s.launches_per_step = static_cast<double>(s.launches) / static_cast<double>(profiled_steps);
    s.mean_ns = static_cast<double>(s.total_ns) / static_cast<double>(s.launches);
    const int64_t of_owner = owner_ns.at(s.owner);
    // A kernel of zero duration (timestamps of equal value) in an owner or step of zero time: no share.
    s.share_of_owner = of_owner == 0 ? 0.0 : static_cast<double>(s.total_ns) / static_cast<double>(of_owner);
    s.share_of_step =
        profile.kernel_ns == 0 ? 0.0 : static_cast<double>(s.total_ns) / static_cast<double>(profile.kernel_ns);
  }
  std::stable_sort(profile.kernels.begin(), profile.kernels.end(), [](const KernelSummary& a, const KernelSummary& b) {
    if (a.owner != b.owner) return a.owner < b.owner;
    return a.total_ns > b.total_ns;
  });
  profile.gap_before_ns = gap_before_owners(records);
  return profile;
}

std::vector<KernelSummary> top_kernels(const KernelProfile& profile, size_t n) {
  std::vector<KernelSummary> rows = profile.kernels;
  std::stable_sort(rows.begin(), rows.end(), [](const KernelSummary& a, const KernelSummary& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    if (a.owner != b.owner) return a.owner < b.owner;
    return a.name < b.name;
  });
  rows.resize(std::min(n, rows.size()));
  return rows;
}

}  // namespace cnnscale::measure
