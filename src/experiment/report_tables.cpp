// Builders of the report tables (see report_tables.hpp). Figures derived per run (whole-training
// forward seconds, unit changes) are computed per run first and then averaged, so their std is
// the spread over repeats; speedup is a ratio of means, its std propagated from both relative stds.
// by_gpus turns the rank (GPU) count into columns; its values are the long tables' (same Stat per
// group). Devices are named as what they are: GPUs when every run is a GPU run, else ranks.
#include "experiment/report_tables.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace cnnscale::report {

namespace {

using RunFigure = std::function<double(const RunRecord&)>;

Stat stat_by(const ConfigGroup& g, const RunFigure& f) {
  std::vector<double> values;
  for (const RunRecord* r : g.runs) values.push_back(f(*r));
  return stat_of(values);
}

RunFigure scaled(NumberFigure RunSummary::*figure, double scale) {
  return [figure, scale](const RunRecord& r) { return r.number(figure) * scale; };
}

bool any_threads(const std::vector<ConfigGroup>& groups) {
  return std::any_of(groups.begin(), groups.end(),
                     [](const ConfigGroup& g) { return !g.key.at("threads_per_rank").empty(); });
}

// The leading columns every table has: network, ranks or GPUs, BLAS threads per rank (CPU runs that
// recorded it), global batch, variant (if any), runs. The CSV keeps the name "gpus" for the count.
struct Layout {
  const std::vector<ConfigGroup>& groups;
  VaryingKeys varying = varying_keys(groups);
  DeviceNoun noun = device_noun(groups);
  bool threads = any_threads(groups);

  Table start(std::string name, std::string title, std::string caption) const {
    Table t{std::move(name), std::move(title), std::move(caption), {}, {}, {}};
    t.columns = {{"network", "net", false}, {noun.many, "gpus", false}};
    if (threads) t.columns.push_back({"threads/rank", "threads_per_rank", false});
    t.columns.push_back({"batch", "batch", false});
    if (any_varying(varying)) t.columns.push_back({"variant", "variant", false});
    t.columns.push_back({"runs", "runs", false});
    return t;
  }
  std::vector<Cell> row(const ConfigGroup& g) const {
    std::vector<Cell> cells = {Cell::of(g.net()), Cell::of(g.key.at("world_size"))};
    if (threads) cells.push_back(Cell::of(g.key.at("threads_per_rank")));
    cells.push_back(Cell::of(g.key.at("global_batch")));
    if (any_varying(varying)) cells.push_back(Cell::of(variant_label(g, varying)));
    cells.push_back(Cell::of(std::to_string(g.runs.size())));
    return cells;
  }
};

Column seconds(std::string header, std::string csv, double si = 1) {
  return {std::move(header), std::move(csv), true, false, Quantity::Seconds, si};
}
Column joules(std::string header, std::string csv, double si = 1) {
  return {std::move(header), std::move(csv), true, false, Quantity::Joules, si};
}

// Whether any group has a value for the figure: optional columns are shown only then.
bool any_value(const std::vector<ConfigGroup>& groups, NumberFigure RunSummary::*figure) {
  for (const ConfigGroup& g : groups)
    if (!g.stat(figure).null()) return true;
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
  return g.measure() == MeasureMode::Phases;
}

// Speedup = samples/s `s` on N GPUs / the 1-GPU run's `b`: a ratio of means, its std propagated
// from both relative stds (first order). `self`: the 1-GPU row against itself is exactly 1, no
// spread (its errors cancel). Null without both values.
Stat speedup_of(const Stat& s, const Stat& b, bool self) {
  Stat out;
  if (s.null() || b.null() || b.mean == 0) return out;
  auto rel2 = [](const Stat& x) { return std::isnan(x.std) ? 0.0 : std::pow(x.std / x.mean, 2); };
  const bool spread = !std::isnan(s.std) || !std::isnan(b.std);
  out.mean = s.mean / b.mean;
  out.std = spread && !self ? out.mean * std::sqrt(rel2(s) + rel2(b)) : kMissing;
  out.n = std::min(s.n, b.n);
  return out;
}

std::string energy_null_reason(const std::vector<ConfigGroup>& groups) {
  return all_cpu(groups) ? "no energy counters were readable (CPU run without NVML/RAPL)"
                         : "no energy counters were readable (NVML unavailable)";
}

}  // namespace

