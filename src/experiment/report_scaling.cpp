// The scaling tables of `cnnscale report` (see report_tables.hpp): speedup and parallel efficiency
// per configuration, and by_gpus, which turns the rank (GPU) count into columns; its values are the
// long tables' (same Stat per group). Speedup is a ratio of means, its std propagated from both
// relative stds. Devices are named as what they are: GPUs when every run is a GPU run, else ranks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "experiment/report_baseline.hpp"
#include "experiment/report_layout.hpp"
#include "experiment/report_tables.hpp"

namespace cnnscale::report {

namespace {

// Where g's ranks run another BLAS thread count each than its 1-rank baseline (a sweep gives a
// single CPU rank all the cores' threads), the pair for the note: 1 rank with all the threads
// against N ranks sharing them is no N-fold resource.
void note_threads(const ConfigGroup& g, const ConfigGroup* base, std::set<std::string>& notes) {
  if (!base || base == &g || g.key.at("threads_per_rank").empty() ||
      g.key.at("threads_per_rank") == base->key.at("threads_per_rank"))
    return;
  const double tn = std::stod(g.key.at("threads_per_rank"));
  const std::string& t1 = base->key.at("threads_per_rank");
  notes.insert(fmt::format("1 rank ran {} BLAS thread{}, {:g} ranks {:g} each ({:g} in all)",
                           t1.empty() ? "an unrecorded number of" : t1, t1 == "1" ? "" : "s", g.world_size(), tn,
                           g.world_size() * tn));
}

// A speedup over N devices: the efficiency, mean and std alike (null stays null).
Stat per_device(Stat speedup, double n) {
  if (!speedup.null()) {
    speedup.mean /= n;
    speedup.std /= n;
  }
  return speedup;
}

// The 1-rank run of g's per-rank batch (global batch / ranks, where whole), null where there is none.
const ConfigGroup* weak_baseline(const ConfigGroup& g, const std::vector<ConfigGroup>& groups, int64_t& per_rank) {
  const double n = g.world_size(), b = g.global_batch();
  if (!(n > 1) || !(b > 0) || std::fmod(b, n) != 0) return nullptr;
  per_rank = static_cast<int64_t>(b / n);
  return baseline_at_batch(g, groups, std::to_string(per_rank));
}

}  // namespace

std::string thread_note(const std::vector<ConfigGroup>& groups, Scaling scaling) {
  std::set<std::string> notes;
  for (const ConfigGroup& g : groups) {
    int64_t per_rank = 0;
    note_threads(g, scaling == Scaling::Strong ? baseline_of(g, groups) : weak_baseline(g, groups, per_rank), notes);
  }
  if (notes.empty()) return "";
  std::string list;
  for (const std::string& n : notes) list += (list.empty() ? "" : "; ") + n;
  return "CPU ranks ran another BLAS thread count each than their 1-rank run: " + list +
         ". Their speedup compares ranks sharing the same cores, not N cores against one.";
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
                                     {"efficiency", "efficiency"},
                                     {"1-" + one + " rate at batch/N", "small_batch_ratio"},
                                     {"weak efficiency", "weak_efficiency"}});
  int missing = 0, undivided = 0;
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    const Stat s = g.stat(&RunSummary::samples_per_s);
    const ConfigGroup* base = baseline_of(g, groups);
    const Stat b = base ? base->stat(&RunSummary::samples_per_s) : Stat{};
    const Stat speedup = speedup_of(s, b, base == &g);
    const Stat efficiency = per_device(speedup, g.world_size());
    if (speedup.null()) ++missing;
    // The efficiency in two factors, where one rank ran the per-rank batch: what one device keeps
    // of its rate at that smaller batch, and what N together keep of N times that rate.
    int64_t per_rank = 0;
    const ConfigGroup* small = g.world_size() > 1 ? weak_baseline(g, groups, per_rank) : nullptr;
    Stat ratio, weak;
    if (base == &g) {
      ratio = weak = speedup;  // one rank: 1 of itself, as its speedup
    } else if (small && base) {
      const Stat b_small = small->stat(&RunSummary::samples_per_s);
      ratio = speedup_of(b_small, b, false);
      weak = per_device(speedup_of(s, b_small, false), g.world_size());
    } else if (g.world_size() > 1) {
      ++undivided;
    }
    for (const Stat& x : {s, b, speedup, efficiency, ratio, weak}) cells.push_back(Cell::of(x));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back("Std of speedup and efficiency: first-order propagation of both relative stds.");
  t.notes.push_back(fmt::format(
      "1-{0} rate at batch/N = samples/s of 1 {0} at the per-{0} batch (global batch / N) / samples/s of 1 {0} at "
      "the global batch: what one {0} keeps of its rate at the share each of N takes. Weak efficiency = samples/s "
      "on N {1} / (N x samples/s of 1 {0} at the per-{0} batch). Their product is the efficiency: the first "
      "factor is one {0}'s own loss at the smaller batch, which no exchange can win back, the second what "
      "running N together costs (the exchange, waiting, contention).{2}",
      one, l.noun.many,
      undivided ? fmt::format(" Both are — in {} row(s) without a 1-{} run at the per-{} batch.", undivided, one, one)
                : ""));
  if (std::string threads = thread_note(groups, Scaling::Strong); !threads.empty()) t.notes.push_back(threads);
  if (missing) t.notes.push_back(fmt::format("{} row(s) have no 1-{} run of the same configuration: —.", missing, one));
  return t;
}

