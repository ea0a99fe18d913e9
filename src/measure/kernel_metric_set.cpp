// The metric catalogue and the arithmetic from CUPTI's values to ours.
#include "measure/kernel_metric_set.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "core/error.hpp"

namespace cnnscale::measure {

namespace {

constexpr const char* kDefaultSet = "default";

// Quotients rather than CUPTI's own ratio metrics where a kernel may have no denominator (no global
// load, no shared-memory access): CUPTI reports such a ratio as 0, which would read as a perfect
// value; a quotient of 0 by 0 gives none. The pass counts in the comments are CUPTI 13.0's for
// GH100 (cuptiProfilerHostGetNumOfPasses for the metric alone); the whole set takes 9 passes, 8 of
// them for sm_throughput (the maximum over every SM pipe and unit throughput) and 4 for l2.
constexpr std::array kCatalogue{
    KernelMetricDefinition{"achieved_occupancy", "Achieved occupancy", "%", MetricFormula::Direct,
                           "sm__warps_active.avg.pct_of_peak_sustained_active", "", 1.0, "achieved_occupancy", true,
                           "Warps resident per active cycle of an SM, as a share of the SM's maximum (64 warps)."},
    KernelMetricDefinition{"sm_throughput", "SM throughput", "%", MetricFormula::Direct,
                           "sm__throughput.avg.pct_of_peak_sustained_elapsed", "", 1.0, "", false,
                           "The busiest SM pipe or unit's share of its peak over the kernel's duration (8 passes)."},
    KernelMetricDefinition{"issue_slot_use", "Issue slots busy", "%", MetricFormula::Direct,
                           "sm__inst_issued.avg.pct_of_peak_sustained_active", "", 1.0, "issue_slot_utilization", false,
                           "Warp instructions issued per active cycle as a share of the 4 an SM can issue."},
    KernelMetricDefinition{"ipc", "IPC", "inst/cycle", MetricFormula::Direct, "sm__inst_executed.avg.per_cycle_active",
                           "", 1.0, "ipc", true, "Warp instructions executed per active cycle, per SM (at most 4)."},
    KernelMetricDefinition{"warp_execution_efficiency", "Warp execution efficiency", "%", MetricFormula::Quotient,
                           "smsp__thread_inst_executed.sum", "smsp__inst_executed.sum", 100.0 / 32.0,
                           "warp_execution_efficiency", true,
                           "Threads active per executed warp instruction, as a share of the warp's 32."},
    KernelMetricDefinition{"global_load_sectors_per_request", "Global load sectors/request", "sectors/request",
                           MetricFormula::Quotient, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 1.0, "gld_efficiency", true,
                           "32-byte sectors per global load request: 4 for a warp's coalesced 4-byte loads, up to "
                           "32 when every thread touches a sector of its own (nvprof's efficiency falls as it rises)."},
    KernelMetricDefinition{"global_store_sectors_per_request", "Global store sectors/request", "sectors/request",
                           MetricFormula::Quotient, "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                           "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", 1.0, "gst_efficiency", true,
                           "32-byte sectors per global store request, as for loads."},
    KernelMetricDefinition{"shared_bank_conflict_rate", "Shared-memory bank conflicts", "%", MetricFormula::Quotient,
                           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
                           "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 100.0, "shared_efficiency", true,
                           "Shared-memory wavefronts that replay a bank conflict, as a share of all of them (0 is "
                           "conflict-free: the converse of nvprof's efficiency)."},
    KernelMetricDefinition{"dram_throughput", "DRAM throughput", "%", MetricFormula::Direct,
                           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "", 1.0, "dram_utilization", false,
                           "Device-memory throughput as a share of its peak over the kernel's duration."},
    KernelMetricDefinition{"l2_throughput", "L2 throughput", "%", MetricFormula::Direct,
                           "lts__throughput.avg.pct_of_peak_sustained_elapsed", "", 1.0, "l2_utilization", false,
                           "The busiest L2 slice unit's share of its peak over the kernel's duration (4 passes)."},
    KernelMetricDefinition{"tensor_utilisation", "Tensor pipe busy", "%", MetricFormula::Direct,
                           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "", 1.0,
                           "tensor_precision_fu_utilization", false,
                           "Active cycles in which the tensor pipe works, any tensor instruction (HMMA, Hopper's "
                           "warp-group GMMA, IMMA, DMMA)."},
};

std::string known_keys() {
  std::string keys;
  for (const KernelMetricDefinition& d : kCatalogue) keys += (keys.empty() ? "" : ", ") + std::string(d.key);
  return keys;
}

std::optional<double> finite_value(const std::map<std::string, double>& values, const char* name) {
  const auto it = values.find(name);
  if (it == values.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
}

std::optional<double> value_of(const KernelMetricDefinition& d, const std::map<std::string, double>& values) {
  const std::optional<double> numerator = finite_value(values, d.numerator);
  if (!numerator) return std::nullopt;
  if (d.formula != MetricFormula::Quotient) return *numerator * d.scale;
  const std::optional<double> denominator = finite_value(values, d.denominator);
  if (!denominator || *denominator == 0.0) return std::nullopt;
  return *numerator / *denominator * d.scale;
}

}  // namespace

std::span<const KernelMetricDefinition> kernel_metric_catalogue() {
  return kCatalogue;
}

const KernelMetricDefinition& kernel_metric(std::string_view key) {
  for (const KernelMetricDefinition& d : kCatalogue)
    if (key == d.key) return d;
  throw_config("unknown kernel metric '{}'; the metrics are {} (or '{}' for all)", key, known_keys(), kDefaultSet);
}

std::vector<std::string> parse_metric_keys(std::string_view spec) {
  std::vector<std::string> keys;
  if (spec == kDefaultSet) {
    for (const KernelMetricDefinition& d : kCatalogue) keys.emplace_back(d.key);
    return keys;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = spec.find(',', start);
    const std::string_view key = spec.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (key.empty())
      throw_config("--metrics '{}': an empty metric name; give '{}' or a comma-separated list of {}", spec, kDefaultSet,
                   known_keys());
    if (key == kDefaultSet)
      throw_config("--metrics '{}': '{}' stands for every metric and is given alone", spec, kDefaultSet);
    const KernelMetricDefinition& d = kernel_metric(key);
    if (std::find(keys.begin(), keys.end(), d.key) != keys.end())
      throw_config("--metrics '{}': '{}' is given twice", spec, key);
    keys.emplace_back(d.key);
    if (comma == std::string_view::npos) return keys;
    start = comma + 1;
  }
}

std::vector<std::string> cupti_metrics_for(const std::vector<std::string>& keys) {
  std::vector<std::string> names;
  const auto add = [&names](const char* name) {
    if (*name != '\0' && std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
  };
  for (const std::string& key : keys) {
    const KernelMetricDefinition& d = kernel_metric(key);
    add(d.numerator);
    add(d.denominator);
  }
  return names;
}

std::map<std::string, double> kernel_metric_values(const std::vector<std::string>& keys,
                                                   const std::map<std::string, double>& cupti_values) {
  std::map<std::string, double> out;
  for (const std::string& key : keys)
    if (const std::optional<double> v = value_of(kernel_metric(key), cupti_values)) out.emplace(key, *v);
  return out;
}

}  // namespace cnnscale::measure
