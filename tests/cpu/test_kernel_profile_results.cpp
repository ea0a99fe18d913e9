// The kernel profile's results (io/kernel_profile_results.hpp, experiment/kernel_profile_output.hpp)
// on a recorded profile: the rows' figures and roll-ups argued by hand, a value from part of a
// group's time carries that part, the JSON round trip and the folder, a malformed file refused
// with its name and key path, and the text tables a user reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/kernel_profile_fixture.hpp"
#include "cpu/schema_test_util.hpp"
#include "measure/kernel_metric_set.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

const KernelProfileOwner& owner_row(const KernelProfileSummary& s, const std::string& owner) {
  for (const KernelProfileOwner& o : s.owners.value())
    if (o.owner == owner) return o;
  throw std::runtime_error("no owner " + owner);
}
const KernelProfileGroup& group_row(const KernelProfileSummary& s, const std::string& group) {
  for (const KernelProfileGroup& g : s.groups.value())
    if (g.group == group) return g;
  throw std::runtime_error("no group " + group);
}
size_t metric(const char* key) {
  return kernel_metric_index(key);
}

// The results' metric columns are the catalogue's keys, units and order: a key the catalogue gains
// without a column (or loses) fails here, not on a GPU run.
TEST(KernelProfileResults, MetricColumnsAreTheCataloguesKeys) {
  const auto catalogue = measure::kernel_metric_catalogue();
  const auto columns = kernel_metric_columns();
  ASSERT_EQ(catalogue.size(), columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    EXPECT_EQ(columns[i].key, catalogue[i].key);
    EXPECT_EQ(columns[i].unit, catalogue[i].unit) << columns[i].key;
  }
}

TEST(KernelProfileResults, OwnersAndGroupsAddUpAsRecorded) {
  const KernelProfileSummary s = testing::recorded_summary();
  EXPECT_DOUBLE_EQ(s.kernel_ms_per_step.value(), 1400e-6);
  EXPECT_EQ(s.attributed_kernels.value(), 10);
  EXPECT_EQ(s.unattributed_kernels.value(), 2);
  EXPECT_DOUBLE_EQ(s.profiling_overhead.value(), 0.25);
  // Hotspots first: conv2 (600 ns per step), conv1 (400), bn1 (200), then update and unattributed.
  ASSERT_EQ(s.owners.value().size(), 5u);
  EXPECT_EQ(s.owners.value()[0].owner.value(), "conv2 forward");
  EXPECT_EQ(s.owners.value()[1].owner.value(), "conv1 forward");
  const KernelProfileOwner& conv1 = owner_row(s, "conv1 forward");
  EXPECT_DOUBLE_EQ(conv1.kernel_ms_per_step.value(), 400e-6);
  EXPECT_DOUBLE_EQ(conv1.kernel_vs_measured.value(), 0.8);
  // conv1's second kernel waits 10 ns in each step (its first is the step's first): 410 of 500 ns.
  EXPECT_DOUBLE_EQ(conv1.gap_ms_per_step.value(), 10e-6);
  EXPECT_DOUBLE_EQ(conv1.kernel_and_gap_vs_measured.value(), 410.0 / 500.0);
  EXPECT_DOUBLE_EQ(owner_row(s, "conv2 forward").kernel_and_gap_vs_measured.value(), 610.0 / 600.0);
  EXPECT_TRUE(owner_row(s, "bn1 forward").kernel_and_gap_vs_measured.is_null());
  EXPECT_EQ(conv1.kernels.value(), 2);
  EXPECT_EQ(conv1.group.value(), "Convolution");
  EXPECT_TRUE(owner_row(s, "bn1 forward").measured_ms_per_step.is_null());  // not timed apart
  EXPECT_TRUE(owner_row(s, "update").layer.is_null());
  EXPECT_EQ(owner_row(s, "unattributed").group.value(), "unattributed");
  // Both convolutions are one group and pass: 1000 of the 1400 ns.
  const KernelProfileGroup& conv = group_row(s, "Convolution");
  EXPECT_EQ(conv.pass.value(), "forward");
  EXPECT_EQ(conv.owners.value(), 2);
  EXPECT_DOUBLE_EQ(conv.share_of_step.value(), 1000.0 / 1400.0);
  EXPECT_EQ(s.groups.value()[0].group.value(), "Convolution");  // the longest group first
}

