// The schema tables of the kernel-level results (see kernel_profile_results.hpp), in
// results/README.md's order, the metric columns, and the result folder.
#include "io/kernel_profile_results.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/bench_folder.hpp"

namespace cnnscale {

using namespace schema_presence;

std::span<const KernelMetricColumn> kernel_metric_columns() {
  // Hopper's counterparts of Li et al.'s nvprof metrics (Fig. 6): their IPC is sm_throughput and
  // issue_slot_use, their global load/store efficiency the sectors per request. The keys and units
  // are measure::kernel_metric_catalogue()'s, in its order (a test holds them together: io cannot
  // include measure).
  static const std::array<KernelMetricColumn, kKernelMetricCount> columns = {{
      {"achieved_occupancy", "%", "occ %", "active warps over the SM's maximum, averaged over the kernel's run"},
      {"sm_throughput", "%", "SM %", "the busiest SM unit's throughput as a share of its peak"},
      {"issue_slot_use", "%", "issue %", "issue slots that issued an instruction"},
      {"ipc", "inst/cycle", "IPC", "instructions executed per cycle per SM"},
      {"warp_execution_efficiency", "%", "warp eff %", "threads active per executed instruction over 32"},
      {"global_load_sectors_per_request", "sectors/request", "ld sect/req",
       "32-byte sectors per global load request (4: coalesced fp32)"},
      {"global_store_sectors_per_request", "sectors/request", "st sect/req",
       "32-byte sectors per global store request"},
      {"shared_bank_conflict_rate", "%", "bank confl %", "shared-memory wavefronts beyond one per request"},
      {"dram_throughput", "%", "DRAM %", "DRAM bandwidth as a share of its peak"},
      {"l2_throughput", "%", "L2 %", "L2 bandwidth as a share of its peak"},
      {"tensor_utilisation", "%", "tensor %", "tensor-core pipe use as a share of its peak"},
  }};
  return columns;
}

size_t kernel_metric_index(std::string_view key) {
  const auto columns = kernel_metric_columns();
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i].key == key) return i;
  throw_config("kernel metric '{}' has no column in the kernel profile results", key);
}

namespace {

// "<key>_coverage" of each metric, kept alive for the schema rows' names.
const std::array<std::string, kKernelMetricCount>& coverage_names() {
  static const std::array<std::string, kKernelMetricCount> names = [] {
    std::array<std::string, kKernelMetricCount> out;
    for (size_t i = 0; i < kKernelMetricCount; ++i) out[i] = std::string(kernel_metric_columns()[i].key) + "_coverage";
    return out;
  }();
  return names;
}

// The metric fields of a row: one schema row per column, the member found by the row's name (every
// metric is written and read the same way, so one pair of functions serves the eleven).
template <class S>
KernelMetricFigures& figures_of(S& s, const FieldInfo& f) {
  for (size_t i = 0; i < kKernelMetricCount; ++i) {
    if (kernel_metric_columns()[i].key == f.name) return s.metrics;
    if constexpr (std::is_base_of_v<RolledKernelMetrics, std::remove_const_t<S>>)
      if (coverage_names()[i] == f.name) return s.coverage;
  }
  throw std::logic_error("not a metric field");
}
size_t index_of(const FieldInfo& f) {
  for (size_t i = 0; i < kKernelMetricCount; ++i)
    if (kernel_metric_columns()[i].key == f.name || coverage_names()[i] == f.name) return i;
  throw std::logic_error("not a metric field");
}

template <class S>
SchemaField<S> metric_field(std::string_view name, std::string_view unit, std::string_view meaning) {
  return {FieldInfo{name, FieldType::Number, unit, O, meaning, nullptr},
          [](const S& s, const FieldInfo& f, nlohmann::json& object) {
            const NumberFigure& v = figures_of(const_cast<S&>(s), f)[index_of(f)];
            if (v.has_value())
              object[std::string(f.name)] = v.value();
            else if (v.is_null())
              object[std::string(f.name)] = nullptr;
          },
          [](const nlohmann::json& object, const FieldInfo& f, S& s, const std::string& file, const std::string& path) {
            const auto it = object.find(std::string(f.name));
            if (it == object.end()) return;
            if (!it->is_null() && !it->is_number())
              schema_detail::wrong_type(file, schema_detail::child(path, f.name), "a number");
            figures_of(s, f)[index_of(f)] = it->is_null() ? NumberFigure::null() : NumberFigure(it->get<double>());
          }};
}

template <class S>
void add_metric_fields(std::vector<SchemaField<S>>& f, bool rolled) {
  for (size_t i = 0; i < kKernelMetricCount; ++i) {
    const KernelMetricColumn& c = kernel_metric_columns()[i];
    f.push_back(metric_field<S>(
        c.key, c.unit, rolled ? "runtime-weighted mean over the kernels that have it (null: none has)" : c.meaning));
  }
  if (!rolled) return;
  for (size_t i = 0; i < kKernelMetricCount; ++i)
    f.push_back(metric_field<S>(coverage_names()[i], "",
                                "the share of the row's kernel time whose kernels have the metric, in [0, 1]"));
}

}  // namespace

