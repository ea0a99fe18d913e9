// The kernel profile's text tables (see kernel_profile_output.hpp), made from the saved struct: the
// run, each owner's kernels, the step's top kernels, Li et al.'s Table II and, with metrics, their
// Fig. 6 figures per kernel and per group.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/bench_timing.hpp"
#include "experiment/kernel_profile_output.hpp"

namespace cnnscale::report {

std::string short_kernel_name(const std::string& name, size_t width) {
  std::string s = name.starts_with("void ") ? name.substr(5) : name;
  // The argument list: from the '(' that matches the final ')' (templates may hold parentheses).
  if (s.ends_with(")")) {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
      if (depth == 0) {
        if (i > 0) s.resize(i);
        break;
      }
    }
  }
  if (s.size() <= width || width < 8) return s;
  // The head names the library or kernel family, the tail the tile and layout: keep both.
  const size_t tail = (width - 3) / 3, head = width - 3 - tail;
  return s.substr(0, head) + "..." + s.substr(s.size() - tail);
}

std::string group_label(const KernelProfileGroup& g) {
  const std::string group = g.group.value_or("?"), pass = g.pass.value_or("?");
  return group == pass ? group : group + ", " + pass;
}

std::vector<KernelProfileKernel> group_kernels(const KernelProfileSummary& s, const KernelProfileGroup& g) {
  std::vector<KernelProfileKernel> merged;
  for (const KernelProfileKernel& k : s.kernels.value_or({})) {
    if (k.group != g.group || k.pass != g.pass) continue;
    auto same = std::find_if(merged.begin(), merged.end(), [&](const KernelProfileKernel& m) {
      return m.name == k.name && m.block_x == k.block_x && m.block_y == k.block_y && m.block_z == k.block_z &&
             m.registers_per_thread == k.registers_per_thread && m.static_shared_bytes == k.static_shared_bytes &&
             m.dynamic_shared_bytes == k.dynamic_shared_bytes && m.occupancy == k.occupancy;
    });
    if (same == merged.end()) {
      merged.push_back(k);
      continue;
    }
    same->ms_per_step = same->ms_per_step.value_or(0) + k.ms_per_step.value_or(0);
    same->launches_per_step = same->launches_per_step.value_or(0) + k.launches_per_step.value_or(0);
  }
  std::stable_sort(merged.begin(), merged.end(),
                   [](const auto& a, const auto& b) { return a.ms_per_step.value_or(0) > b.ms_per_step.value_or(0); });
  return merged;
}

namespace {

const std::vector<KernelProfileKernel>& kernels_of(const KernelProfileSummary& s) {
  static const std::vector<KernelProfileKernel> none;
  return s.kernels.has_value() ? s.kernels.value() : none;
}

std::string num(const NumberFigure& f, const char* spec, const char* none = "-") {
  return f.has_value() && std::isfinite(f.value()) ? fmt::format(fmt::runtime(spec), f.value()) : none;
}
std::string count(const CountFigure& f) {
  return f.has_value() ? std::to_string(f.value()) : "-";
}
std::string percent(const NumberFigure& f) {
  return num(Figure<double>(f.value_or(NAN) * 100.0), "{:.1f}%");
}

std::string bytes(int64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024.0);
}

std::string dims(const CountFigure& x, const CountFigure& y, const CountFigure& z) {
  return fmt::format("{}x{}x{}", x.value_or(0), y.value_or(0), z.value_or(0));
}

// "1024x1x1", and the cluster where the launch has one.
std::string grid_text(const KernelProfileKernel& k) {
  std::string g = dims(k.grid_x, k.grid_y, k.grid_z);
  if (k.cluster_x.value_or(0) > 0) g += " cl " + dims(k.cluster_x, k.cluster_y, k.cluster_z);
  return g;
}

int64_t shared_bytes(const KernelProfileKernel& k) {
  return k.static_shared_bytes.value_or(0) + k.dynamic_shared_bytes.value_or(0);
}

// "50.0% (registers)": the theoretical occupancy and what limits it.
std::string occupancy_text(const KernelProfileKernel& k) {
  const std::string limit = k.limiters.value_or("");
  return percent(k.occupancy) + (limit.empty() ? "" : " (" + limit + ")");
}

std::vector<const KernelProfileKernel*> longest(std::vector<const KernelProfileKernel*> v, size_t n) {
  std::stable_sort(v.begin(), v.end(), [](const auto* a, const auto* b) {
    return a->ms_per_step.value_or(0) > b->ms_per_step.value_or(0);
  });
  if (v.size() > n) v.resize(n);
  return v;
}

