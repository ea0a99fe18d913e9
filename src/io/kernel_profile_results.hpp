// The kernel-level view's results (`time NET --kernels`, `bench conv --kernels`; Li et al.'s Fig. 4,
// Fig. 6 and Table II) as a typed struct whose schema tables (kernel_profile_results.cpp) write it
// and read it back for the report, and its result folder RESULTS/<experiment>/kernels/<stem>/
// (summary.json, kernels.csv, owners.csv, groups.csv, kernels.h5). The hardware metrics are columns
// of fixed keys (kernel_metric_columns); a rolled-up value carries the share of kernel time it
// covers, so a figure from half the runtime is never read as the whole.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/provenance_field.hpp"
#include "io/result_schema.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

// A hardware metric as the results name it: its key (a field of the rows), unit, a short heading for
// tables and what it means.
struct KernelMetricColumn {
  std::string_view key;
  std::string_view unit;  // "%", "inst/cycle", "sectors/request"
  std::string_view heading;
  std::string_view meaning;
};
inline constexpr size_t kKernelMetricCount = 11;
// In the order tables show them.
std::span<const KernelMetricColumn> kernel_metric_columns();
// The column of `key`; ConfigError for a key the results have no column for.
size_t kernel_metric_index(std::string_view key);

// One value per metric column (absent: the file has no metric columns at all; null: not measured or
// not defined for the kernel).
using KernelMetricFigures = std::array<NumberFigure, kKernelMetricCount>;

// One kernel of one owner with one launch configuration.
struct KernelProfileKernel {
  TextFigure owner, layer, pass, group, name;
  CountFigure grid_x, grid_y, grid_z, block_x, block_y, block_z, cluster_x, cluster_y, cluster_z;
  CountFigure registers_per_thread, static_shared_bytes, dynamic_shared_bytes, carveout_bytes;
  NumberFigure launches_per_step, ms_per_step, mean_us, share_of_owner, share_of_step;
  NumberFigure occupancy;
  CountFigure active_blocks_per_sm, active_warps_per_sm;
  TextFigure limiters;
  KernelMetricFigures metrics;
  static std::span<const SchemaField<KernelProfileKernel>> fields();
  bool operator==(const KernelProfileKernel&) const = default;
};

// Metric values rolled up by runtime share, each with the share of the row's kernel time it covers
// (<key>_coverage, in [0, 1]).
struct RolledKernelMetrics {
  KernelMetricFigures metrics;
  KernelMetricFigures coverage;
  bool operator==(const RolledKernelMetrics&) const = default;
};

// One owner (a layer's pass, the update, the exchange, the input copy, the unattributed kernels).
struct KernelProfileOwner : RolledKernelMetrics {
  TextFigure owner, layer, pass, group;
  NumberFigure kernel_ms_per_step, measured_ms_per_step, kernel_vs_measured, gap_ms_per_step,
      kernel_and_gap_vs_measured, share_of_step;
  CountFigure kernels;
  NumberFigure launches_per_step;
  static std::span<const SchemaField<KernelProfileOwner>> fields();
  bool operator==(const KernelProfileOwner&) const = default;
};

// One group and pass: a layer type's ("Convolution", "forward") or a cuDNN algorithm's.
struct KernelProfileGroup : RolledKernelMetrics {
  TextFigure group, pass;
  CountFigure owners, kernels;
  NumberFigure kernel_ms_per_step, share_of_step, launches_per_step;
  static std::span<const SchemaField<KernelProfileGroup>> fields();
  bool operator==(const KernelProfileGroup&) const = default;
};

struct KernelProfileSummary {
  TextFigure command, net, device, gpu, sm_arch, host, time, precision, layout;
  CountFigure batch;
  FlagFigure inference;
  CountFigure warmup, profiled_steps;
  TextFigure graph_note, group_kind;
  CountFigure attributed_kernels, unattributed_kernels, dropped_records;
  NumberFigure kernel_ms_per_step, step_ms, profiled_step_ms, profiling_overhead;
  TextFigure overhead_note;
  TextListFigure metric_set;
  TextFigure metric_method, chip;
  CountFigure replay_passes;
  NumberFigure metric_seconds;
  Figure<std::vector<KernelProfileKernel>> kernels;
  Figure<std::vector<KernelProfileOwner>> owners;
  Figure<std::vector<KernelProfileGroup>> groups;
  Figure<Provenance> provenance;
  Figure<SettingValues> settings;
  static std::span<const SchemaField<KernelProfileSummary>> fields();
  bool operator==(const KernelProfileSummary&) const = default;
};

inline constexpr std::string_view kKernelProfileFolder = "kernels";  // RESULTS/<experiment>/kernels/

nlohmann::json kernel_profile_result_json(const KernelProfileSummary& s);
// ConfigError naming `file` and the key path for a field of the wrong type or a required one
// missing, and for a command other than time or bench conv.
KernelProfileSummary kernel_profile_result_from_json(const nlohmann::json& j, const std::string& file);
// Reads a folder's summary.json (or the file named); ConfigError as above, or for a file that is
// no JSON, naming it.
KernelProfileSummary read_kernel_profile(const std::string& path);

// The folder RESULTS/<experiment>/kernels/<net or conv>-<precision>[-inference]-<stamp> (-1, -2, ...
// when taken), built under a hidden temporary name and renamed when complete: summary.json;
// kernels.csv, owners.csv and groups.csv with a column per scalar field of their rows; kernels.h5
// with the same columns as datasets of the groups /kernels, /owners and /groups and the summary's
// scalars on the root. Returns its path.
std::string write_kernel_profile_folder(const std::string& results_root, const std::string& experiment,
                                        const KernelProfileSummary& s, const std::string& utc_stamp);

}  // namespace cnnscale
