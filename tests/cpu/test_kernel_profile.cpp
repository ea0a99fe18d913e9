// The kernel-level view on a recorded feed (hand-built records, as CUPTI's kernel and external-
// correlation activity records would give them): exact attribution by correlation id, the per-owner
// roll-up, the top kernels and the runtime-weighted metric roll-up, each figure argued by hand.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "core/error.hpp"
#include "measure/kernel_metric_rollup.hpp"
#include "measure/kernel_profile.hpp"

namespace cnnscale::measure {
namespace {

const KernelOwner kConv1Forward{"conv1", KernelPass::Forward};
const KernelOwner kConv2Forward{"conv2", KernelPass::Forward};
const KernelOwner kConv1Backward{"conv1", KernelPass::Backward};
const KernelOwner kUpdate{"", KernelPass::Update};

// Two steps. Per step: conv1 and conv2 forward each run "implicit_gemm" (100 then 120 ns in conv1,
// 300 in conv2); "bn_stats" (50) runs outside any pushed range; conv1 backward runs "wgrad" (200)
// and "reduce" twice (25 each); the update runs "sgd" (50). Kernel time: 220 + 600 + 100 + 400 + 100
// + 100 = 1520 ns over both steps.
struct RecordedFeed {
  std::vector<KernelRecord> records;
  AttributionInput input;
  uint64_t next_correlation = 10;
  int64_t clock_ns = 0;