Table time_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("time", "Time (study Tables 4/7)",
                    "Time per batch of the full training step (slowest rank), samples per second and "
                    "whole-training time, then the forward and backward parts of the step; mean ± sample std "
                    "over repeats. CSV: seconds.");
  t.columns.insert(t.columns.end(), {seconds("step {unit}/batch", "seconds_per_batch"),
                                     {"samples/s", "samples_per_s"},
                                     seconds("whole training ({unit})", "whole_training_seconds"),
                                     seconds("forward {unit}/batch", "forward_seconds_per_batch"),
                                     seconds("backward {unit}/batch", "backward_seconds_per_batch"),
                                     seconds("forward whole ({unit})", "forward_whole_seconds"),
                                     seconds("backward whole ({unit})", "backward_whole_seconds")});
  int loops = 0, timers = 0;
  for (const ConfigGroup& g : groups) {
    const bool loop = uses_loops(g);
    (loop ? loops : timers)++;
    NumberFigure RunSummary::*const fwd = loop ? &RunSummary::loop_forward_s : &RunSummary::time_forward_s;
    NumberFigure RunSummary::*const bwd = loop ? &RunSummary::loop_backward_s : &RunSummary::time_backward_s;
    auto whole = [](NumberFigure RunSummary::*figure) {
      return [figure](const RunRecord& r) { return r.number(figure) * r.number(&RunSummary::whole_iterations); };
    };
    auto cells = l.row(g);
    for (const Stat& s : {g.stat(&RunSummary::seconds_per_batch), g.stat(&RunSummary::samples_per_s),
                          g.stat(&RunSummary::whole_training_seconds), g.stat(fwd), g.stat(bwd),
                          stat_by(g, whole(fwd)), stat_by(g, whole(bwd))})
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
  t.notes.push_back("Whole-training forward/backward time = time per batch × whole_iterations.");
  note_if_all_null(t, groups, "seconds_per_batch", "no timed iterations");
  return t;
}

Table energy_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("energy", "Energy (study Tables 5/8)",
                    std::string(l.noun.many == "GPUs" ? "Energy per batch and power (summed over all GPUs of the job)"
                                : all_cpu(groups)     ? "Energy per batch and power (RAPL package + DRAM of each host)"
                                                      : "Energy per batch and power (GPU runs: all GPUs of the job; "
                                                        "CPU runs: RAPL package + DRAM of each host)") +
                        ", whole-training energy; forward/backward energy per batch where phase-isolated windows "
                        "were measured. CSV: joules, watts.");
  std::vector<std::pair<Column, NumberFigure RunSummary::*>> figures = {
      {joules("{unit}/batch", "joules_per_batch"), &RunSummary::joules_per_batch},
      {{"power ({unit})", "watts", true, false, Quantity::Watts}, &RunSummary::watts},
      {joules("whole training ({unit})", "whole_training_joules"), &RunSummary::whole_training_joules}};
  const std::vector<std::pair<Column, NumberFigure RunSummary::*>> optional = {
      {joules("forward {unit}/batch", "forward_joules_per_batch"), &RunSummary::energy_forward_j},
      {joules("backward {unit}/batch", "backward_joules_per_batch"), &RunSummary::energy_backward_j},
      {joules("CPU package {unit}/batch", "cpu_package_joules_per_batch"), &RunSummary::cpu_package_joules_per_batch},
      {joules("CPU DRAM {unit}/batch", "cpu_dram_joules_per_batch"), &RunSummary::cpu_dram_joules_per_batch}};
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
                    "Whole-training time, energy and energy-delay product (EDP = energy × time; MJ·ks = 1e9 J·s); "
                    "★ marks the lowest mean EDP per network. CSV: ks, MJ, MJ·ks as in the study.");
  t.columns.insert(t.columns.end(), {seconds("time ({unit})", "whole_ks", 1e3),
                                     joules("energy ({unit})", "whole_mj", 1e6),
                                     {"EDP ({unit})", "edp_mj_ks", true, false, Quantity::JouleSeconds, 1e9}});
  t.columns.push_back({"best EDP", "best_edp", false, true});
  std::map<std::string, std::pair<double, size_t>> best;  // net -> (lowest EDP, row)
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    const Stat edp = stat_by(g, scaled(&RunSummary::edp_training_js, 1e-9));
    cells.push_back(Cell::of(stat_by(g, scaled(&RunSummary::whole_training_seconds, 1e-3))));
    cells.push_back(Cell::of(stat_by(g, scaled(&RunSummary::whole_training_joules, 1e-6))));
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
  if (!t.all_null() && !any_value(groups, &RunSummary::edp_training_js))
    t.notes.push_back("MJ and EDP are null and no configuration is marked: no energy counters were readable" +
                      std::string(all_cpu(groups) ? " (CPU run without NVML/RAPL)." : "."));
  return t;
}