std::span<const SchemaField<KernelProfileKernel>> KernelProfileKernel::fields() {
  using C = KernelProfileKernel;
  static const std::vector<SchemaField<C>> f = [] {
    std::vector<SchemaField<C>> f = {
        field<&C::owner>("owner", "", R, "the layer and pass, or update, exchange, input copy, unattributed"),
        field<&C::layer>("layer", "", R,
                         "the layer (bench conv: the problem and algorithm; null for the step's parts)"),
        field<&C::pass>("pass", "", R, "forward, backward, update, exchange, input copy or unattributed"),
        field<&C::group>("group", "", R, "the layer type (bench conv: the cuDNN algorithm)"),
        field<&C::name>("name", "", R, "the kernel's demangled name, whole"),
        field<&C::grid_x>("grid_x", "", R, "blocks of the grid, x"),
        field<&C::grid_y>("grid_y", "", R, "blocks of the grid, y"),
        field<&C::grid_z>("grid_z", "", R, "blocks of the grid, z"),
        field<&C::block_x>("block_x", "", R, "threads of a block, x"),
        field<&C::block_y>("block_y", "", R, "threads of a block, y"),
        field<&C::block_z>("block_z", "", R, "threads of a block, z"),
        field<&C::cluster_x>("cluster_x", "", R, "blocks of a thread-block cluster, x (0: no clusters)"),
        field<&C::cluster_y>("cluster_y", "", R, "blocks of a cluster, y"),
        field<&C::cluster_z>("cluster_z", "", R, "blocks of a cluster, z"),
        field<&C::registers_per_thread>("registers_per_thread", "", R, "registers per thread"),
        field<&C::static_shared_bytes>("static_shared_bytes", "bytes", R, "static shared memory per block"),
        field<&C::dynamic_shared_bytes>("dynamic_shared_bytes", "bytes", R, "dynamic shared memory per block"),
        field<&C::carveout_bytes>("carveout_bytes", "bytes", R, "the SM's shared-memory carveout (0: not reported)"),
        field<&C::launches_per_step>("launches_per_step", "", R, "launches per profiled step"),
        field<&C::ms_per_step>("ms_per_step", "ms", R, "the launches' summed duration per step"),
        field<&C::mean_us>("mean_us", "us", R, "mean duration of one launch"),
        field<&C::share_of_owner>("share_of_owner", "", R, "of the owner's kernel time"),
        field<&C::share_of_step>("share_of_step", "", R, "of the step's kernel time"),
        field<&C::occupancy>("occupancy", "", R, "theoretical occupancy: active warps over the SM's maximum"),
        field<&C::active_blocks_per_sm>("active_blocks_per_sm", "", R, "blocks one SM holds at once"),
        field<&C::active_warps_per_sm>("active_warps_per_sm", "", R, "warps one SM holds at once"),
        field<&C::limiters>("limiters", "", R, "what limits the occupancy: warps, registers, shared memory, blocks"),
    };
    add_metric_fields(f, false);
    return f;
  }();
  return f;
}

std::span<const SchemaField<KernelProfileOwner>> KernelProfileOwner::fields() {
  using C = KernelProfileOwner;
  static const std::vector<SchemaField<C>> f = [] {
    std::vector<SchemaField<C>> f = {
        field<&C::owner>("owner", "", R, "the layer and pass, or the step's part"),
        field<&C::layer>("layer", "", R, "the layer (null for the step's parts)"),
        field<&C::pass>("pass", "", R, "the pass"),
        field<&C::group>("group", "", R, "the layer type or cuDNN algorithm"),
        field<&C::kernel_ms_per_step>("kernel_ms_per_step", "ms", R, "its kernels' summed duration per step"),
        field<&C::measured_ms_per_step>("measured_ms_per_step", "ms", R,
                                        "its time as the unprofiled timing measured it (null: not timed apart)"),
        field<&C::kernel_vs_measured>("kernel_vs_measured", "", R, "kernel_ms_per_step over measured_ms_per_step"),
        field<&C::gap_ms_per_step>("gap_ms_per_step", "ms", O,
                                   "per step, the time before its launches when no kernel ran: from the latest end of "
                                   "every earlier kernel to each launch, a step's first adding none (absent in older "
                                   "files)"),
        field<&C::kernel_and_gap_vs_measured>("kernel_and_gap_vs_measured", "", O,
                                              "kernel_ms_per_step plus gap_ms_per_step over measured_ms_per_step "
                                              "(absent in older files)"),
        field<&C::share_of_step>("share_of_step", "", R, "of the step's kernel time"),
        field<&C::kernels>("kernels", "", R, "kernel rows (kernel and launch configuration)"),
        field<&C::launches_per_step>("launches_per_step", "", R, "launches per step"),
    };
    add_metric_fields(f, true);
    return f;
  }();
  return f;
}

