// What `time NET --kernels` and `bench conv --kernels` save and print: the kernel profile (measure/
// kernel_profile.hpp) with its metrics and roll-ups as the results schema's struct (io/
// kernel_profile_results.hpp), and the text tables a user reads on stdout, made from that struct
// (kernel_profile_tables.cpp) so that what is printed is what is saved.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/kernel_profile_results.hpp"
#include "measure/kernel_metric_rollup.hpp"
#include "measure/kernel_profile.hpp"

namespace cnnscale::report {

// Everything the summary holds that the profile does not.
struct KernelProfileContext {
  std::string command;  // "time" or "bench conv"
  std::string net;      // time: the network; "" for bench conv
  std::string device;   // the backend's description
  std::string gpu;      // KernelTrace::device
  std::string sm_arch;  // KernelTrace::sm_arch
  std::string host;
  std::string utc_time;  // the start, ISO 8601
  std::string precision;
  std::string layout;  // "NCHW", "NHWC"; "" = unknown (null)
  int64_t batch = 0;
  bool inference = false;
  int64_t warmup = 0;
  std::string graph_note;  // how CUDA graphs were handled ("profiled without the graph: ...")
  // What a group is, and the group of each owner's layer: time: {layer -> layer type}, group_kind
  // "layer type"; bench conv: {owner layer -> cuDNN algorithm}, group_kind "algorithm". Owners
  // without a layer (update, exchange, input copy, unattributed) are their own group.
  std::string group_kind = "layer type";
  std::map<std::string, std::string> group_of_layer;
  // Each owner's time as the unprofiled timing measured it (a layer's forward and backward, the
  // update ...); owners not in it have a null measured time.
  std::map<measure::KernelOwner, double> measured_ms;
  measure::AttributionCounts counts;
  int64_t dropped_records = 0;
  std::optional<double> step_ms;           // the unprofiled step
  std::optional<double> profiled_step_ms;  // the step while traced
  std::string overhead_note;               // how the overhead was found, or why it is unknown
  // --metrics: the keys measured (kernel_metric_columns' keys), how, and what it cost; empty set:
  // no metrics (every metric field null).
  std::vector<std::string> metric_set;
  std::string metric_method;
  std::string chip;
  int64_t replay_passes = 0;
  double metric_seconds = 0.0;
  Figure<Provenance> provenance;
  Figure<SettingValues> settings;
};

// Throws ConfigError for an owner whose layer group_of_layer does not name, a metric key that is no
// results column, or a metric value of a kernel the profile does not hold.
KernelProfileSummary kernel_profile_summary(const measure::KernelProfile& profile,
                                            const measure::KernelMetricValues& metrics,
                                            const KernelProfileContext& context);

struct KernelTableOptions {
  size_t top = 10;          // rows of "top kernels of the step" and of the metrics table
  size_t per_group = 3;     // kernels per group in the registers/shared-memory table (Table II)
  size_t name_width = 60;   // kernel names longer than this are shortened in the middle
  bool all_kernels = true;  // false: the per-owner tables are left out (only the step's views)
};

// The text tables: the run's header, the kernels of each owner, the top kernels of the step, the
// registers/shared memory/occupancy of each group's top kernels and, with metrics, the top kernels'
// metrics and the per-group roll-up (each value with the share of kernel time it covers).
std::string kernel_profile_tables(const KernelProfileSummary& s, const KernelTableOptions& options = {});

// "Convolution, forward"; "update" for the step's parts (whose group is their pass).
std::string group_label(const KernelProfileGroup& g);

// The kernels of a group and pass, longest first, the rows of one name and block shape merged (the
// layers of a type run the same kernel on grids of their own size, and what an SM holds of it does
// not depend on the grid): their times and launches per step summed, the other fields the first's.
std::vector<KernelProfileKernel> group_kernels(const KernelProfileSummary& s, const KernelProfileGroup& g);

// A kernel's demangled name for a terminal column of `width` characters: "void " and the argument
// list dropped, then, if still too long, its middle replaced by "...". Files keep the whole name.
std::string short_kernel_name(const std::string& name, size_t width);

}  // namespace cnnscale::report
