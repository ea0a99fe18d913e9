// The hardware-metric catalogue: which CUPTI metrics a --metrics value asks the profiler for, and our
// values from what it returns, on recorded CUPTI values of one kernel. Every expected value below is
// the formula of the catalogue worked by hand on these inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "common/error_of.hpp"
#include "measure/kernel_metric_set.hpp"

namespace cnnscale::measure {
namespace {

using cnnscale::testing::config_error_of;

// Schema columns of the kernel-metric results: other code reads these names.
const std::vector<std::string> kAllKeys{"achieved_occupancy",
                                        "sm_throughput",
                                        "issue_slot_use",
                                        "ipc",
                                        "warp_execution_efficiency",
                                        "global_load_sectors_per_request",
                                        "global_store_sectors_per_request",
                                        "shared_bank_conflict_rate",
                                        "dram_throughput",
                                        "l2_throughput",
                                        "tensor_utilisation"};

// One kernel's values as cuptiProfilerHostEvaluateToGpuValues returns them.
std::map<std::string, double> recorded_values() {
  return {
      {"sm__warps_active.avg.pct_of_peak_sustained_active", 47.5},
      {"sm__throughput.avg.pct_of_peak_sustained_elapsed", 81.25},
      {"sm__inst_issued.avg.pct_of_peak_sustained_active", 62.0},
      {"sm__inst_executed.avg.per_cycle_active", 2.48},
      {"smsp__thread_inst_executed.sum", 2.4e9},
      {"smsp__inst_executed.sum", 1.0e8},
      {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 6.0e6},
      {"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 1.5e6},
      {"l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", 8.0e5},
      {"l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", 1.0e5},
      {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 3.0e5},
      {"l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 2.0e6},
      {"dram__throughput.avg.pct_of_peak_sustained_elapsed", 33.0},
      {"lts__throughput.avg.pct_of_peak_sustained_elapsed", 41.0},
      {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", 57.0},
  };
}

TEST(KernelMetricSet, CatalogueHoldsTheSchemaKeysInOrder) {
  std::vector<std::string> keys;
  std::set<std::string> li_fig6;
  for (const KernelMetricDefinition& d : kernel_metric_catalogue()) {
    keys.emplace_back(d.key);
    if (d.in_li_fig6) li_fig6.insert(d.nvprof);
    // A quotient needs its denominator, and nothing else has one.
    EXPECT_EQ(d.formula == MetricFormula::Quotient, std::string(d.denominator) != "") << d.key;
    EXPECT_NE(std::string(d.label), "") << d.key;
    EXPECT_NE(std::string(d.unit), "") << d.key;
  }
  EXPECT_EQ(keys, kAllKeys);
  EXPECT_EQ(li_fig6, (std::set<std::string>{"achieved_occupancy", "ipc", "warp_execution_efficiency", "gld_efficiency",
                                            "gst_efficiency", "shared_efficiency"}));
}

TEST(KernelMetricSet, DefaultIsEveryKeyAndAListKeepsItsOrder) {
  EXPECT_EQ(parse_metric_keys("default"), kAllKeys);
  EXPECT_EQ(parse_metric_keys("dram_throughput,ipc"), (std::vector<std::string>{"dram_throughput", "ipc"}));
  EXPECT_EQ(parse_metric_keys("tensor_utilisation"), std::vector<std::string>{"tensor_utilisation"});
}

TEST(KernelMetricSet, BadListsAreRefusedWithTheKnownKeys) {
  const std::string unknown = config_error_of([] { parse_metric_keys("ipc,gld_efficiency"); });
  EXPECT_NE(unknown.find("'gld_efficiency'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("global_load_sectors_per_request"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("tensor_utilisation"), std::string::npos) << unknown;
  EXPECT_NE(config_error_of([] { parse_metric_keys("ipc,,dram_throughput"); }).find("empty"), std::string::npos);
  EXPECT_NE(config_error_of([] { parse_metric_keys(""); }).find("empty"), std::string::npos);
  EXPECT_NE(config_error_of([] { parse_metric_keys("ipc,"); }).find("empty"), std::string::npos);
  EXPECT_NE(config_error_of([] { parse_metric_keys("ipc,ipc"); }).find("twice"), std::string::npos);
  // 'default' stands for the whole set: beside other keys it is refused as such, not as unknown.
  const std::string mixed = config_error_of([] { parse_metric_keys("default,ipc"); });
  EXPECT_NE(mixed.find("given alone"), std::string::npos) << mixed;
  EXPECT_EQ(mixed.find("unknown"), std::string::npos) << mixed;
  EXPECT_NE(config_error_of([] { kernel_metric("warp_efficiency"); }).find("'warp_efficiency'"), std::string::npos);
  EXPECT_NE(config_error_of([] { cupti_metrics_for({"ipc", "nope"}); }).find("'nope'"), std::string::npos);
}

TEST(KernelMetricSet, CuptiNamesAreAskedOnceInTheOrderOfTheKeys) {
  EXPECT_EQ(cupti_metrics_for({"dram_throughput", "warp_execution_efficiency"}),
            (std::vector<std::string>{"dram__throughput.avg.pct_of_peak_sustained_elapsed",
                                      "smsp__thread_inst_executed.sum", "smsp__inst_executed.sum"}));
  // The whole set: every recorded input once (the two quotients over sectors share no input).
  const std::vector<std::string> all = cupti_metrics_for(kAllKeys);
  std::set<std::string> recorded;
  for (const auto& [name, value] : recorded_values()) recorded.insert(name);
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()), recorded);
  EXPECT_EQ(all.size(), recorded.size());
}

TEST(KernelMetricSet, ValuesFollowTheirFormulas) {
  const std::map<std::string, double> v = kernel_metric_values(kAllKeys, recorded_values());
  ASSERT_EQ(v.size(), kAllKeys.size());
  EXPECT_EQ(v.at("achieved_occupancy"), 47.5);
  EXPECT_EQ(v.at("sm_throughput"), 81.25);
  EXPECT_EQ(v.at("issue_slot_use"), 62.0);
  EXPECT_EQ(v.at("ipc"), 2.48);
  EXPECT_DOUBLE_EQ(v.at("warp_execution_efficiency"), 75.0);  // 24 threads an instruction of 32
  EXPECT_DOUBLE_EQ(v.at("global_load_sectors_per_request"), 4.0);
  EXPECT_DOUBLE_EQ(v.at("global_store_sectors_per_request"), 8.0);
  EXPECT_DOUBLE_EQ(v.at("shared_bank_conflict_rate"), 15.0);
  EXPECT_EQ(v.at("dram_throughput"), 33.0);
  EXPECT_EQ(v.at("l2_throughput"), 41.0);
  EXPECT_EQ(v.at("tensor_utilisation"), 57.0);
}

TEST(KernelMetricSet, MissingInputsGiveNoValueNeverZero) {
  std::map<std::string, double> values = recorded_values();
  values.erase("smsp__inst_executed.sum");                             // a quotient's denominator
  values.erase("dram__throughput.avg.pct_of_peak_sustained_elapsed");  // a direct value
  values["lts__throughput.avg.pct_of_peak_sustained_elapsed"] = std::numeric_limits<double>::quiet_NaN();
  const std::map<std::string, double> v = kernel_metric_values(kAllKeys, values);
  EXPECT_FALSE(v.contains("warp_execution_efficiency"));
  EXPECT_FALSE(v.contains("dram_throughput"));
  EXPECT_FALSE(v.contains("l2_throughput"));
  EXPECT_EQ(v.size(), kAllKeys.size() - 3);
  EXPECT_EQ(v.at("ipc"), 2.48);
}

TEST(KernelMetricSet, ADenominatorOfZeroGivesNoValue) {
  // A kernel that stores nothing globally and never touches shared memory: no efficiency to speak of,
  // where a value of 0 would claim perfectly coalesced, conflict-free access.
  std::map<std::string, double> values = recorded_values();
  values["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] = 0.0;
  values["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"] = 0.0;
  values["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"] = 0.0;
  values["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"] = 0.0;
  const std::map<std::string, double> v = kernel_metric_values(kAllKeys, values);
  EXPECT_FALSE(v.contains("global_store_sectors_per_request"));
  EXPECT_FALSE(v.contains("shared_bank_conflict_rate"));
  EXPECT_DOUBLE_EQ(v.at("global_load_sectors_per_request"), 4.0);
  // Only the keys asked for are computed.
  EXPECT_EQ(kernel_metric_values({"ipc"}, values), (std::map<std::string, double>{{"ipc", 2.48}}));
}

}  // namespace
}  // namespace cnnscale::measure