std::span<const SchemaField<KernelProfileGroup>> KernelProfileGroup::fields() {
  using C = KernelProfileGroup;
  static const std::vector<SchemaField<C>> f = [] {
    std::vector<SchemaField<C>> f = {
        field<&C::group>("group", "", R, "the layer type or cuDNN algorithm"),
        field<&C::pass>("pass", "", R, "the pass"),
        field<&C::owners>("owners", "", R, "owners of the group and pass"),
        field<&C::kernels>("kernels", "", R, "their kernel rows"),
        field<&C::kernel_ms_per_step>("kernel_ms_per_step", "ms", R, "their kernels' summed duration per step"),
        field<&C::share_of_step>("share_of_step", "", R, "of the step's kernel time"),
        field<&C::launches_per_step>("launches_per_step", "", R, "launches per step"),
    };
    add_metric_fields(f, true);
    return f;
  }();
  return f;
}

std::span<const SchemaField<KernelProfileSummary>> KernelProfileSummary::fields() {
  using S = KernelProfileSummary;
  static const std::vector<SchemaField<S>> f = {
      field<&S::command>("command", "", R, "time or bench conv"),
      field<&S::net>("net", "", R, "the network (null for bench conv)"),
      field<&S::device>("device", "", R, "the backend's description of the device"),
      field<&S::gpu>("gpu", "", R, "the GPU's name as the profiler reports it"),
      field<&S::sm_arch>("sm_arch", "", R, "the compute capability whose limits the occupancy uses"),
      field<&S::host>("host", "", R, "the host"),
      field<&S::time>("time", "", R, "UTC start"),
      field<&S::precision>("precision", "", R, "the run's precision"),
      field<&S::layout>("layout", "", R, "NCHW or NHWC (null: not known)"),
      field<&S::batch>("batch", "", R, "the batch (bench conv: the problems' common one; null where they differ)"),
      field<&S::inference>("inference", "", R, "forward passes alone (time --inference)"),
      field<&S::warmup>("warmup", "", R, "steps run before the profiled ones"),
      field<&S::profiled_steps>("profiled_steps", "", R, "steps whose kernels were recorded"),
      field<&S::graph_note>("graph_note", "", R, "how CUDA graphs were handled"),
      field<&S::group_kind>("group_kind", "", R, "what a group is: layer type or algorithm"),
      field<&S::attributed_kernels>("attributed_kernels", "", R, "kernel records an owner claimed"),
      field<&S::unattributed_kernels>("unattributed_kernels", "", R, "kernel records no owner claimed"),
      field<&S::dropped_records>("dropped_records", "", R, "records the profiler lost (> 0: the view is incomplete)"),
      field<&S::kernel_ms_per_step>("kernel_ms_per_step", "ms", R, "all kernels' summed duration per step"),
      field<&S::step_ms>("step_ms", "ms", R, "the unprofiled step's time (null: unknown)"),
      field<&S::profiled_step_ms>("profiled_step_ms", "ms", R, "the step's time while traced (null: unknown)"),
      field<&S::profiling_overhead>("profiling_overhead", "", R,
                                    "profiled_step_ms over step_ms, less 1 (null: unknown)"),
      field<&S::overhead_note>("overhead_note", "", R, "how the overhead was found, or why not"),
      field<&S::metric_set>("metric_set", "", R, "the metric keys measured (empty: no --metrics)"),
      field<&S::metric_method>("metric_method", "", R, "how the metrics were measured (null: not measured)"),
      field<&S::chip>("chip", "", R, "the profiler's chip name (null: no metrics)"),
      field<&S::replay_passes>("replay_passes", "", R, "replay passes per kernel the metric set took (null: none)"),
      field<&S::metric_seconds>("metric_seconds", "s", R, "wall time the metric profiling took (null: none)"),
      field<&S::kernels>("kernels", "", R, "one per kernel, owner and launch configuration"),
      field<&S::owners>("owners", "", R, "one per owner"),
      field<&S::groups>("groups", "", R, "one per group and pass"),
      field<&S::provenance>("provenance", "", O, "the build, command line, start and end time and hosts"),
      field<&S::settings>("settings", "", O, "every setting of the command's table as it ran, {name: value}"),
  };
  return f;
}

nlohmann::json kernel_profile_result_json(const KernelProfileSummary& s) {
  return to_json_object(s);
}