// How the parts' kernel sums compare with their measured times: the share of the parts (and of the
// measured time) whose kernels come within 5 % of it, alone and with the gaps before their launches
// added (time when no kernel ran: launch turnaround, copies and memsets, which the trace does not
// record), and the median of what kernels alone leave per launch. A part's events count those gaps,
// its kernels do not: against a few microseconds a launch only the short parts fall far from 1.
std::string attribution_line(const KernelProfileSummary& s) {
  std::vector<double> left_us;
  size_t parts = 0, within = 0, within_gaps = 0;
  double measured_ms = 0, within_ms = 0, within_gaps_ms = 0;
  bool gaps_known = true;
  for (const KernelProfileOwner& o : s.owners.value_or({})) {
    const double measured = o.measured_ms_per_step.value_or(0), kernels = o.kernel_ms_per_step.value_or(0);
    const double launches = o.launches_per_step.value_or(0);
    if (!(measured > 0) || !(launches > 0)) continue;
    ++parts;
    measured_ms += measured;
    if (std::abs(kernels / measured - 1.0) <= 0.05) {
      ++within;
      within_ms += measured;
    }
    gaps_known = gaps_known && o.gap_ms_per_step.has_value();
    if (std::abs((kernels + o.gap_ms_per_step.value_or(0)) / measured - 1.0) <= 0.05) {
      ++within_gaps;
      within_gaps_ms += measured;
    }
    left_us.push_back(1000.0 * (measured - kernels) / launches);
  }
  if (parts == 0) return "";
  // Older results have no gaps: no second count rather than one that counts them as none.
  const std::string with_gaps =
      gaps_known ? fmt::format("; with the gaps before their launches (no kernel running), {} of {} ({:.1f} %)",
                               within_gaps, parts, 100.0 * within_gaps_ms / measured_ms)
                 : "";
  return fmt::format(
      "# kernels vs measured: {} of {} parts within 5 % of their measured time ({:.1f} % of the measured time){}; "
      "measured minus kernels, per launch: median {:.1f} us\n",
      within, parts, 100.0 * within_ms / measured_ms, with_gaps, median_of(std::move(left_us)));
}

// A text column as wide as its longest entry, and no narrower than `least` (bench conv's owners
// name whole problems; a layer's owner is a few words).
size_t column_width(const std::vector<std::string>& cells, size_t least) {
  size_t w = least;
  for (const std::string& c : cells) w = std::max(w, c.size());
  return w;
}

std::vector<std::string> owners_of(const std::vector<const KernelProfileKernel*>& kernels) {
  std::vector<std::string> out;
  for (const KernelProfileKernel* k : kernels) out.push_back(k->owner.value_or("?"));
  return out;
}

std::vector<std::string> group_labels(const KernelProfileSummary& s, const std::string& pass_heading) {
  std::vector<std::string> out{pass_heading};
  for (const KernelProfileGroup& g : s.groups.value_or({})) out.push_back(group_label(g));
  return out;
}

std::string header(const KernelProfileSummary& s) {
  const bool bench = s.command.value_or("") == "bench conv";
  std::string out =
      fmt::format("# kernels of {} on {} ({}), {}, {}, {}\n", bench ? "cnnscale bench conv" : s.net.value_or("?"),
                  s.gpu.value_or(s.device.value_or("?")), s.sm_arch.value_or("sm ?"), s.precision.value_or("?"),
                  s.batch.has_value() ? fmt::format("batch {}", count(s.batch)) : "batches differing by problem",
                  s.inference.value_or(false) ? "inference"
                  : bench                     ? "per algorithm and pass"
                                              : "training");
  out +=
      fmt::format("# {} profiled step(s) after {} warm-up; kernel records: {} attributed, {} unattributed{}\n",
                  count(s.profiled_steps), count(s.warmup), count(s.attributed_kernels), count(s.unattributed_kernels),
                  s.dropped_records.value_or(0) > 0
                      ? fmt::format(", {} DROPPED (the profiler's buffer was full: the view is incomplete)",
                                    s.dropped_records.value())
                      : ", none dropped");
  if (!s.graph_note.value_or("").empty()) out += "# CUDA graphs: " + s.graph_note.value() + "\n";
  out += fmt::format(
      "# kernel time per step {} ms (every kernel's duration summed: kernels on concurrent streams each count in "
      "full)",
      num(s.kernel_ms_per_step, "{:.4f}"));
  if (s.step_ms.has_value()) out += fmt::format("; step {} ms unprofiled", num(s.step_ms, "{:.4f}"));
  if (s.profiled_step_ms.has_value()) out += fmt::format(", {} ms traced", num(s.profiled_step_ms, "{:.4f}"));
  if (s.profiling_overhead.has_value())
    out += fmt::format(" (profiling overhead {:+.1f}%)", 100.0 * s.profiling_overhead.value());
  out += "\n";
  if (!s.overhead_note.value_or("").empty()) out += "# overhead: " + s.overhead_note.value() + "\n";
  out += attribution_line(s);
  const std::vector<std::string> metric_set = s.metric_set.value_or({});
  if (!metric_set.empty())
    out += fmt::format("# metrics: {} kernel metric(s) by {} on {}: {} replay pass(es) per kernel, {} s of profiling\n",
                       metric_set.size(), s.metric_method.value_or("?"), s.chip.value_or("?"), count(s.replay_passes),
                       num(s.metric_seconds, "{:.1f}"));
  return out;
}