Table efficiency_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("efficiency", "Efficiency (study Table 11)",
                    "Training GFLOPS (2 × MACs × 3 per sample) and GFLOPS per watt, joules per sample.");
  t.columns.insert(
      t.columns.end(),
      {{"GFLOPS", "gflops"}, {"GFLOPS/W", "gflops_per_watt"}, joules("{unit}/sample", "joules_per_sample")});
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (NumberFigure RunSummary::*figure :
         {&RunSummary::gflops, &RunSummary::gflops_per_watt, &RunSummary::joules_per_sample})
      cells.push_back(Cell::of(g.stat(figure)));
    t.rows.push_back(std::move(cells));
  }
  note_if_all_null(t, groups, "gflops", "no timed iterations");
  if (!t.all_null() && !any_value(groups, &RunSummary::gflops_per_watt))
    t.notes.push_back("GFLOPS/W and J/sample are null: no energy counters were readable" +
                      std::string(all_cpu(groups) ? " (CPU run without NVML/RAPL)." : "."));
  return t;
}

Table accuracy_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("accuracy", "Accuracy (study Tables 12/13)",
                    "Test top-1 and top-5 accuracy (%) at the end of the run, test loss and the last training loss; "
                    "epochs: how long the run trained (iterations / iterations per epoch; fewer than 1 is part of "
                    "an epoch).");
  t.columns.insert(t.columns.end(), {{"data", "data", false},
                                     {"epochs", "epochs"},
                                     {"top-1 (%)", "top1_percent"},
                                     {"top-5 (%)", "top5_percent"},
                                     {"test loss", "test_loss"},
                                     {"final loss", "final_loss"}});
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    cells.push_back(Cell::of(g.key.at("data")));
    cells.push_back(Cell::of(stat_by(g, [](const RunRecord& r) {
      const double per_epoch = r.number(&RunSummary::iterations_per_epoch);
      return per_epoch > 0 ? r.number(&RunSummary::iterations) / per_epoch : kMissing;
    })));
    cells.push_back(Cell::of(stat_by(g, scaled(&RunSummary::test_top1, 100))));
    cells.push_back(Cell::of(stat_by(g, scaled(&RunSummary::test_top5, 100))));
    cells.push_back(Cell::of(g.stat(&RunSummary::test_loss)));
    cells.push_back(Cell::of(g.stat(&RunSummary::final_loss)));
    t.rows.push_back(std::move(cells));
  }
  note_if_all_null(t, groups, "test_top1", "no run has a test set or a loss (synthetic data has no test set)");
  if (!t.all_null() && !any_value(groups, &RunSummary::test_top1))
    t.notes.push_back("Top-1/top-5 are null: synthetic data has no test set.");
  return t;
}