namespace {

// The report sorts, divides and prints by these: each is a time, a share or a count, so a negative or
// non-finite one is a foreign or hand-edited file, refused here rather than tabled as if measured.
void check_non_negative(const NumberFigure& v, const std::string& file, const std::string& path) {
  if (v.has_value() && !(std::isfinite(v.value()) && v.value() >= 0))
    throw_config("{}: {}: {} is not a finite value >= 0", file, path, v.value());
}

// `fields` of every row of `table`, named by their key path ("kernels[3].ms_per_step").
template <typename Row>
void check_rows(const Figure<std::vector<Row>>& table, const char* name,
                std::initializer_list<std::pair<NumberFigure Row::*, const char*>> fields, const std::string& file) {
  const std::vector<Row>& rows = table.value_or({});
  for (size_t i = 0; i < rows.size(); ++i)
    for (const auto& [field, key] : fields)
      check_non_negative(rows[i].*field, file, fmt::format("{}[{}].{}", name, i, key));
}

void check_values(const KernelProfileSummary& s, const std::string& file) {
  for (const std::string& key : s.metric_set.value_or({})) {
    try {
      kernel_metric_index(key);
    } catch (const ConfigError& e) {
      throw_config("{}: metric_set: {}", file, e.what());
    }
  }
  check_non_negative(s.kernel_ms_per_step, file, "kernel_ms_per_step");
  check_non_negative(s.step_ms, file, "step_ms");
  using K = KernelProfileKernel;
  using O = KernelProfileOwner;
  using G = KernelProfileGroup;
  check_rows<K>(s.kernels, "kernels",
                {{&K::launches_per_step, "launches_per_step"},
                 {&K::ms_per_step, "ms_per_step"},
                 {&K::mean_us, "mean_us"},
                 {&K::share_of_owner, "share_of_owner"},
                 {&K::share_of_step, "share_of_step"}},
                file);
  check_rows<O>(s.owners, "owners",
                {{&O::kernel_ms_per_step, "kernel_ms_per_step"},
                 {&O::measured_ms_per_step, "measured_ms_per_step"},
                 {&O::share_of_step, "share_of_step"},
                 {&O::launches_per_step, "launches_per_step"}},
                file);
  check_rows<G>(s.groups, "groups",
                {{&G::kernel_ms_per_step, "kernel_ms_per_step"},
                 {&G::share_of_step, "share_of_step"},
                 {&G::launches_per_step, "launches_per_step"}},
                file);
}

}  // namespace

KernelProfileSummary kernel_profile_result_from_json(const nlohmann::json& j, const std::string& file) {
  KernelProfileSummary s = from_json_object<KernelProfileSummary>(j, file);
  const std::string command = s.command.value_or("");
  if (command != "time" && command != "bench conv")
    throw_config("{}: command: \"{}\" is not a kernel profile's (time, bench conv)", file, command);
  check_values(s, file);
  return s;
}

KernelProfileSummary read_kernel_profile(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "summary.json" : fs::path(path);
  std::ifstream in(file);
  if (!in) throw_config("{}: cannot open", file.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw_config("{}: not JSON ({})", file.string(), e.what());
  }
  return kernel_profile_result_from_json(j, file.string());
}

namespace {

// The scalar fields of a row type, in schema order: the CSV and HDF5 columns.
template <class Row>
std::vector<std::string> scalar_columns() {
  std::vector<std::string> out;
  for (const SchemaField<Row>& f : Row::fields()) out.emplace_back(f.info.name);
  return out;
}

}  // namespace

std::string write_kernel_profile_folder(const std::string& results_root, const std::string& experiment,
                                        const KernelProfileSummary& s, const std::string& utc_stamp) {
  std::string subject = s.command.value_or("") == "time" ? s.net.value_or("net") : "conv";
  // A folder name of letters, digits and . _ + = - whatever the network calls itself.
  for (char& c : subject)
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view("._+=-").find(c) == std::string_view::npos)
      c = '_';
  const std::string stem = fmt::format("{}-{}{}-{}", subject, s.precision.value_or(""),
                                       s.inference.value_or(false) ? "-inference" : "", utc_stamp);
  return write_result_folder(
      (std::filesystem::path(results_root) / experiment / std::string(kKernelProfileFolder)).string(), stem,
      kernel_profile_result_json(s),
      {{"kernels", "kernels.csv", "kernels", scalar_columns<KernelProfileKernel>()},
       {"owners", "owners.csv", "owners", scalar_columns<KernelProfileOwner>()},
       {"groups", "groups.csv", "groups", scalar_columns<KernelProfileGroup>()}},
      "kernels.h5", {"command", "net", "device", "gpu", "sm_arch", "precision", "graph_note", "group_kind"},
      {"batch", "profiled_steps", "kernel_ms_per_step", "step_ms", "profiling_overhead"});
}

}  // namespace cnnscale
