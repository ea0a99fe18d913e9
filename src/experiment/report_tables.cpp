// Builders of the report tables (see report_tables.hpp). Figures derived per run (whole-training
// forward seconds, unit changes) are computed per run first and then averaged, so their std is
// the spread over repeats; speedup is a ratio of means, its std propagated from both relative stds.
#include "experiment/report_tables.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <set>

namespace cnnscale::report {

namespace {

using RunFigure = std::function<double(const RunRecord&)>;

Stat stat_by(const ConfigGroup& g, const RunFigure& f) {
  std::vector<double> values;
  for (const RunRecord* r : g.runs) values.push_back(f(*r));
  return stat_of(values);
}

RunFigure key_scaled(const std::string& key, double scale) {
  return [key, scale](const RunRecord& r) { return r.number(key) * scale; };
}

// The leading columns every table has: network, GPUs, global batch, variant (if any), runs.
struct Layout {
  const std::vector<ConfigGroup>& groups;
  std::vector<std::string> varying = varying_keys(groups);

  Table start(std::string name, std::string title, std::string caption) const {
    Table t{std::move(name), std::move(title), std::move(caption), {}, {}, {}};
    t.columns = {{"network", "net", false}, {"GPUs", "gpus", false}, {"batch", "batch", false}};
    if (!varying.empty()) t.columns.push_back({"variant", "variant", false});
    t.columns.push_back({"runs", "runs", false});
    return t;
  }
  std::vector<Cell> row(const ConfigGroup& g) const {
    std::vector<Cell> cells = {Cell::of(g.net()), Cell::of(g.key.at("world_size")), Cell::of(g.key.at("global_batch"))};
    if (!varying.empty()) cells.push_back(Cell::of(variant_label(g, varying)));
    cells.push_back(Cell::of(std::to_string(g.runs.size())));
    return cells;
  }
};

// Whether any group has a value for the figure: optional columns are shown only then.
bool any_value(const std::vector<ConfigGroup>& groups, const std::string& key) {
  for (const ConfigGroup& g : groups)
    if (!g.stat(key).null()) return true;
  return false;
}

bool all_cpu(const std::vector<ConfigGroup>& groups) {
  for (const ConfigGroup& g : groups)
    if (g.key.at("device") != "cpu") return false;
  return true;
}

// The note under a table without a single value: the runs' own "unavailable: ..." method if one
// says why, else `fallback`.
void note_if_all_null(Table& t, const std::vector<ConfigGroup>& groups, const std::string& key,
                      const std::string& fallback) {
  if (!t.all_null()) return;
  std::string why = fallback;
  for (const ConfigGroup& g : groups) {
    const std::string m = g.method(key);
    // The measuring code writes "unavailable: why" or "...; null: why" next to a null figure.
    if (m.find("unavailable") != std::string::npos || m.find("null:") != std::string::npos) {
      why = fallback + " (" + key + ": " + m + ")";
      break;
    }
  }
  t.notes.push_back("Every value in this table is null (unknown): " + why + ".");
}

bool uses_loops(const ConfigGroup& g) {
  return g.key.at("measure") == "phases";
}

}  // namespace

Table time_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("time", "Time (study Tables 4/7)",
                    "Seconds per batch (slowest rank), samples per second and whole-training seconds, for the "
                    "full step and for the forward and backward steps; mean ± sample std over repeats.");
  t.columns.insert(t.columns.end(), {{"s/batch", "seconds_per_batch"},
                                     {"samples/s", "samples_per_s"},
                                     {"whole training (s)", "whole_training_seconds"},
                                     {"forward s/batch", "forward_seconds_per_batch"},
                                     {"backward s/batch", "backward_seconds_per_batch"},
                                     {"forward whole (s)", "forward_whole_seconds"},
                                     {"backward whole (s)", "backward_whole_seconds"}});
  int loops = 0, timers = 0;
  for (const ConfigGroup& g : groups) {
    const bool loop = uses_loops(g);
    (loop ? loops : timers)++;
    const std::string fwd = loop ? "loop_forward_s" : "time_forward_s";
    const std::string bwd = loop ? "loop_backward_s" : "time_backward_s";
    auto whole = [](const std::string& key) {
      return [key](const RunRecord& r) { return r.number(key) * r.number("whole_iterations"); };
    };
    auto cells = l.row(g);
    for (const Stat& s : {g.stat("seconds_per_batch"), g.stat("samples_per_s"), g.stat("whole_training_seconds"),
                          g.stat(fwd), g.stat(bwd), stat_by(g, whole(fwd)), stat_by(g, whole(bwd))})
      cells.push_back(Cell::of(s));
    t.rows.push_back(std::move(cells));
  }
  if (loops)
    t.notes.push_back(
        fmt::format("Forward/backward in {} row(s) with measure=phases: loop_forward_s and "
                    "loop_backward_s (phase-isolated loops, backward by difference).",
                    loops));
  if (timers)
    t.notes.push_back(
        fmt::format("Forward/backward in {} row(s) with measure={}: time_forward_s and "
                    "time_backward_s (phase timers inside the full step).",
                    timers, loops ? "steady" : groups.front().key.at("measure")));
  t.notes.push_back("Whole-training forward/backward seconds = seconds per batch × whole_iterations.");
  note_if_all_null(t, groups, "seconds_per_batch", "no timed iterations");
  return t;
}