Table scaling_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  const std::string& one = l.noun.one;
  Table t = l.start("scaling", "Strong scaling",
                    fmt::format("Speedup = samples/s on N {} / samples/s on 1 {} at the same network and global batch; "
                                "parallel efficiency = speedup / N.",
                                l.noun.many, one));
  t.columns.insert(t.columns.end(), {{"samples/s", "samples_per_s"},
                                     {"1-" + one + " samples/s", "baseline_samples_per_s"},
                                     {"speedup", "speedup"},
                                     {"efficiency", "efficiency"}});
  int missing = 0;
  std::set<std::string> thread_notes;
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    const Stat s = g.stat(&RunSummary::samples_per_s);
    const ConfigGroup* base = baseline_of(g, groups);
    // 1 rank with all the cores' BLAS threads against N ranks sharing them is no N-fold resource.
    if (base && base != &g && !g.key.at("threads_per_rank").empty() &&
        g.key.at("threads_per_rank") != base->key.at("threads_per_rank")) {
      const double tn = std::stod(g.key.at("threads_per_rank"));
      const std::string& t1 = base->key.at("threads_per_rank");
      thread_notes.insert(fmt::format("{:g} ranks × {:g} thread{} against 1 rank × {} thread{} ({:g} vs {} in all)",
                                      g.world_size(), tn, tn == 1 ? "" : "s", t1.empty() ? "?" : t1,
                                      t1 == "1" ? "" : "s", g.world_size() * tn, t1.empty() ? "?" : t1));
    }
    const Stat b = base ? base->stat(&RunSummary::samples_per_s) : Stat{};
    const Stat speedup = speedup_of(s, b, base == &g);
    Stat efficiency = speedup;
    if (!speedup.null()) {
      efficiency.mean /= g.world_size();
      efficiency.std /= g.world_size();
    } else {
      ++missing;
    }
    for (const Stat& x : {s, b, speedup, efficiency}) cells.push_back(Cell::of(x));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back("Std of speedup and efficiency: first-order propagation of both relative stds.");
  if (!thread_notes.empty()) {
    std::string list;
    for (const std::string& n : thread_notes) list += (list.empty() ? "" : "; ") + n;
    t.notes.push_back("CPU runs use another BLAS thread count per rank than their 1-rank run: " + list +
                      ". Their speedup compares ranks with threads on the same cores, not N cores with one.");
  }
  if (missing) t.notes.push_back(fmt::format("{} row(s) have no 1-{} run of the same configuration: —.", missing, one));
  return t;
}