Table weak_scaling_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  const std::string& one = l.noun.one;
  Table t = l.start("weak_scaling", "Weak scaling",
                    fmt::format("Each {0} keeps its batch as {1} are added: scaled speedup = samples/s on N {1} / "
                                "samples/s on 1 {0} at the same network and per-{0} batch (global batch / N); "
                                "weak-scaling efficiency = scaled speedup / N.",
                                one, l.noun.many));
  t.columns.insert(t.columns.end(), {{"per-" + one + " batch", "batch_per_rank", false},
                                     {"samples/s", "samples_per_s"},
                                     {"1-" + one + " samples/s", "baseline_samples_per_s"},
                                     {"scaled speedup", "scaled_speedup"},
                                     {"efficiency", "efficiency"}});
  for (const ConfigGroup& g : groups) {
    int64_t per_rank = 0;
    const ConfigGroup* base = weak_baseline(g, groups, per_rank);
    if (!base) continue;
    auto cells = l.row(g);
    cells.push_back(Cell::of(std::to_string(per_rank)));
    const Stat s = g.stat(&RunSummary::samples_per_s), b = base->stat(&RunSummary::samples_per_s);
    const Stat speedup = speedup_of(s, b, false);
    for (const Stat& x : {s, b, speedup, per_device(speedup, g.world_size())}) cells.push_back(Cell::of(x));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back(fmt::format(
      "Rows: every multi-{0} configuration whose per-{0} batch has a 1-{0} run of the same variant (sweep "
      "matrix.batch_per_gpu runs them; a strong-scaling sweep holds some by coincidence). Std: first-order "
      "propagation of both relative stds.",
      one));
  if (std::string threads = thread_note(groups, Scaling::Weak); !threads.empty()) t.notes.push_back(threads);
  return t;
}