  void launch(const std::string& name, int64_t ns, std::optional<uint64_t> external, int64_t threads = 128,
              int64_t registers = 32) {
    KernelRecord r;
    r.name = name;
    r.start_ns = clock_ns;
    r.end_ns = clock_ns + ns;
    r.launch.grid = {64, 1, 1};
    r.launch.block = {threads, 1, 1};
    r.launch.registers_per_thread = registers;
    r.correlation_id = next_correlation++;
    clock_ns += ns;
    if (external) input.links.push_back({r.correlation_id, *external});
    records.push_back(r);
  }
};

RecordedFeed recorded_feed() {
  RecordedFeed feed;
  feed.input.owner_of_external = {{1, kConv1Forward}, {2, kConv2Forward}, {3, kConv1Backward}, {4, kUpdate}};
  for (const int64_t conv1_gemm_ns : {100, 120}) {
    feed.launch("implicit_gemm", conv1_gemm_ns, 1);
    feed.launch("implicit_gemm", 300, 2);
    feed.launch("bn_stats", 50, std::nullopt);
    feed.launch("wgrad", 200, 3, 256, 128);
    feed.launch("reduce", 25, 3);
    feed.launch("reduce", 25, 3);
    feed.launch("sgd", 50, 4);
  }
  return feed;
}

KernelProfile profiled(RecordedFeed feed) {
  attribute_kernels(feed.records, feed.input);
  return summarize_kernels(feed.records, 2, sm90_limits());
}

const KernelSummary& profile_row(const KernelProfile& p, const KernelOwner& owner, const std::string& name) {
  for (const KernelSummary& s : p.kernels)
    if (s.owner == owner && s.name == name) return s;
  throw std::runtime_error("no row " + name + " of " + owner_label(owner));
}

TEST(KernelProfile, AttributesByCorrelationIdNotByName) {
  RecordedFeed feed = recorded_feed();
  const AttributionCounts counts = attribute_kernels(feed.records, feed.input);
  EXPECT_EQ(counts.attributed, 12);
  EXPECT_EQ(counts.unattributed, 2);
  // Two owners run kernels of one name; each keeps its own launches.
  EXPECT_EQ(feed.records[0].owner, kConv1Forward);
  EXPECT_EQ(feed.records[1].owner, kConv2Forward);
  EXPECT_EQ(feed.records[2].owner, unattributed_owner());
  const KernelProfile p = summarize_kernels(feed.records, 2, sm90_limits());
  EXPECT_EQ(profile_row(p, kConv1Forward, "implicit_gemm").total_ns, 220);
  EXPECT_EQ(profile_row(p, kConv2Forward, "implicit_gemm").total_ns, 600);
  EXPECT_EQ(profile_row(p, unattributed_owner(), "bn_stats").total_ns, 100);
  EXPECT_EQ(owner_label(kConv1Backward), "conv1 backward");
  EXPECT_EQ(owner_label(kUpdate), "update");
  EXPECT_EQ(owner_label(unattributed_owner()), "unattributed");
}

TEST(KernelProfile, AFeedThatContradictsItselfIsRefused) {
  RecordedFeed feed = recorded_feed();
  feed.input.links.push_back({feed.records[0].correlation_id, 2});
  EXPECT_THROW(attribute_kernels(feed.records, feed.input), RuntimeError);

  feed = recorded_feed();
  feed.input.links.push_back({feed.records[0].correlation_id, 1});  // the same link twice is no contradiction
  EXPECT_NO_THROW(attribute_kernels(feed.records, feed.input));
  feed.input.links.push_back({feed.records[2].correlation_id, 99});
  EXPECT_THROW(attribute_kernels(feed.records, feed.input), RuntimeError);
}

TEST(KernelProfile, LaunchesTimesAndSharesPerOwnerAndStep) {
  const KernelProfile p = profiled(recorded_feed());
  EXPECT_EQ(p.kernel_ns, 1520);
  const KernelSummary& gemm = profile_row(p, kConv1Forward, "implicit_gemm");
  EXPECT_EQ(gemm.launches, 2);
  EXPECT_EQ(gemm.launches_per_step, 1.0);
  EXPECT_EQ(gemm.mean_ns, 110.0);
  EXPECT_EQ(gemm.share_of_owner, 1.0);
  const KernelSummary& reduce = profile_row(p, kConv1Backward, "reduce");
  EXPECT_EQ(reduce.launches, 4);
  EXPECT_EQ(reduce.launches_per_step, 2.0);
  EXPECT_EQ(reduce.mean_ns, 25.0);
  // Each share is one correctly rounded division of exact integers: the quotient of the exact
  // values to half an ulp.
  EXPECT_DOUBLE_EQ(reduce.share_of_owner, 100.0 / 500.0);
  EXPECT_DOUBLE_EQ(profile_row(p, kConv1Backward, "wgrad").share_of_owner, 400.0 / 500.0);
  EXPECT_DOUBLE_EQ(profile_row(p, kConv2Forward, "implicit_gemm").share_of_step, 600.0 / 1520.0);
  // Rows are grouped by owner, longest first within it.
  EXPECT_EQ(p.kernels.size(), 6u);
  for (size_t i = 1; i < p.kernels.size(); ++i) {
    EXPECT_FALSE(p.kernels[i].owner < p.kernels[i - 1].owner);
    if (p.kernels[i].owner == p.kernels[i - 1].owner) {
      EXPECT_GE(p.kernels[i - 1].total_ns, p.kernels[i].total_ns);
    }
  }
}

// The gaps before each owner's launches: from the latest end of every earlier kernel to the
// kernel's start, none for a step's first kernel. Hand-placed records (ns), step 0 then step 1:
//   conv1 fwd [0,100]  conv2 fwd [130,200] (gap 30)  unattributed [210,260]
//   conv2 fwd [250,300] (overlaps the unattributed kernel: no gap)  update [340,400] (gap 40)
//   step 1: conv1 fwd [1000,1100] (a step's first kernel: none)  conv1 fwd [1107,1200] (gap 7)
//   a kernel on a second stream, update [1150,1190], inside conv1's second: no gap
//   step 2's first kernel [1180,1250], overlapping step 1's tail, then step 1's update [1260,1300]:
//   gap 10 after step 2's kernel, the latest end of any step's.
TEST(KernelProfile, GapsBeforeEachOwnersLaunchesAfterEveryEarlierKernel) {
  std::vector<KernelRecord> records;
  const auto add = [&](const KernelOwner& owner, int64_t start, int64_t end, int64_t step) {
    KernelRecord r;
    r.name = "k";
    r.launch.grid = {1, 1, 1};
    r.launch.block = {32, 1, 1};
    r.start_ns = start;
    r.end_ns = end;
    r.owner = owner;
    r.step = step;
    r.external_id = step < 0 ? 0 : 1;
    records.push_back(r);
  };
  // Out of start order on purpose: CUPTI delivers records by buffer, not by time.
  add(kUpdate, 340, 400, 0);
  add(kConv1Forward, 0, 100, 0);
  add(kConv2Forward, 130, 200, 0);
  add(unattributed_owner(), 210, 260, -1);
  add(kConv2Forward, 250, 300, 0);
  add(kConv1Forward, 1000, 1100, 1);
  add(kConv1Forward, 1107, 1200, 1);
  add(kUpdate, 1150, 1190, 1);
  add(kConv1Forward, 1180, 1250, 2);
  add(kUpdate, 1260, 1300, 1);
  const KernelProfile p = summarize_kernels(records, 3, sm90_limits());
  EXPECT_EQ(p.gap_before_ns.at(kConv1Forward), 7);
  EXPECT_EQ(p.gap_before_ns.at(kConv2Forward), 30);
  EXPECT_EQ(p.gap_before_ns.at(kUpdate), 50);
  EXPECT_FALSE(p.gap_before_ns.contains(unattributed_owner()));
  // Records without a step (a feed attributed by hand, no scopes) give no gaps at all.
  for (KernelRecord& r : records) r.step = -1;
  EXPECT_TRUE(summarize_kernels(records, 3, sm90_limits()).gap_before_ns.empty());
}

TEST(KernelProfile, SharesSumToOne) {
  const KernelProfile p = profiled(recorded_feed());
  // n shares, each within half an ulp (2^-53 relative) of its exact value, summed with n - 1
  // roundings of at most 2^-53 relative each: |sum - 1| <= n x 2^-52 (DBL_EPSILON) bounds both.
  double step = 0.0;
  std::map<KernelOwner, double> owners;
  for (const KernelSummary& s : p.kernels) {
    step += s.share_of_step;
    owners[s.owner] += s.share_of_owner;
  }
  const double bound = static_cast<double>(p.kernels.size()) * DBL_EPSILON;
  EXPECT_NEAR(step, 1.0, bound);
  EXPECT_EQ(owners.size(), 5u);
  for (const auto& [owner, sum] : owners) EXPECT_NEAR(sum, 1.0, bound) << owner_label(owner);
}

TEST(KernelProfile, EachLaunchConfigurationIsARowWithItsOccupancy) {
  RecordedFeed feed = recorded_feed();
  feed.launch("wgrad", 40, 3, 1024, 16);
  const KernelProfile p = profiled(feed);
  int wgrad_rows = 0;
  for (const KernelSummary& s : p.kernels) {
    if (s.owner != kConv1Backward || s.name != "wgrad") continue;
    ++wgrad_rows;
    // 256 threads at 128 registers: 0.25 (registers); 1024 at 16: 1.0 (warps); see test_occupancy.cpp.
    EXPECT_EQ(s.occupancy.occupancy, s.launch.block[0] == 256 ? 0.25 : 1.0);
  }
  EXPECT_EQ(wgrad_rows, 2);
}

TEST(KernelProfile, TopKernelsOfTheStep) {
  const std::vector<KernelSummary> top = top_kernels(profiled(recorded_feed()), 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].owner, kConv2Forward);
  EXPECT_EQ(top[1].name, "wgrad");
  EXPECT_EQ(top[2].owner, kConv1Forward);
  EXPECT_EQ(top_kernels(profiled(recorded_feed()), 100).size(), 6u);
}

TEST(KernelProfile, BadRecordsAreRefused) {
  RecordedFeed feed = recorded_feed();
  EXPECT_THROW(summarize_kernels(feed.records, 0, sm90_limits()), ConfigError);
  feed.records[3].end_ns = feed.records[3].start_ns - 1;
  EXPECT_THROW(summarize_kernels(feed.records, 2, sm90_limits()), ConfigError);
}

KernelMetricValues recorded_metrics() {
  return {{{kConv1Forward, "implicit_gemm"}, {{"achieved_occupancy", 0.5}}},
          {{kConv2Forward, "implicit_gemm"}, {{"achieved_occupancy", 0.8}, {"ipc", 2.0}}},
          {{kConv1Backward, "wgrad"}, {{"achieved_occupancy", 0.3}}},
          {{kUpdate, "sgd"}, {{"achieved_occupancy", 0.9}}}};
}

const MetricRollup& rollup_group(const std::vector<MetricRollup>& rollups, const std::string& name) {
  for (const MetricRollup& r : rollups)
    if (r.group == name) return r;
  throw std::runtime_error("no group " + name);
}

TEST(KernelMetricRollup, WeightedByRuntimeWithCoverage) {
  const KernelProfile p = profiled(recorded_feed());
  const auto by_type =
      rollup_metrics(p, recorded_metrics(), group_by_layer_type({{"conv1", "Convolution"}, {"conv2", "Convolution"}}));
  ASSERT_EQ(by_type.size(), 4u);
  // (0.5 x 220 + 0.8 x 600) / 820: a few roundings of 2^-53 relative each, within gtest's 4 ulps.
  const MetricRollup& forward = rollup_group(by_type, "Convolution forward");
  EXPECT_EQ(forward.total_ns, 820);
  EXPECT_DOUBLE_EQ(forward.metrics.at("achieved_occupancy").value, (0.5 * 220 + 0.8 * 600) / 820);
  EXPECT_EQ(forward.metrics.at("achieved_occupancy").covered_share, 1.0);
  // Only conv2's kernel has an IPC: its value, over 600 of the 820 ns.
  EXPECT_DOUBLE_EQ(forward.metrics.at("ipc").value, 2.0);
  EXPECT_DOUBLE_EQ(forward.metrics.at("ipc").covered_share, 600.0 / 820.0);
  // "reduce" has no value: wgrad's alone, covering 400 of 500 ns.
  const MetricRollup& backward = rollup_group(by_type, "Convolution backward");
  EXPECT_DOUBLE_EQ(backward.metrics.at("achieved_occupancy").value, 0.3);
  EXPECT_DOUBLE_EQ(backward.metrics.at("achieved_occupancy").covered_share, 0.8);
  EXPECT_EQ(rollup_group(by_type, "update").metrics.at("achieved_occupancy").value, 0.9);
  const MetricRollup& unattributed = rollup_group(by_type, "unattributed");
  EXPECT_EQ(unattributed.total_ns, 100);
  EXPECT_TRUE(unattributed.metrics.empty());

  const auto by_owner = rollup_metrics(p, recorded_metrics(), owner_label);
  EXPECT_EQ(by_owner.size(), 5u);
  EXPECT_EQ(rollup_group(by_owner, "conv1 forward").metrics.at("achieved_occupancy").value, 0.5);
  EXPECT_FALSE(rollup_group(by_owner, "conv1 forward").metrics.contains("ipc"));
}

TEST(KernelMetricRollup, MetricsOfKernelsTheProfileLacksAreRefused) {
  const KernelProfile p = profiled(recorded_feed());
  KernelMetricValues values = recorded_metrics();
  values[{kConv2Forward, "wgrad"}] = {{"ipc", 1.0}};
  EXPECT_THROW(rollup_metrics(p, values, owner_label), ConfigError);
  EXPECT_THROW(rollup_metrics(p, recorded_metrics(), group_by_layer_type({{"conv1", "Convolution"}})), ConfigError);
}

}  // namespace
}  // namespace cnnscale::measure