Table by_gpus_table(const std::vector<ConfigGroup>& groups) {
  // A row is a network, global batch and variant identity with one group per GPU count. A single
  // rank's identity lacks the allreduce settings (it exchanges nothing): its group joins every row
  // whose identity agrees on the keys it has, so overlap and no-overlap rows share one 1-GPU run.
  struct Row {
    std::string net, batch;
    double batch_value;
    Identity id;
    std::map<double, const ConfigGroup*> at;  // GPU count -> group
  };
  std::vector<Row> rows;
  std::set<double> counts;
  int mixes = 0;
  auto agrees = [](const Identity& part, const Identity& whole) {
    return std::all_of(part.begin(), part.end(), [&](const auto& kv) {
      auto it = whole.find(kv.first);
      return it != whole.end() && it->second == kv.second;
    });
  };
  for (const bool single : {false, true})  // multi-rank groups first: they carry whole identities
    for (const ConfigGroup& g : groups) {
      const double n = g.world_size();
      if (std::isnan(n) || (n == 1) != single) continue;
      if (is_gpu_mix(g)) {
        ++mixes;
        continue;
      }
      const Identity id = variant_identity(g);
      bool placed = false;
      for (Row& r : rows) {
        if (r.net != g.net() || r.batch != g.key.at("global_batch") || r.at.count(n)) continue;
        if (single ? agrees(id, r.id) : id == r.id) r.at[n] = &g, placed = true;
        if (placed && !single) break;
      }
      if (!placed) rows.push_back(Row{g.net(), g.key.at("global_batch"), g.global_batch(), id, {{n, &g}}});
      counts.insert(n);
    }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    auto order = [](const Row& r) {
      return std::make_tuple(r.net, r.id.at("device"), r.id.at("precision"), r.batch_value, r.id);
    };
    return order(a) < order(b);
  });
  std::vector<std::pair<std::string, Identity>> identities;
  for (const Row& r : rows) identities.emplace_back(r.net, r.id);
  const VaryingKeys varying = varying_keys(identities);

  const DeviceNoun noun = device_noun(groups);
  const bool threads = any_threads(groups);
  Table t{"by_gpus",
          "Scaling by " + noun.one + " count",
          fmt::format("The study's layout of Tables 4–9: samples/s, speedup, energy per batch and whole-training "
                      "EDP with one column group per {} count in the data; one row per network, global batch and "
                      "variant; mean ± sample std over repeats. CSV: joules, MJ·ks.",
                      noun.one),
          {{"network", "net", false}, {"batch", "batch", false}},
          {},
          {}};
  if (any_varying(varying)) t.columns.push_back({"variant", "variant", false});
  t.columns.push_back({"runs", "runs", false});
  if (threads) t.columns.push_back({"threads/rank", "threads_per_rank", false});
  for (double n : counts) {
    const std::string devices = noun.count(n);
    auto column = [&](const char* header, const char* csv, Quantity q = Quantity::None, double si = 1) {
      t.columns.push_back({fmt::format("{} ({})", header, devices), fmt::format("{}_g{:g}", csv, n), true, false, q, si,
                           q == Quantity::None ? "" : csv});
    };
    column("samples/s", "samples_per_s");
    if (n != 1) column("speedup", "speedup");
    column("{unit}/batch", "joules_per_batch", Quantity::Joules);
    column("EDP ({unit})", "edp_mj_ks", Quantity::JouleSeconds, 1e9);
  }
  int no_baseline = 0, shared = 0;
  std::map<const ConfigGroup*, int> used;  // 1-GPU group -> rows that show it
  for (const Row& r : rows) {
    std::vector<Cell> cells = {Cell::of(r.net), Cell::of(r.batch)};
    if (any_varying(varying)) cells.push_back(Cell::of(variant_label(r.net, r.id, varying)));
    std::string runs;
    for (double n : counts) {
      auto it = r.at.find(n);
      runs += fmt::format("{}{}", runs.empty() ? "" : "/", it == r.at.end() ? 0 : it->second->runs.size());
    }
    cells.push_back(Cell::of(runs));
    if (threads) {
      std::string per_count;
      for (double n : counts) {
        auto it = r.at.find(n);
        const std::string v = it == r.at.end() ? "" : it->second->key.at("threads_per_rank");
        per_count += (per_count.empty() ? "" : "/") + (v.empty() ? std::string("—") : v);
      }
      cells.push_back(Cell::of(per_count));
    }
    auto one = r.at.find(1.0);
    const ConfigGroup* base = one == r.at.end() ? nullptr : one->second;
    if (base) ++used[base];
    if (!base && r.at.rbegin()->first > 1) ++no_baseline;
    for (double n : counts) {
      auto it = r.at.find(n);
      const ConfigGroup* g = it == r.at.end() ? nullptr : it->second;
      const Stat s = g ? g->stat(&RunSummary::samples_per_s) : Stat{};
      cells.push_back(Cell::of(s));
      if (n != 1)
        cells.push_back(Cell::of(g && base ? speedup_of(s, base->stat(&RunSummary::samples_per_s), false) : Stat{}));
      cells.push_back(Cell::of(g ? g->stat(&RunSummary::joules_per_batch) : Stat{}));
      cells.push_back(Cell::of(g ? stat_by(*g, scaled(&RunSummary::edp_training_js, 1e-9)) : Stat{}));
    }
    t.rows.push_back(std::move(cells));
  }
  for (const auto& [g, n] : used) shared += n > 1 ? 1 : 0;

  const std::string& many = noun.many;
  const std::string& one = noun.one;
  t.notes.push_back(
      fmt::format("— : no run of that network, batch and variant on that many {}, or the figure is null in its runs. "
                  "runs: repeats per {} count, in column order{}.",
                  many, one, threads ? "; threads/rank: BLAS threads per rank, likewise" : ""));
  t.notes.push_back(
      fmt::format("Speedup (N {}) = samples/s on N {} / samples/s of the 1-{} run of the same network, global batch "
                  "and variant; std: first-order propagation of both relative stds.",
                  many, many, one));
  if (!rows.empty() && !counts.count(1.0))
    t.notes.push_back(fmt::format("The data holds no 1-{} run: every speedup is —.", one));
  else if (no_baseline)
    t.notes.push_back(
        fmt::format("{} row(s) have no 1-{} run of the same network, batch and variant: their "
                    "speedups are —.",
                    no_baseline, one));
  if (shared)
    t.notes.push_back(
        fmt::format("A single rank exchanges no gradients: rows that differ only in allreduce settings show the same "
                    "1-{} run.",
                    one));
  if (mixes)
    t.notes.push_back(fmt::format(
        "{} configuration(s) on an explicit GPU selection (gpu_mix) or on GPUs of different models are left "
        "out: N such GPUs are not a point of the plain N-GPU series. The other tables list them (variant "
        "gpu_mix or gpu).",
        mixes));
  if (!rows.empty() && !any_value(groups, &RunSummary::joules_per_batch))
    t.notes.push_back("Energy per batch and EDP are null: " + energy_null_reason(groups) + ".");
  return t;
}