Table energy_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("energy", "Energy (study Tables 5/8)",
                    "Joules per batch and watts (summed over all GPUs of the job), whole-training joules; "
                    "forward/backward joules per batch where phase-isolated windows were measured.");
  std::vector<std::pair<Column, std::string>> figures = {
      {{"J/batch", "joules_per_batch"}, "joules_per_batch"},
      {{"W", "watts"}, "watts"},
      {{"whole training (J)", "whole_training_joules"}, "whole_training_joules"}};
  const std::vector<std::pair<Column, std::string>> optional = {
      {{"forward J/batch", "forward_joules_per_batch"}, "energy_forward_j"},
      {{"backward J/batch", "backward_joules_per_batch"}, "energy_backward_j"},
      {{"CPU package J/batch", "cpu_package_joules_per_batch"}, "cpu_package_joules_per_batch"},
      {{"CPU DRAM J/batch", "cpu_dram_joules_per_batch"}, "cpu_dram_joules_per_batch"}};
  for (const auto& f : optional)
    if (any_value(groups, f.second)) figures.push_back(f);
  for (const auto& f : figures) t.columns.push_back(f.first);
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (const auto& f : figures) cells.push_back(Cell::of(g.stat(f.second)));
    t.rows.push_back(std::move(cells));
  }
  note_if_all_null(t, groups, "joules_per_batch",
                   all_cpu(groups) ? "no energy counters were readable: CPU run without NVML/RAPL"
                                   : "no energy counters were readable (NVML unavailable)");
  return t;
}

Table whole_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("whole", "Whole training, energy and EDP (study Tables 6/9)",
                    "Whole-training time (ks), energy (MJ) and energy-delay product (MJ·ks = 1e9 J·s); ★ marks "
                    "the lowest mean EDP per network.");
  t.columns.insert(t.columns.end(), {{"ks", "whole_ks"}, {"MJ", "whole_mj"}, {"EDP (MJ·ks)", "edp_mj_ks"}});
  t.columns.push_back({"best EDP", "best_edp", false, true});
  std::map<std::string, std::pair<double, size_t>> best;  // net -> (lowest EDP, row)
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    const Stat edp = stat_by(g, key_scaled("edp_training_js", 1e-9));
    cells.push_back(Cell::of(stat_by(g, key_scaled("whole_training_seconds", 1e-3))));
    cells.push_back(Cell::of(stat_by(g, key_scaled("whole_training_joules", 1e-6))));
    cells.push_back(Cell::of(edp));
    cells.push_back(Cell::of("0"));
    if (!edp.null()) {
      auto [it, fresh] = best.emplace(g.net(), std::make_pair(edp.mean, t.rows.size()));
      if (!fresh && edp.mean < it->second.first) it->second = {edp.mean, t.rows.size()};
    }
    t.rows.push_back(std::move(cells));
  }
  for (const auto& [net, b] : best) t.rows[b.second].back().text = "1";
  t.notes.push_back(
      "Whole training = whole_iterations (iterations per epoch × whole_epochs) at the measured "
      "seconds and joules per batch.");
  note_if_all_null(t, groups, "whole_training_joules",
                   all_cpu(groups) ? "no energy counters were readable: CPU run without NVML/RAPL"
                                   : "no energy counters were readable (NVML unavailable)");
  if (!t.all_null() && !any_value(groups, "edp_training_js"))
    t.notes.push_back("MJ and EDP are null and no configuration is marked: no energy counters were readable" +
                      std::string(all_cpu(groups) ? " (CPU run without NVML/RAPL)." : "."));
  return t;
}

Table efficiency_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("efficiency", "Efficiency (study Table 11)",
                    "Training GFLOPS (2 × MACs × 3 per sample) and GFLOPS per watt, joules per sample.");
  t.columns.insert(t.columns.end(),
                   {{"GFLOPS", "gflops"}, {"GFLOPS/W", "gflops_per_watt"}, {"J/sample", "joules_per_sample"}});
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (const char* key : {"gflops", "gflops_per_watt", "joules_per_sample"}) cells.push_back(Cell::of(g.stat(key)));
    t.rows.push_back(std::move(cells));
  }
  note_if_all_null(t, groups, "gflops", "no timed iterations");
  if (!t.all_null() && !any_value(groups, "gflops_per_watt"))
    t.notes.push_back("GFLOPS/W and J/sample are null: no energy counters were readable" +
                      std::string(all_cpu(groups) ? " (CPU run without NVML/RAPL)." : "."));
  return t;
}

