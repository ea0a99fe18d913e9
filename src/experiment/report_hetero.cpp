// Builders of the heterogeneous tables and of the split-history data (see report_hetero.hpp). Rows
// are compared within a "set": the configurations equal in every identity key but the split, so a
// ★ says which split policy served an objective best on the same ranks, network and batch.
#include "experiment/report_hetero.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "experiment/report_layout.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale::report {

namespace {

// The configuration without its split: rows with equal sets are compared with one another.
std::map<std::string, std::string> set_key(const ConfigGroup& g) {
  auto key = g.key;
  key.erase("split");
  return key;
}

bool even_equal(const ConfigGroup& g) {
  return g.key.at("split") == "even" && g.key.at("mix").empty();
}

// The policies in the order their rows are listed: the reference first, then from fixed to adaptive.
int policy_order(const std::string& split) {
  static const std::vector<std::string> order = {"even", "manual", "proportional", "auto", "energy", "edp"};
  const std::string policy = split.substr(0, split.find(' '));
  const auto it = std::find(order.begin(), order.end(), policy);
  return static_cast<int>(it - order.begin());
}

// "A + B": the GPU models of a mix of models, each once.
std::string models_label(const std::set<std::string>& models) {
  return fmt::format("{}", fmt::join(models, " + "));
}

std::string mix_label(const ConfigGroup& g, const DeviceNoun& noun) {
  const std::string& mix = g.key.at("mix");
  if (!mix.empty()) return mix;
  const std::set<std::string> models = gpu_name_set(g);
  return models.size() > 1 ? models_label(models) : fmt::format("{:g} equal {}", g.world_size(), noun.many);
}

// The shares the runs ended with: one value when the repeats agree, else each distinct one.
std::string shares_label(const ConfigGroup& g) {
  std::vector<std::string> seen;
  for (const RunRecord* r : g.runs) {
    const std::string s = r->summary.split_shares.value_or("");
    if (!s.empty() && std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
  }
  std::string out;
  for (const std::string& s : seen) out.append(out.empty() ? "" : " / ").append(s);
  return out;
}

// A rank's speed in its mix: the SMs of its partition or its emulated slowdown ("" when neither).
std::string speed_label(const RankSummary& r) {
  if (r.sms.has_value()) return fmt::format("{:g} SMs", r.sms.value());
  if (r.slowdown.has_value()) return fmt::format("slowdown {:g}", r.slowdown.value());
  return "";
}

// The leading columns of both tables: which configuration a row is, without the split and mix in the
// variant (they have columns of their own).
struct HeteroLayout {
  std::vector<const ConfigGroup*> rows;
  DeviceNoun noun;
  bool threads = false;
  VaryingKeys varying;

  explicit HeteroLayout(const std::vector<ConfigGroup>& groups)
      : rows(hetero_groups(groups)), noun(device_noun(groups)) {
    std::vector<std::pair<std::string, Identity>> ids;
    for (const ConfigGroup* g : rows) {
      ids.emplace_back(g->net(), identity(*g));
      threads = threads || !g->key.at("threads_per_rank").empty();
    }
    varying = varying_keys(ids);
  }
  static Identity identity(const ConfigGroup& g) {
    Identity id = variant_identity(g);
    id.erase("split");
    id.erase("mix");
    return id;
  }
  std::vector<Column> columns() const {
    std::vector<Column> c = {{"network", "net", false}, {noun.many, "gpus", false}};
    if (threads) c.push_back({"threads/rank", "threads_per_rank", false});
    c.insert(c.end(), {{"batch", "batch", false}, {"mix", "mix", false}, {"split", "split", false}});
    if (any_varying(varying)) c.push_back({"variant", "variant", false});
    c.push_back({"runs", "runs", false});
    return c;
  }
  std::vector<Cell> cells(const ConfigGroup& g) const {
    std::vector<Cell> c = {Cell::of(g.net()), Cell::of(g.key.at("world_size"))};
    if (threads) c.push_back(Cell::of(g.key.at("threads_per_rank")));
    c.insert(c.end(), {Cell::of(g.key.at("global_batch")), Cell::of(mix_label(g, noun)), Cell::of(g.key.at("split"))});
    if (any_varying(varying)) c.push_back(Cell::of(variant_label(g.net(), identity(g), varying)));
    c.push_back(Cell::of(std::to_string(g.runs.size())));
    return c;
  }
};

// Mean over repeats of one rank's figure (runs that lack the rank count as null).
Stat rank_stat(const ConfigGroup& g, size_t rank, NumberFigure RankSummary::*figure, double scale = 1) {
  std::vector<double> values;
  for (const RunRecord* r : g.runs)
    values.push_back(rank < r->ranks.size() ? (r->ranks[rank].*figure).value_or(kMissing) * scale : kMissing);
  return stat_of(values);
}

// The configurations whose split was refined online with a recorded history (auto, energy, edp):
// the first of their runs that recorded changes is drawn.
const RunRecord* refined_online_run(const ConfigGroup& g) {
  const std::string& split = g.key.at("split");
  const std::optional<SplitPolicy> policy = split_policy_named(split.substr(0, split.find(' ')));
  if (!policy || !split_refines_online(*policy) || split.ends_with("(probe only)")) return nullptr;
  const auto run =
      std::find_if(g.runs.begin(), g.runs.end(), [](const RunRecord* r) { return !r->split.changes.empty(); });
  return run == g.runs.end() ? nullptr : *run;
}

}  // namespace

std::vector<std::string> emulation_notes(const std::vector<const ConfigGroup*>& rows) {
  std::set<std::string> partitioned, mixes;  // models cut to SM partitions; mixes of models
  bool partitions = false, slowed = false;
  for (const ConfigGroup* g : rows) {
    std::set<std::string> models = gpu_name_set(*g);
    models.erase("");
    if (models.size() > 1) mixes.insert(models_label(models));
    bool cut = false;  // the mix figure says so too, for runs whose ranks' figures are missing
    for (const RunRecord* r : g->runs)
      for (const RankSummary& k : r->ranks) {
        cut = cut || k.sms.has_value();
        slowed = slowed || k.slowdown.has_value();
      }
    slowed = slowed || g->key.at("mix").starts_with("slowdown ");
    if (cut || g->key.at("mix").ends_with(" SMs")) {
      partitions = true;
      partitioned.insert(models.begin(), models.end());
    }
  }
  std::vector<std::string> notes;
  if (!mixes.empty())
    notes.push_back(fmt::format(
        "Measured on GPUs of different models ({}), not emulated: each rank's time and joules (its own board's "
        "NVML energy counter) are those of its GPU model.",
        fmt::join(mixes, "; ")));
  if (partitions)
    notes.push_back(fmt::format(
        "Emulated GPU mix (mix \"… SMs\"): each rank trains on a GPU of its own{}, confined by a CUDA green "
        "context to the SMs listed (--sm-counts). A rank with fewer SMs keeps its whole board's memory bandwidth, "
        "L2 cache, clocks, power limit and idle power: it is a GPU with fewer SMs, not a slower GPU model (its "
        "memory-bound layers lose less speed than a slower model's would). Its joules are its whole board's NVML "
        "energy counter, the idle SMs and the board's idle power included: not the joules of a slower GPU.",
        partitioned.empty() ? "" : fmt::format(" ({})", fmt::join(partitioned, ", "))));
  if (slowed)
    notes.push_back(
        "Emulated CPU mix (mix \"slowdown …\"): a rank with slowdown f computes at full speed, then sleeps "
        "(f − 1) × its own forward and backward time in each step (--slowdown; loading data and the update are "
        "not slowed), so it reaches the gradient exchange as late as an f times slower rank would. Its cores idle "
        "while it sleeps: its time is a slower rank's, its joules are not (RAPL counts each host's package and "
        "DRAM once, for all of its ranks).");
  return notes;
}

void add_emulation_notes(Table& t, const std::vector<const ConfigGroup*>& rows) {
  for (std::string& note : emulation_notes(rows)) t.notes.push_back(std::move(note));
}

std::vector<const ConfigGroup*> refined_online_groups(const std::vector<ConfigGroup>& groups) {
  std::vector<const ConfigGroup*> out;
  for (const ConfigGroup* g : hetero_groups(groups))
    if (refined_online_run(*g)) out.push_back(g);
  return out;
}

std::vector<const ConfigGroup*> hetero_groups(const std::vector<ConfigGroup>& groups) {
  std::vector<const ConfigGroup*> shown;
  std::set<std::map<std::string, std::string>> sets;
  for (const ConfigGroup& g : groups)
    if (g.world_size() > 1 && is_unequal(g)) {
      shown.push_back(&g);
      sets.insert(set_key(g));
    }
  for (const ConfigGroup& g : groups)
    if (g.world_size() > 1 && even_equal(g) && sets.count(set_key(g))) shown.push_back(&g);
  // Rows of one set together, in the groups' order of their first row, policies from even to edp.
  std::map<std::map<std::string, std::string>, size_t> first;
  for (const ConfigGroup& g : groups) first.emplace(set_key(g), first.size());
  std::stable_sort(shown.begin(), shown.end(), [&](const ConfigGroup* a, const ConfigGroup* b) {
    return std::make_pair(first.at(set_key(*a)), policy_order(a->key.at("split"))) <
           std::make_pair(first.at(set_key(*b)), policy_order(b->key.at("split")));
  });
  return shown;
}

Table hetero_table(const std::vector<ConfigGroup>& groups) {
  const HeteroLayout l(groups);
  Table t{"hetero",
          "Unequal ranks and batch splits",
          fmt::format("Runs on {} of unequal speed (mix: the SMs of each GPU partition, or each CPU rank's emulated "
                      "slowdown) or with the global batch split other than evenly, one row per split policy; "
                      "shares: samples per rank the split ended with. Efficiency = samples/s / the ideal combined "
                      "samples/s (the sum over ranks of local batch / compute seconds); × even = samples/s / the "
                      "even split's samples/s on the same ranks, network and batch (means over repeats; empty "
                      "where no even split ran); imbalance = (slowest − mean) "
                      "/ slowest rank's compute seconds per batch; waiting J/batch: the energy ranks spend waiting "
                      "for the slowest one. EDP = J/batch × seconds per batch. ★ marks, among the rows of one "
                      "network, batch and mix, the fastest, the fewest J/batch and the lowest EDP (means over "
                      "repeats). CSV: joules, J·s.",
                      l.noun.many),
          l.columns(),
          {},
          {}};
  t.columns.insert(t.columns.end(), {{"shares", "shares", false},
                                     {"samples/s", "samples_per_s"},
                                     {"× even", "speedup_vs_even"},
                                     {"efficiency (%)", "efficiency_percent"},
                                     joules("{unit}/batch", "joules_per_batch"),
                                     {"EDP ({unit})", "edp_batch_js", true, false, Quantity::JouleSeconds},
                                     {"imbalance (%)", "imbalance_percent"},
                                     joules("waiting {unit}/batch", "waiting_joules_per_batch"),
                                     {"fastest", "best_samples_per_s", false, true},
                                     {"fewest J/batch", "best_joules_per_batch", false, true},
                                     {"lowest EDP", "best_edp", false, true}});
  // Per set, the even split's mean samples/s: what the other policies gain over it.
  std::map<std::map<std::string, std::string>, double> even_speed;
  for (const ConfigGroup* g : l.rows)
    if (g->key.at("split") == "even") even_speed[set_key(*g)] = g->stat(&RunSummary::samples_per_s).mean;
  // Per set and objective: (best mean, row); samples/s is best highest, so it is compared negated.
  std::map<std::pair<std::map<std::string, std::string>, int>, std::pair<double, size_t>> best;
  for (const ConfigGroup* g : l.rows) {
    auto cells = l.cells(*g);
    cells.push_back(Cell::of(shares_label(*g)));
    const Stat speed = g->stat(&RunSummary::samples_per_s), joules = g->stat(&RunSummary::joules_per_batch),
               edp = g->stat(&RunSummary::edp_batch_js);
    const auto even = even_speed.find(set_key(*g));
    const Stat gain = stat_of({even != even_speed.end() && even->second > 0 ? speed.mean / even->second : kMissing});
    for (const Stat& s :
         {speed, gain, stat_by(*g, scaled(&RunSummary::efficiency, 100)), joules, edp,
          stat_by(*g, scaled(&RunSummary::imbalance, 100)), g->stat(&RunSummary::waiting_joules_per_batch)})
      cells.push_back(Cell::of(s));
    const double objectives[] = {-speed.mean, joules.mean, edp.mean};
    for (int k = 0; k < 3; ++k) {
      cells.push_back(Cell::of(std::string("0")));
      if (std::isnan(objectives[k])) continue;
      auto [it, fresh] = best.emplace(std::make_pair(set_key(*g), k), std::make_pair(objectives[k], t.rows.size()));
      if (!fresh && objectives[k] < it->second.first) it->second = {objectives[k], t.rows.size()};
    }
    t.rows.push_back(std::move(cells));
  }
  for (const auto& [which, b] : best) t.rows[b.second][t.columns.size() - 3 + which.second].text = std::string("1");
  t.notes.push_back(
      "Rows: configurations with more than one rank that recorded a split policy, on unequal ranks (a mix) or "
      "with a split other than even; an even split of equal ranks is listed as the reference of the other splits "
      "of the same configuration. The scaling tables leave these out.");
  t.notes.push_back(fmt::format(
      "mix \"N equal {}\": no rank was slowed or partitioned; a manual split's policy names its shares.", l.noun.many));
  if (!t.rows.empty() && !any_value(groups, &RunSummary::joules_per_batch))
    t.notes.push_back("J/batch, EDP and waiting J/batch are null and not marked: " + energy_null_reason(groups) + ".");
  add_emulation_notes(t, l.rows);
  return t;
}

Table hetero_ranks_table(const std::vector<ConfigGroup>& groups) {
  const HeteroLayout l(groups);
  Table t{"hetero_ranks",
          "Unequal ranks: busy and waiting time per rank",
          "Each rank of the heterogeneous table's configurations: its local batch and speed (SMs of its GPU "
          "partition or emulated slowdown), its compute time per batch (the step less the exposed gradient "
          "exchange), the exposed exchange and the part of it spent waiting for slower ranks (imbalance wait: the "
          "slowest rank's compute minus this rank's), and the energy that waiting costs. Mean ± sample std over "
          "repeats. CSV: seconds, joules.",
          l.columns(),
          {},
          {}};
  t.columns.insert(
      t.columns.end(),
      {{"rank", "rank", false},
       {"speed", "speed", false},
       {"local batch", "local_batch"},
       {"compute ({unit}/batch)", "compute_s", true, false, Quantity::Seconds, 1, "rank_time"},
       {"imbalance wait ({unit}/batch)", "imbalance_wait_s", true, false, Quantity::Seconds, 1, "rank_time"},
       {"exchange wait ({unit}/batch)", "exchange_wait_s", true, false, Quantity::Seconds, 1, "rank_time"},
       joules("waiting {unit}/batch", "waiting_joules_per_batch")});
  for (const ConfigGroup* g : l.rows) {
    size_t ranks = 0;
    for (const RunRecord* r : g->runs) ranks = std::max(ranks, r->ranks.size());
    for (size_t k = 0; k < ranks; ++k) {
      auto cells = l.cells(*g);
      std::string speed;
      for (const RunRecord* r : g->runs)
        if (speed.empty() && k < r->ranks.size()) speed = speed_label(r->ranks[k]);
      cells.insert(cells.end(), {Cell::of(std::to_string(k)), Cell::of(speed)});
      for (NumberFigure RankSummary::*f :
           {&RankSummary::local_batch, &RankSummary::compute_s, &RankSummary::imbalance_wait_s,
            &RankSummary::exchange_wait_s, &RankSummary::waiting_joules_per_batch})
        cells.push_back(Cell::of(rank_stat(*g, k, f)));
      t.rows.push_back(std::move(cells));
    }
  }
  t.notes.push_back(
      "compute + exchange wait is the rank's step; imbalance wait is the share of the exchange wait that an even "
      "finish would have saved. A rank's local batch under a policy that refines its shares online (auto, energy, edp) "
      "is its mean over "
      "repeats of the share it ended with.");
  add_emulation_notes(t, l.rows);
  return t;
}

Table split_models_table(const std::vector<ConfigGroup>& groups) {
  const HeteroLayout l(groups);
  Table t{"split_models",
          "Split models: predicted against measured",
          "For each configuration whose split came from the start-up probe's per-rank models (proportional, auto "
          "from the probe, energy, edp): the step time and joules per sample those models predicted at the shares "
          "the run ended with, beside what the run measured over its steady window, and measured / predicted. The "
          "models time forward, backward and the update of each rank alone; the probe adds the exchange's cost, "
          "from whole steps on every rank at the even split (runs written before it did leave the exchange, its "
          "exposed wait and the power its kernels draw beside backward, to a ratio above 1). Mean ± sample std over "
          "repeats (each ratio is taken per run). CSV: seconds, joules.",
          l.columns(),
          {},
          {}};
  t.columns.insert(t.columns.end(), {{"shares", "shares", false},
                                     seconds("predicted ({unit}/batch)", "predicted_seconds_per_batch"),
                                     seconds("measured ({unit}/batch)", "seconds_per_batch"),
                                     {"time measured / predicted", "seconds_ratio"},
                                     joules("predicted {unit}/sample", "predicted_joules_per_sample"),
                                     joules("measured {unit}/sample", "joules_per_sample"),
                                     {"energy measured / predicted", "joules_ratio"}});
  auto ratio = [](NumberFigure RunSummary::*measured, NumberFigure RunSummary::*predicted) -> RunFigure {
    return [=](const RunRecord& r) {
      const double m = (r.summary.*measured).value_or(kMissing), p = (r.summary.*predicted).value_or(kMissing);
      return std::isfinite(m) && std::isfinite(p) && p > 0 ? m / p : kMissing;
    };
  };
  std::vector<const ConfigGroup*> shown;
  for (const ConfigGroup* g : l.rows) {
    const Stat predicted = g->stat(&RunSummary::predicted_seconds_per_batch);
    if (predicted.null()) continue;  // no run of it recorded a prediction
    shown.push_back(g);
    auto cells = l.cells(*g);
    cells.push_back(Cell::of(shares_label(*g)));
    for (const Stat& s : {predicted, g->stat(&RunSummary::seconds_per_batch),
                          stat_by(*g, ratio(&RunSummary::seconds_per_batch, &RunSummary::predicted_seconds_per_batch)),
                          g->stat(&RunSummary::predicted_joules_per_sample), g->stat(&RunSummary::joules_per_sample),
                          stat_by(*g, ratio(&RunSummary::joules_per_sample, &RunSummary::predicted_joules_per_sample))})
      cells.push_back(Cell::of(s));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back(
      "Runs written before the probe timed the update predicted forward and backward alone; J/sample is null "
      "where a rank had no energy reading (CPU ranks).");
  add_emulation_notes(t, shown);
  return t;
}

std::string split_history_csv(const std::vector<ConfigGroup>& groups) {
  const HeteroLayout l(groups);
  std::string out = "net,batch,mix,split,variant,run_id,rank,speed,iteration,share,end_iteration\n";
  for (const ConfigGroup* g : refined_online_groups(groups)) {
    const RunRecord& r = *refined_online_run(*g);
    const double iterations = r.number(&RunSummary::iterations);
    const int64_t end = std::max(r.split.changes.back().iteration + 1,
                                 std::isnan(iterations) ? int64_t{0} : static_cast<int64_t>(iterations));
    const std::string config =
        fmt::format("{},{},{},{},{},{}", csv_field(g->net()), csv_field(g->key.at("global_batch")),
                    csv_field(mix_label(*g, l.noun)), csv_field(g->key.at("split")),
                    csv_field(variant_label(g->net(), HeteroLayout::identity(*g), l.varying)), csv_field(r.run_id));
    for (const SplitChange& c : r.split.changes)
      for (size_t k = 0; k < c.shares.size(); ++k)
        out += fmt::format("{},{},{},{},{},{}\n", config, k,
                           csv_field(k < r.ranks.size() ? speed_label(r.ranks[k]) : ""), c.iteration, c.shares[k], end);
  }
  return out;
}

}  // namespace cnnscale::report