Table phases_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("phases", "Phase breakdown",
                    "Time per batch in each part of the full training step of the slowest rank (the rank with the "
                    "largest mean iteration time; mean over its steady iterations). The parts partition the step: "
                    "data, h2d, forward, backward, exposed allreduce, update and other add up to total. CSV: ms.");
  // (header, CSV stem): the stem is a kStepParts part, or the total or comm busy.
  const std::vector<std::pair<std::string, std::string>> columns = {{"data", "data"},
                                                                    {"h2d", "h2d"},
                                                                    {"forward", "forward"},
                                                                    {"backward", "backward"},
                                                                    {"exposed allreduce", "allreduce"},
                                                                    {"update", "update"},
                                                                    {"other", "other"},
                                                                    {"total", "total"},
                                                                    {"comm busy", "comm_busy"}};
  for (const auto& [label, csv] : columns)
    t.columns.push_back({label + " ({unit})", csv + "_ms", true, false, Quantity::Seconds, 1e-3, "phases"});
  int scaled = 0;
  double worst = 0;
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (const auto& column : columns)
      cells.push_back(Cell::of(stat_by(g, [part = column.second](const RunRecord& r) {
        const StepPartition& p = r.step;
        if (part == "total") return p.total * 1e3;
        if (part == "comm_busy") return p.comm_busy * 1e3;
        auto it = p.seconds.find(part);
        return it == p.seconds.end() ? kMissing : it->second * 1e3;
      })));
    for (const RunRecord* r : g.runs)
      if (r->step.excess > 0) ++scaled, worst = std::max(worst, r->step.excess / (r->step.total + r->step.excess));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back(
      "exposed allreduce: the time from the end of backward until the gradients are exchanged (what the step "
      "waits for communication); other: total minus the measured parts (what no phase timer covers, e.g. the "
      "step's bookkeeping). comm busy is the time communication ran, overlapping the other parts: not part of the "
      "sum.");
  if (scaled)
    t.notes.push_back(fmt::format(
        "In {} run(s) the measured parts summed past the total (by up to {:.1f}%: the host-clock data wait overlaps "
        "device work on GPUs, or, without a timeline, the parts are maxima of different ranks); they were scaled to "
        "the total, other = 0.",
        scaled, 100 * worst));
  note_if_all_null(t, groups, "time_total_s", "no phase timings were recorded");
  return t;
}

std::vector<Table> build_tables(const std::vector<ConfigGroup>& groups) {
  return {time_table(groups),     energy_table(groups),  whole_table(groups),   efficiency_table(groups),
          accuracy_table(groups), scaling_table(groups), by_gpus_table(groups), phases_table(groups)};
}

}  // namespace cnnscale::report