Table accuracy_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("accuracy", "Accuracy (study Tables 12/13)",
                    "Test top-1 and top-5 accuracy (%) after the last epoch, test loss and the last training loss.");
  t.columns.insert(t.columns.end(), {{"data", "data", false},
                                     {"top-1 (%)", "top1_percent"},
                                     {"top-5 (%)", "top5_percent"},
                                     {"test loss", "test_loss"},
                                     {"final loss", "final_loss"}});
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    cells.push_back(Cell::of(g.key.at("data")));
    cells.push_back(Cell::of(stat_by(g, key_scaled("test_top1", 100))));
    cells.push_back(Cell::of(stat_by(g, key_scaled("test_top5", 100))));
    cells.push_back(Cell::of(g.stat("test_loss")));
    cells.push_back(Cell::of(g.stat("final_loss")));
    t.rows.push_back(std::move(cells));
  }
  note_if_all_null(t, groups, "test_top1", "no run has a test set or a loss (synthetic data has no test set)");
  if (!t.all_null() && !any_value(groups, "test_top1"))
    t.notes.push_back("Top-1/top-5 are null: synthetic data has no test set.");
  return t;
}

Table scaling_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("scaling", "Strong scaling",
                    "Speedup = samples/s on N GPUs / samples/s on 1 GPU at the same network and global batch; "
                    "parallel efficiency = speedup / N.");
  t.columns.insert(t.columns.end(), {{"samples/s", "samples_per_s"},
                                     {"1-GPU samples/s", "baseline_samples_per_s"},
                                     {"speedup", "speedup"},
                                     {"efficiency", "efficiency"}});
  int missing = 0;
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    const Stat s = g.stat("samples_per_s");
    const ConfigGroup* base = baseline_of(g, groups);
    const Stat b = base ? base->stat("samples_per_s") : Stat{};
    Stat speedup, efficiency;
    if (!s.null() && !b.null() && b.mean != 0) {
      auto rel2 = [](const Stat& x) { return std::isnan(x.std) ? 0.0 : std::pow(x.std / x.mean, 2); };
      const bool spread = !std::isnan(s.std) || !std::isnan(b.std);
      speedup.mean = s.mean / b.mean;
      // The 1-GPU row is its own baseline: exactly 1, no spread (its errors cancel).
      speedup.std = spread && base != &g ? speedup.mean * std::sqrt(rel2(s) + rel2(b)) : kMissing;
      speedup.n = std::min(s.n, b.n);
      efficiency = speedup;
      efficiency.mean /= g.world_size();
      efficiency.std /= g.world_size();
    } else {
      ++missing;
    }
    for (const Stat& x : {s, b, speedup, efficiency}) cells.push_back(Cell::of(x));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back("Std of speedup and efficiency: first-order propagation of both relative stds.");
  if (missing) t.notes.push_back(fmt::format("{} row(s) have no 1-GPU run of the same configuration: —.", missing));
  return t;
}

Table phases_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("phases", "Phase breakdown",
                    "Milliseconds per batch in each phase of the full step (slowest rank's mean over the steady "
                    "window).");
  const std::vector<std::pair<std::string, std::string>> phases = {
      {"data", "time_data_s"},           {"h2d", "time_h2d_s"},
      {"forward", "time_forward_s"},     {"backward", "time_backward_s"},
      {"allreduce", "time_allreduce_s"}, {"comm busy", "time_comm_busy_s"},
      {"update", "time_update_s"},       {"total", "time_total_s"}};
  for (const auto& [label, key] : phases) t.columns.push_back({label + " (ms)", key.substr(5, key.size() - 7) + "_ms"});
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (const auto& p : phases) cells.push_back(Cell::of(stat_by(g, key_scaled(p.second, 1e3))));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back(
      "allreduce is the exposed wait after backward; comm busy overlaps the other phases; total is "
      "the whole iteration, not the sum of the others.");
  note_if_all_null(t, groups, "time_total_s", "no phase timings were recorded");
  return t;
}

std::vector<Table> build_tables(const std::vector<ConfigGroup>& groups) {
  return {time_table(groups),     energy_table(groups),  whole_table(groups), efficiency_table(groups),
          accuracy_table(groups), scaling_table(groups), phases_table(groups)};
}

}  // namespace cnnscale::report