Table baseline_table(const std::vector<ConfigGroup>& groups, const std::vector<BaselineFile>& files) {
  Layout l{groups};
  const std::string& one = l.noun.one;
  Table t = l.start("baseline", "Against a baseline",
                    fmt::format("Each configuration of equal {1} beside another framework's measurement (report "
                                "--baseline: its file, and compiler mode where one was named) of the same network, "
                                "precision, global batch and {1}: samples/s of both, ours / theirs, and each side's "
                                "strong-scaling efficiency (samples/s / (N x its own 1-{0} samples/s at the same "
                                "global batch)) and weak-scaling efficiency (against N x its own 1-{0} samples/s at "
                                "the per-{0} batch).",
                                one, l.noun.many));
  t.columns.insert(t.columns.end(), {{"baseline", "baseline", false},
                                     {"samples/s", "samples_per_s"},
                                     {"baseline samples/s", "baseline_samples_per_s"},
                                     {"ours / baseline", "ratio"},
                                     {"efficiency", "efficiency"},
                                     {"baseline efficiency", "baseline_efficiency"},
                                     {"weak efficiency", "weak_efficiency"},
                                     {"baseline weak efficiency", "baseline_weak_efficiency"}});
  // The baseline's own 1-GPU measurement of a point's network, precision, source and `batch`.
  const auto their_single = [&](const BaselineFile& f, const BaselinePoint& p, int64_t batch) -> double {
    for (const BaselinePoint& q : f.points)
      if (q.world == 1 && q.batch == batch && q.net == p.net && q.precision == p.precision && q.source == p.source)
        return q.samples_per_s;
    return kMissing;
  };
  int failed = 0;
  for (const BaselineFile& f : files) failed += f.failed;
  for (const ConfigGroup& g : groups) {
    // A one-rank exchange run measured our data-parallel path's cost, nothing another framework ran.
    if (is_unequal(g) || is_gpu_mix(g) || is_one_rank_exchange(g)) continue;
    const double n = g.world_size(), batch = g.global_batch();
    // Our side of every row of g, whichever baseline points it meets.
    const Stat s = g.stat(&RunSummary::samples_per_s);
    const ConfigGroup* base = baseline_of(g, groups);
    const Stat efficiency =
        per_device(speedup_of(s, base ? base->stat(&RunSummary::samples_per_s) : Stat{}, base == &g), n);
    int64_t per_rank = 0;
    const ConfigGroup* small = n > 1 ? weak_baseline(g, groups, per_rank) : nullptr;
    const Stat weak =
        n == 1 ? efficiency
               : per_device(speedup_of(s, small ? small->stat(&RunSummary::samples_per_s) : Stat{}, false), n);
    for (const BaselineFile& f : files)
      for (const BaselinePoint& p : f.points) {
        if (p.net != g.net() || p.precision != g.key.at("precision") || p.batch != batch || p.world != n) continue;
        auto cells = l.row(g);
        cells.push_back(Cell::of(p.source));
        const Stat theirs = stat_of({p.samples_per_s});
        const double one_there = their_single(f, p, p.batch);
        const double small_there = p.batch % p.world == 0 ? their_single(f, p, p.batch / p.world) : kMissing;
        cells.push_back(Cell::of(s));
        cells.push_back(Cell::of(theirs));
        cells.push_back(Cell::of(speedup_of(s, theirs, false)));
        cells.push_back(Cell::of(efficiency));
        cells.push_back(Cell::of(stat_of({p.samples_per_s / (n * one_there)})));
        cells.push_back(Cell::of(weak));
        cells.push_back(Cell::of(stat_of({p.samples_per_s / (n * small_there)})));
        t.rows.push_back(std::move(cells));
      }
  }
  t.notes.push_back(
      "The baseline's figures are single measurements (no std); ours are means over repeats, their std propagated "
      "into the ratio and efficiencies as in the scaling tables. An efficiency is — where that side has no 1-" +
      one + " measurement at the batch it needs.");
  if (failed)
    t.notes.push_back(
        fmt::format("{} baseline measurement(s) failed there (an \"error\" line, e.g. out of memory) "
                    "and are left out.",
                    failed));
  return t;
}

namespace {

// The GPU count whose mean `figure` is the highest (or lowest) of a row's: "—" where fewer than two
// counts have the figure, as one count is no choice.
std::string best_count(const std::map<double, const ConfigGroup*>& at, NumberFigure RunSummary::*figure,
                       bool highest) {
  double best_n = 0, best = 0;
  int with = 0;
  for (const auto& [n, g] : at) {
    const Stat s = g->stat(figure);
    if (s.null()) continue;
    if (with++ == 0 || (highest ? s.mean > best : s.mean < best)) best = s.mean, best_n = n;
  }
  return with > 1 ? fmt::format("{:g}", best_n) : "—";
}

}  // namespace

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
  int mixes = 0, unequal = 0;
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
      if (is_unequal(g)) {
        ++unequal;
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
          fmt::format("Castro et al.'s layout of Tables 4–9: samples/s, speedup, energy per batch and whole-training "
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
  // The study's conclusion is read off these two (seed 003: "2 GPUs for low-CTC nets, 4 for high-CTC").
  const bool pick = counts.size() > 1;
  if (pick) {
    t.columns.push_back({fmt::format("fastest ({})", noun.many), "fastest_count", false});
    t.columns.push_back({fmt::format("least EDP ({})", noun.many), "least_edp_count", false});
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
    if (pick) {
      cells.push_back(Cell::of(best_count(r.at, &RunSummary::samples_per_s, true)));
      cells.push_back(Cell::of(best_count(r.at, &RunSummary::edp_training_js, false)));
    }
    t.rows.push_back(std::move(cells));
  }
  for (const auto& [g, n] : used) shared += n > 1 ? 1 : 0;
  if (pick)
    t.notes.push_back(fmt::format(
        "fastest / least EDP: the {} count of the row with the highest mean samples/s / the lowest mean "
        "whole-training EDP (— where fewer than two counts have the figure); the study's CTC conclusion compares "
        "them across networks.",
        noun.one));

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
  if (unequal)
    t.notes.push_back(fmt::format(
        "{} configuration(s) of unequal ranks (a mix of SM partitions or slowdowns) or with a split other than "
        "even are left out: the heterogeneous table compares them.",
        unequal));
  if (!rows.empty() && !any_value(groups, &RunSummary::joules_per_batch))
    t.notes.push_back("Energy per batch and EDP are null: " + energy_null_reason(groups) + ".");
  return t;
}


}  // namespace cnnscale::report