TEST(KernelProfileResults, ARolledValueCarriesTheShareItCovers) {
  const KernelProfileSummary s = testing::recorded_summary();
  const KernelProfileGroup& conv = group_row(s, "Convolution");
  // Occupancy of the two GEMMs (300 ns at 20 %, 600 at 23 %) over 900 of the group's 1000 ns;
  // bn_fold has no value, so it drops out of the weights instead of counting as 0.
  EXPECT_DOUBLE_EQ(conv.metrics[metric("achieved_occupancy")].value(), (20.0 * 300 + 23.0 * 600) / 900);
  EXPECT_DOUBLE_EQ(conv.coverage[metric("achieved_occupancy")].value(), 0.9);
  // DRAM throughput of conv1's GEMM alone: its own value, over 30 % of the group's time.
  EXPECT_DOUBLE_EQ(conv.metrics[metric("dram_throughput")].value(), 30.0);
  EXPECT_DOUBLE_EQ(conv.coverage[metric("dram_throughput")].value(), 0.3);
  // Measured, but no kernel of the update has it: null with no coverage. Not measured: null both.
  const KernelProfileOwner& update = owner_row(s, "update");
  EXPECT_TRUE(update.metrics[metric("ipc")].is_null());
  EXPECT_EQ(update.coverage[metric("ipc")], NumberFigure(0.0));
  EXPECT_TRUE(conv.metrics[metric("l2_throughput")].is_null());
  EXPECT_TRUE(conv.coverage[metric("l2_throughput")].is_null());
  // Without --metrics no row carries a metric field.
  const json plain = kernel_profile_result_json(testing::recorded_summary(false));
  EXPECT_FALSE(plain["kernels"][0].contains("ipc"));
  EXPECT_FALSE(plain["groups"][0].contains("ipc_coverage"));
  EXPECT_TRUE(plain["replay_passes"].is_null());
}

TEST(KernelProfileResults, KernelRowsKeepLaunchAndOccupancy) {
  const KernelProfileSummary s = testing::recorded_summary();
  // In the owners' order: conv2's GEMM, then conv1's GEMM and bn_fold, bn1's bn_fwd, ...
  ASSERT_EQ(s.kernels.value().size(), 6u);
  EXPECT_EQ(s.kernels.value()[0].owner.value(), "conv2 forward");
  EXPECT_EQ(s.kernels.value()[2].name.value(), "bn_fold");
  const KernelProfileKernel& gemm = s.kernels.value()[1];
  EXPECT_EQ(gemm.owner.value(), "conv1 forward");
  EXPECT_EQ(gemm.name.value(), testing::kLongGemmName);  // whole in the files
  EXPECT_EQ(gemm.grid_x.value() * gemm.grid_y.value(), 512);
  EXPECT_EQ(gemm.registers_per_thread.value(), 128);
  EXPECT_EQ(gemm.dynamic_shared_bytes.value(), 49152);
  // 256 threads x 128 registers = half the SM's 65536: 2 blocks of 8 warps of 64.
  EXPECT_EQ(gemm.active_blocks_per_sm.value(), 2);
  EXPECT_DOUBLE_EQ(gemm.occupancy.value(), 0.25);
  EXPECT_EQ(gemm.limiters.value(), "registers");
  EXPECT_DOUBLE_EQ(gemm.share_of_owner.value(), 0.75);
  EXPECT_DOUBLE_EQ(gemm.metrics[metric("ipc")].value(), 2.0);
}

TEST(KernelProfileResults, UnknownLayersAndMetricsAreRefused) {
  testing::RecordedProfile r = testing::recorded_profile();
  r.context.group_of_layer.erase("bn1");
  EXPECT_THROW(report::kernel_profile_summary(r.profile, r.metrics, r.context), ConfigError);
  r = testing::recorded_profile();
  r.context.metric_set.push_back("flop_count");  // no column: refused, never dropped
  EXPECT_THROW(report::kernel_profile_summary(r.profile, r.metrics, r.context), ConfigError);
  r = testing::recorded_profile();
  r.metrics.begin()->second["sm_throughput"] = 50.0;  // a value the metric set does not list
  EXPECT_THROW(report::kernel_profile_summary(r.profile, r.metrics, r.context), ConfigError);
}

TEST(KernelProfileResults, RoundTripsThroughJsonText) {
  KernelProfileSummary s = testing::recorded_summary();
  s.provenance = testing::sample_provenance("time");
  s.settings = testing::sample_settings();
  const json written = kernel_profile_result_json(s);
  testing::expect_every_field(written, "kernel_profile", "kernel_profile");
  EXPECT_EQ(kernel_profile_result_from_json(json::parse(written.dump()), "summary.json"), s);
  const KernelProfileSummary plain = testing::recorded_summary(false);
  EXPECT_EQ(kernel_profile_result_from_json(json::parse(kernel_profile_result_json(plain).dump()), "f"), plain);
}

