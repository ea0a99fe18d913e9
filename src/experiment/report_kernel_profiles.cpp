// Tables of the kernel profile folders (see report_kernel_profiles.hpp).
#include "experiment/report_kernel_profiles.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/log.hpp"
#include "experiment/kernel_profile_output.hpp"
#include "experiment/report_kernels.hpp"

namespace cnnscale::report {

namespace {

namespace fs = std::filesystem;

// Kernel names in the report's tables: the argument list dropped, the rest whole up to this many
// characters (the folder's kernels.csv has every name whole).
constexpr size_t kNameWidth = 120;

std::string fixed(const NumberFigure& f, int digits) {
  return f.has_value() && std::isfinite(f.value()) ? fmt::format("{:.{}f}", f.value(), digits) : "";
}
std::string percent(double share) {
  return std::isfinite(share) ? fmt::format("{:.1f}", 100 * share) : "";
}

// "resnet34 bf16 b256 training", "bench conv fp32 b64": what a profile is in one cell.
std::string profile_name(const KernelProfileSummary& s) {
  const bool bench = s.command.value_or("") == "bench conv";
  return fmt::format("{} {}{}{}", bench ? "bench conv" : s.net.value_or("?"), s.precision.value_or("?"),
                     s.batch.has_value() ? fmt::format(" b{}", s.batch.value()) : "",
                     bench                         ? ""
                     : s.inference.value_or(false) ? " inference"
                                                   : " training");
}

std::string device_name(const KernelProfileSummary& s) {
  const std::string d = s.gpu.value_or(s.device.value_or(""));
  return d.substr(0, d.find(" ("));
}

const std::vector<KernelProfileGroup>& groups_of(const KernelProfileSummary& s) {
  static const std::vector<KernelProfileGroup> none;
  return s.groups.has_value() ? s.groups.value() : none;
}

}  // namespace

std::vector<KernelProfileFile> find_kernel_profiles(const std::string& results_dir) {
  std::vector<KernelProfileFile> out;
  for_each_result_summary(results_dir, std::string(kKernelProfileFolder), [&](const std::string& p) {
    out.push_back({p, read_kernel_profile(p)});
  });
  return out;
}

Table kernel_profile_top_table(const std::vector<KernelProfileFile>& files, size_t top) {
  Table t;
  t.name = "kernel_profile_top";
  t.title = "Top kernels per layer type or algorithm (time --kernels, bench conv --kernels)";
  t.caption = fmt::format(
      "Per kernel profile, each layer type (time) or cuDNN algorithm (bench conv) and pass, its {} longest kernels "
      "(Li et al., Fig. 4): their share of the group's kernel time, time and launches per step (the profiled "
      "steps' mean). The kernels of one name and block shape that several layers run are one row. A kernel's time "
      "is its duration on the GPU; a group's share of the step is of the summed durations of every kernel of the "
      "step. Names without their argument list; the profile folder's kernels.csv has them whole.",
      top);
  t.columns = {Column("profile", "profile", false),
               Column("device", "device", false),
               Column("group", "group", false),
               Column("pass", "pass", false),
               Column("group % of step", "group_share_of_step_percent", false),
               Column("kernel", "kernel", false),
               Column("% of group", "share_of_group_percent", false),
               Column("ms per step", "ms_per_step", false),
               Column("launches per step", "launches_per_step", false)};
  for (const KernelProfileFile& f : files)
    for (const KernelProfileGroup& g : groups_of(f.s)) {
      const std::vector<KernelProfileKernel> kernels = group_kernels(f.s, g);
      const double group_ms = g.kernel_ms_per_step.value_or(NAN);
      for (size_t i = 0; i < kernels.size() && i < top; ++i) {
        const KernelProfileKernel& k = kernels[i];
        t.rows.push_back({Cell::of(profile_name(f.s)), Cell::of(device_name(f.s)), Cell::of(g.group.value_or("")),
                          Cell::of(g.pass.value_or("")), Cell::of(percent(g.share_of_step.value_or(NAN))),
                          Cell::of(short_kernel_name(k.name.value_or(""), kNameWidth)),
                          Cell::of(percent(k.ms_per_step.value_or(NAN) / group_ms)), Cell::of(fixed(k.ms_per_step, 4)),
                          Cell::of(fixed(k.launches_per_step, 1))});
      }
    }
  return t;
}

Table kernel_profile_resources_table(const std::vector<KernelProfileFile>& files, size_t top) {
  Table t;
  t.name = "kernel_profile_resources";
  t.title = "Registers, shared memory and occupancy of the top kernels (Li et al., Table II)";
  t.caption = fmt::format(
      "The kernels of the table above ({} per layer type or algorithm and pass): threads per block, registers per "
      "thread, static and dynamic shared memory per block (bytes), and the theoretical occupancy these allow on the "
      "profiled GPU's SM (active warps over its maximum, by the CUDA occupancy calculator's rules) with the "
      "resource that limits it.",
      top);
  t.columns = {Column("profile", "profile", false),
               Column("group", "group", false),
               Column("pass", "pass", false),
               Column("kernel", "kernel", false),
               Column("threads per block", "threads_per_block", false),
               Column("registers per thread", "registers_per_thread", false),
               Column("static shared (B)", "static_shared_bytes", false),
               Column("dynamic shared (B)", "dynamic_shared_bytes", false),
               Column("occupancy (%)", "occupancy_percent", false),
               Column("limited by", "limiters", false)};
  for (const KernelProfileFile& f : files)
    for (const KernelProfileGroup& g : groups_of(f.s)) {
      const std::vector<KernelProfileKernel> kernels = group_kernels(f.s, g);
      for (size_t i = 0; i < kernels.size() && i < top; ++i) {
        const KernelProfileKernel& k = kernels[i];
        const int64_t threads = k.block_x.value_or(0) * k.block_y.value_or(0) * k.block_z.value_or(0);
        t.rows.push_back({Cell::of(profile_name(f.s)), Cell::of(g.group.value_or("")), Cell::of(g.pass.value_or("")),
                          Cell::of(short_kernel_name(k.name.value_or(""), kNameWidth)),
                          Cell::of(std::to_string(threads)),
                          Cell::of(std::to_string(k.registers_per_thread.value_or(0))),
                          Cell::of(std::to_string(k.static_shared_bytes.value_or(0))),
                          Cell::of(std::to_string(k.dynamic_shared_bytes.value_or(0))),
                          Cell::of(percent(k.occupancy.value_or(NAN))), Cell::of(k.limiters.value_or(""))});
      }
    }
  return t;
}

Table kernel_profile_metrics_table(const std::vector<KernelProfileFile>& files) {
  Table t;
  t.name = kKernelProfileMetricsTable;
  t.title = "Hardware metrics per layer type or algorithm, weighted by runtime (Li et al., Fig. 6)";
  t.caption =
      "Per kernel profile measured with --metrics, each layer type or cuDNN algorithm and pass: its share of the "
      "step's kernel time and each metric as the mean over its kernels weighted by their time; beside each, the "
      "share of the group's kernel time whose kernels have a value (\"covers %\"): a value that covers less than "
      "the whole group is that part's, not the group's. Columns: the metrics some profile measured; empty: not "
      "measured by this profile, or no kernel of the group has it. "
      "Which metric set and method each profile used, and its replay passes, are in the last columns.";
  t.columns = {Column("profile", "profile", false), Column("group kind", "group_kind", false),
               Column("group", "group", false), Column("pass", "pass", false),
               Column("% of step", "share_of_step_percent", false)};
  // The metrics some profile measured, in the catalogue's order: a column nobody measured is noise.
  std::vector<size_t> measured;
  for (size_t i = 0; i < kKernelMetricCount; ++i)
    for (const KernelProfileFile& f : files) {
      const std::vector<std::string> set = f.s.metric_set.value_or({});
      if (std::find(set.begin(), set.end(), kernel_metric_columns()[i].key) != set.end()) {
        measured.push_back(i);
        break;
      }
    }
  for (const size_t i : measured) {
    const KernelMetricColumn& c = kernel_metric_columns()[i];
    // The unit in the CSV name, as share_of_step_percent has it: the plot script labels its axes from it.
    t.columns.emplace_back(std::string(c.heading), std::string(c.key) + (c.unit == "%" ? "_percent" : ""), false);
    t.columns.emplace_back("covers %", std::string(c.key) + "_coverage_percent", false);
  }
  t.columns.emplace_back("metric method", "metric_method", false);
  t.columns.emplace_back("replay passes", "replay_passes", false);
  for (const KernelProfileFile& f : files) {
    if (f.s.metric_set.value_or({}).empty()) continue;
    for (const KernelProfileGroup& g : groups_of(f.s)) {
      std::vector<Cell> row = {Cell::of(profile_name(f.s)), Cell::of(f.s.group_kind.value_or("")),
                               Cell::of(g.group.value_or("")), Cell::of(g.pass.value_or("")),
                               Cell::of(percent(g.share_of_step.value_or(NAN)))};
      for (const size_t i : measured) {
        const bool percent_unit = kernel_metric_columns()[i].unit == "%";
        row.push_back(Cell::of(fixed(g.metrics[i], percent_unit ? 2 : 3)));
        row.push_back(Cell::of(g.coverage[i].has_value() ? percent(g.coverage[i].value()) : ""));
      }
      row.push_back(Cell::of(f.s.metric_method.value_or("")));
      row.push_back(Cell::of(f.s.replay_passes.has_value() ? std::to_string(f.s.replay_passes.value()) : ""));
      t.rows.push_back(std::move(row));
    }
  }
  return t;
}

}  // namespace cnnscale::report