std::string owner_tables(const KernelProfileSummary& s, const KernelTableOptions& o) {
  const std::string group_kind = s.group_kind.value_or("group");
  std::string out = fmt::format(
      "\n## kernels per owner, hotspots first: per step its launches, time and share of the owner's kernel time; "
      "grid and block; registers per thread; shared memory per block (static + dynamic); theoretical occupancy on "
      "{} and what limits it\n",
      s.sm_arch.value_or("this GPU"));
  const std::string row = "  {:<{}} {:>8} {:>10} {:>7} {:>18} {:>10} {:>5} {:>10}  {}\n";
  for (const KernelProfileOwner& owner : s.owners.value_or({})) {
    const std::string label = owner.owner.value_or("?");
    // The step's parts (update, unattributed ...) are their own group: no type to name.
    const std::string group = owner.group.value_or("?");
    out += fmt::format("\n{}{}: {} ms/step of kernels, {} of the step", label,
                       group == owner.pass.value_or("?") ? "" : " [" + group_kind + " " + group + "]",
                       num(owner.kernel_ms_per_step, "{:.4f}"), percent(owner.share_of_step));
    if (owner.measured_ms_per_step.has_value())
      out += fmt::format(
          "; measured {} ms (kernels/measured {}; gaps before its launches {} us, kernels+gaps/measured {})",
          num(owner.measured_ms_per_step, "{:.4f}"), num(owner.kernel_vs_measured, "{:.2f}"),
          num(owner.gap_ms_per_step.has_value() ? NumberFigure(1000.0 * owner.gap_ms_per_step.value())
                                                : NumberFigure::null(),
              "{:.1f}"),
          num(owner.kernel_and_gap_vs_measured, "{:.2f}"));
    out += "\n";
    out += fmt::format(fmt::runtime(row), "kernel", o.name_width, "launches", "ms/step", "%owner", "grid", "block",
                       "regs", "smem", "occupancy (limited by)");
    for (const KernelProfileKernel& k : kernels_of(s)) {
      if (k.owner.value_or("") != label) continue;
      out += fmt::format(fmt::runtime(row), short_kernel_name(k.name.value_or("?"), o.name_width), o.name_width,
                         num(k.launches_per_step, "{:.1f}"), num(k.ms_per_step, "{:.4f}"), percent(k.share_of_owner),
                         grid_text(k), dims(k.block_x, k.block_y, k.block_z), count(k.registers_per_thread),
                         bytes(shared_bytes(k)), occupancy_text(k));
    }
  }
  return out;
}

std::string top_table(const KernelProfileSummary& s, const KernelTableOptions& o) {
  std::vector<const KernelProfileKernel*> all;
  for (const KernelProfileKernel& k : kernels_of(s)) all.push_back(&k);
  const auto top = longest(all, o.top);
  std::string out = fmt::format("\n## top {} kernels of the step, by kernel time per step\n", top.size());
  const size_t owner_width = column_width(owners_of(top), 28);
  const std::string row = "{:>3} {:<{}} {:<{}} {:>8} {:>10} {:>7}  {}\n";
  out += fmt::format(fmt::runtime(row), "#", "kernel", o.name_width, "owner", owner_width, "launches", "ms/step",
                     "%step", "occupancy (limited by)");
  for (size_t i = 0; i < top.size(); ++i) {
    const KernelProfileKernel& k = *top[i];
    out += fmt::format(fmt::runtime(row), i + 1, short_kernel_name(k.name.value_or("?"), o.name_width), o.name_width,
                       k.owner.value_or("?"), owner_width, num(k.launches_per_step, "{:.1f}"),
                       num(k.ms_per_step, "{:.4f}"), percent(k.share_of_step), occupancy_text(k));
  }
  return out;
}