// Profiles written before the gaps were measured read back with the gaps absent, not refused.
TEST(KernelProfileResults, AnOlderFileWithoutGapsReadsBackWithThemAbsent) {
  const KernelProfileSummary s = testing::recorded_summary();
  json j = kernel_profile_result_json(s);
  for (json& owner : j["owners"]) {
    owner.erase("gap_ms_per_step");
    owner.erase("kernel_and_gap_vs_measured");
  }
  const KernelProfileSummary back = kernel_profile_result_from_json(j, "old/summary.json");
  ASSERT_EQ(back.owners.value().size(), s.owners.value().size());
  for (const KernelProfileOwner& o : back.owners.value()) {
    EXPECT_FALSE(o.gap_ms_per_step.written()) << o.owner.value();
    EXPECT_FALSE(o.kernel_and_gap_vs_measured.written()) << o.owner.value();
  }
  EXPECT_EQ(back.kernels, s.kernels);
}

TEST(KernelProfileResults, FolderHoldsTheTablesAndReadsBack) {
  TempDir dir;
  KernelProfileSummary s = testing::recorded_summary();
  s.provenance = testing::sample_provenance("time");
  const std::string folder = write_kernel_profile_folder(dir.str(), "study", s, "20261207T100000Z");
  EXPECT_EQ(fs::path(folder), fs::path(dir.str()) / "study" / "kernels" / "tiny-fp32-20261207T100000Z");
  for (const char* f : {"summary.json", "kernels.csv", "owners.csv", "groups.csv", "kernels.h5"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(folder) / f)) << f;
  EXPECT_EQ(read_kernel_profile(folder), s);
  std::ifstream csv(fs::path(folder) / "kernels.csv");
  std::stringstream text;
  text << csv.rdbuf();
  EXPECT_NE(text.str().find("achieved_occupancy"), std::string::npos);
  EXPECT_NE(text.str().find("implicit_convolve_sgemm<float"), std::string::npos);  // the name, quoted whole
  // A second run in the same second gets a name of its own; nothing temporary is left.
  const std::string again = write_kernel_profile_folder(dir.str(), "study", s, "20261207T100000Z");
  EXPECT_EQ(fs::path(again).filename(), "tiny-fp32-20261207T100000Z-1");
  for (const auto& e : fs::directory_iterator(fs::path(dir.str()) / "study" / "kernels"))
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp-")) << e.path();
}

// One line naming the file and the key path, so a user finds the bad value.
std::string refusal(const json& j) {
  try {
    kernel_profile_result_from_json(j, "run/summary.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(KernelProfileResults, MalformedFileIsRefusedWithFileAndKeyPath) {
  const json good = kernel_profile_result_json(testing::recorded_summary());
  json bad = good;
  bad["kernels"][1]["ms_per_step"] = "fast";
  EXPECT_EQ(refusal(bad), "run/summary.json: \"kernels[1].ms_per_step\" is not a number");
  bad = good;
  bad["groups"][0]["ipc_coverage"] = "all";
  EXPECT_EQ(refusal(bad), "run/summary.json: \"groups[0].ipc_coverage\" is not a number");
  bad = good;
  bad["owners"][2].erase("kernel_ms_per_step");
  EXPECT_EQ(refusal(bad), "run/summary.json: missing \"owners[2].kernel_ms_per_step\"");
  bad = good;
  bad["command"] = "train";
  EXPECT_EQ(refusal(bad), "run/summary.json: command: \"train\" is not a kernel profile's (time, bench conv)");
  // Well-typed but impossible values: what the report would sort and divide by, and the metric keys.
  bad = good;
  bad["kernels"][1]["share_of_step"] = -0.5;
  EXPECT_EQ(refusal(bad), "run/summary.json: kernels[1].share_of_step: -0.5 is not a finite value >= 0");
  bad = good;
  bad["owners"][0]["launches_per_step"] = -2;
  EXPECT_EQ(refusal(bad), "run/summary.json: owners[0].launches_per_step: -2 is not a finite value >= 0");
  bad = good;
  bad["groups"][0]["kernel_ms_per_step"] = -1;
  EXPECT_EQ(refusal(bad), "run/summary.json: groups[0].kernel_ms_per_step: -1 is not a finite value >= 0");
  bad = good;
  bad["metric_set"] = {"ipc", "bogus"};
  EXPECT_NE(refusal(bad).find("run/summary.json: metric_set: kernel metric 'bogus'"), std::string::npos)
      << refusal(bad);
  TempDir dir;
  std::ofstream(dir.file("summary.json")) << "{\"command\": ";
  try {
    read_kernel_profile(dir.str());
    ADD_FAILURE() << "a truncated file was read";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(dir.file("summary.json") + ": not JSON")) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace cnnscale