// Li et al.'s Table II: what each implementation's main kernels ask of an SM.
std::string resources_table(const KernelProfileSummary& s, const KernelTableOptions& o) {
  const std::string group_kind = s.group_kind.value_or("group");
  std::string out = fmt::format(
      "\n## registers and shared memory of each {}'s {} longest kernels (Li et al.'s Table II), per pass; share of "
      "the {}'s kernel time\n",
      group_kind, o.per_group, group_kind);
  const size_t label_width = column_width(group_labels(s, group_kind + ", pass"), 28);
  const std::string row = "{:<{}} {:<{}} {:>7} {:>8} {:>5} {:>11} {:>11}  {}\n";
  out += fmt::format(fmt::runtime(row), group_kind + ", pass", label_width, "kernel", o.name_width, "%group", "threads",
                     "regs", "static smem", "dynamic smem", "occupancy (limited by)");
  for (const KernelProfileGroup& g : s.groups.value_or({})) {
    const std::vector<KernelProfileKernel> merged = group_kernels(s, g);
    std::vector<const KernelProfileKernel*> of_group;
    for (const KernelProfileKernel& k : merged) of_group.push_back(&k);
    const double group_ms = g.kernel_ms_per_step.value_or(0);
    const std::string label = group_label(g);
    for (const KernelProfileKernel* k : longest(of_group, o.per_group)) {
      const int64_t threads = k->block_x.value_or(0) * k->block_y.value_or(0) * k->block_z.value_or(0);
      out += fmt::format(fmt::runtime(row), label, label_width, short_kernel_name(k->name.value_or("?"), o.name_width),
                         o.name_width,
                         percent(group_ms > 0 ? NumberFigure(k->ms_per_step.value_or(0) / group_ms) : NumberFigure()),
                         threads, count(k->registers_per_thread), bytes(k->static_shared_bytes.value_or(0)),
                         bytes(k->dynamic_shared_bytes.value_or(0)), occupancy_text(*k));
    }
  }
  return out;
}

std::vector<size_t> metric_columns_of(const KernelProfileSummary& s) {
  std::vector<size_t> out;
  for (const std::string& key : s.metric_set.value_or({})) out.push_back(kernel_metric_index(key));
  return out;
}

std::string metric_value(const KernelMetricColumn& c, const NumberFigure& v) {
  return num(v, c.unit == "%" ? "{:.1f}" : "{:.2f}");
}

std::string metrics_tables(const KernelProfileSummary& s, const KernelTableOptions& o) {
  const std::vector<size_t> columns = metric_columns_of(s);
  const auto all = kernel_metric_columns();
  std::string heads;
  for (const size_t i : columns) heads += fmt::format(" {:>13}", all[i].heading);
  std::vector<const KernelProfileKernel*> kernels;
  for (const KernelProfileKernel& k : kernels_of(s)) kernels.push_back(&k);
  const auto top = longest(kernels, o.top);
  std::string out = fmt::format("\n## hardware metrics of the top {} kernels ({}; - : not measured for the kernel)\n",
                                top.size(), s.metric_method.value_or("?"));
  const size_t owner_width = column_width(owners_of(top), 28);
  out +=
      fmt::format("{:>3} {:<{}} {:<{}} {:>7}{}\n", "#", "kernel", o.name_width, "owner", owner_width, "%step", heads);
  for (size_t r = 0; r < top.size(); ++r) {
    std::string cells;
    for (const size_t i : columns) cells += fmt::format(" {:>13}", metric_value(all[i], top[r]->metrics[i]));
    out +=
        fmt::format("{:>3} {:<{}} {:<{}} {:>7}{}\n", r + 1, short_kernel_name(top[r]->name.value_or("?"), o.name_width),
                    o.name_width, top[r]->owner.value_or("?"), owner_width, percent(top[r]->share_of_step), cells);
  }
  const std::string group_kind = s.group_kind.value_or("group");
  out += fmt::format(
      "\n## hardware metrics per {} and pass, each kernel weighted by its share of the kernel time (Li et al.'s Fig. "
      "6); [n%]: the value covers only that share of the row's kernel time\n",
      group_kind);
  const size_t label_width = column_width(group_labels(s, group_kind + ", pass"), 36);
  out += fmt::format("{:<{}} {:>7}{}\n", group_kind + ", pass", label_width, "%step", heads);
  for (const KernelProfileGroup& g : s.groups.value_or({})) {
    std::string cells;
    for (const size_t i : columns) {
      std::string v = metric_value(all[i], g.metrics[i]);
      const double covered = g.coverage[i].value_or(0);
      if (g.metrics[i].has_value() && covered < 0.995) v += fmt::format(" [{:.0f}%]", 100 * covered);
      cells += fmt::format(" {:>13}", v);
    }
    const std::string label = group_label(g);
    out += fmt::format("{:<{}} {:>7}{}\n", label, label_width, percent(g.share_of_step), cells);
  }
  return out;
}

}  // namespace

std::string kernel_profile_tables(const KernelProfileSummary& s, const KernelTableOptions& o) {
  std::string out = header(s);
  if (o.all_kernels) out += owner_tables(s, o);
  out += top_table(s, o);
  out += resources_table(s, o);
  if (!metric_columns_of(s).empty()) out += metrics_tables(s, o);
  out +=
      fmt::format("\n# kernel names are shortened to {} characters here; kernels.csv has them whole\n", o.name_width);
  return out;
}

}  // namespace cnnscale::report
