// The GPU-model comparison table of `cnnscale report` (see report_models.hpp). Configurations are
// matched on everything that identifies them but the GPU model, so a row compares like with like; the
// figures are the Time and Energy tables' (step time, in-step forward and backward, joules of all GPUs
// of the job), so that a row here reads the same as its rows there.
#include "experiment/report_models.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "experiment/report_layout.hpp"

namespace cnnscale::report {

namespace {

// A job on GPUs of one model, all ranks equal: a measurement of that model.
bool measures_one_model(const ConfigGroup& g) {
  return g.key.at("device") == "gpu" && !gpu_model(g).empty() && !is_gpu_mix(g) && !is_unequal(g);
}

// What identifies the configuration apart from the GPU model (the variant's keys without "gpu").
Identity identity_but_model(const ConfigGroup& g) {
  Identity id = variant_identity(g);
  id.erase("gpu");
  return id;
}

// One configuration and, per model, its runs (pooled: groups that differ only in keys irrelevant to
// their runs are one configuration here, as their variant labels are equal).
struct ModelRow {
  const ConfigGroup* first = nullptr;  // the net, GPU count and batch columns
  Identity identity;
  std::map<std::string, ConfigGroup> by_model;
};

struct ModelFigure {
  std::string header, csv;
  NumberFigure RunSummary::*figure;
  Quantity quantity;
  std::string unit_group;
};

// Time columns share one unit, joules another, so that the models' columns read side by side. The
// study's Table 10 has forward's and backward's joules apart: only measure=phases' isolated loops
// measure those, so their columns come where some run has them, named as the Energy table names them.
std::vector<ModelFigure> model_figures(const std::vector<ConfigGroup>& groups) {
  std::vector<ModelFigure> figures = {
      {"step {unit}/batch", "seconds_per_batch", &RunSummary::seconds_per_batch, Quantity::Seconds, "time"},
      {"forward in-step {unit}/batch", "forward_seconds_per_batch", &RunSummary::time_forward_s, Quantity::Seconds,
       "time"},
      {"backward in-step {unit}/batch", "backward_seconds_per_batch", &RunSummary::time_backward_s, Quantity::Seconds,
       "time"},
      {"{unit}/batch", "joules_per_batch", &RunSummary::joules_per_batch, Quantity::Joules, "energy"}};
  const bool loops = std::any_of(groups.begin(), groups.end(), [](const ConfigGroup& g) {
    return measures_one_model(g) && !g.stat(&RunSummary::energy_forward_j).null();
  });
  if (loops)
    figures.insert(figures.end(), {{"forward isolated-loop {unit}/batch", "forward_joules_per_batch",
                                    &RunSummary::energy_forward_j, Quantity::Joules, "energy"},
                                   {"backward isolated-loop {unit}/batch", "backward_joules_per_batch",
                                    &RunSummary::energy_backward_j, Quantity::Joules, "energy"}});
  return figures;
}

// (reference − model) / reference in %, from the ratio of the means (std propagated as for speedup).
Stat percent_less(const Stat& model, const Stat& reference) {
  const Stat ratio = speedup_of(model, reference, false);
  Stat out;
  if (ratio.null()) return out;
  out.mean = 100 * (1 - ratio.mean);
  out.std = 100 * ratio.std;
  out.n = ratio.n;
  return out;
}

}  // namespace

std::vector<std::string> gpu_models_of(const std::vector<ConfigGroup>& groups) {
  std::set<std::string> models;
  for (const ConfigGroup& g : groups)
    if (measures_one_model(g)) models.insert(gpu_model(g));
  return {models.begin(), models.end()};
}

Table gpu_models_table(const std::vector<ConfigGroup>& groups) {
  std::vector<ModelRow> all;
  std::map<std::vector<std::string>, size_t> index;  // (net, world size, batch, threads) + identity -> row
  for (const ConfigGroup& g : groups) {
    if (!measures_one_model(g)) continue;
    const Identity id = identity_but_model(g);
    std::vector<std::string> key = {g.net(), g.key.at("world_size"), g.key.at("global_batch"),
                                    g.key.at("threads_per_rank")};
    for (const auto& [k, v] : id) key.insert(key.end(), {k, v});
    auto [at, fresh] = index.emplace(key, all.size());
    if (fresh) all.push_back({&g, id, {}});
    ConfigGroup& pooled = all[at->second].by_model[gpu_model(g)];
    if (pooled.runs.empty()) pooled.key = g.key;
    pooled.runs.insert(pooled.runs.end(), g.runs.begin(), g.runs.end());
  }
  std::vector<const ModelRow*> rows;
  std::map<std::string, int> rows_of;  // model -> rows it is measured in
  for (const ModelRow& r : all)
    if (r.by_model.size() >= 2) {
      rows.push_back(&r);
      for (const auto& [model, g] : r.by_model) ++rows_of[model];
    }
  // The reference first (most rows; ties by name, as the map is sorted), then the others by name.
  std::vector<std::string> models = gpu_models_of(groups);
  const auto reference =
      std::max_element(models.begin(), models.end(),
                       [&](const std::string& a, const std::string& b) { return rows_of[a] < rows_of[b]; });
  std::rotate(models.begin(), reference, reference + 1);
  std::sort(models.begin() + 1, models.end());
  const std::string& ref = models.front();

  std::vector<std::pair<std::string, Identity>> identities;
  for (const ModelRow* r : rows) identities.emplace_back(r->first->net(), r->identity);
  const VaryingKeys varying = varying_keys(identities);
  const bool variant = any_varying(varying);
  const std::vector<ModelFigure> figures = model_figures(groups);

  Table t{kGpuModelsTable,
          "GPU models compared (Castro et al., Table 10)",
          fmt::format(
              "The same configuration (network, GPU count, global batch and every other identity key but the GPU "
              "model) measured on each GPU model in the results: the full training step's time per batch (slowest "
              "rank), in-step forward and backward time per batch (phase timers inside the step, as the Time "
              "table's in-step columns) and joules per batch (all GPUs of the job), mean ± sample std over repeats. "
              "Per model other than the reference, its difference from the reference in % = (reference − model) / "
              "reference × 100 (Castro et al.'s sign): positive where the model takes less time or energy than the "
              "reference, negative where it takes more. Reference: {} (the model measured in the most rows; ties by "
              "name). Only configurations measured on at least two models are rows. CSV: seconds, joules, percent; "
              "model k's columns end in _m<k> and gpu_m<k> names it (m1 is the reference).",
              ref),
          {},
          {},
          {}};
  t.columns = {{"network", "net", false}, {"GPUs", "gpus", false}, {"batch", "batch", false}};
  if (variant) t.columns.push_back({"variant", "variant", false});
  for (size_t k = 0; k < models.size(); ++k) {
    const std::string m = fmt::format("_m{}", k + 1);
    t.columns.push_back({k == 0 ? "GPU model (reference)" : "GPU model", "gpu" + m, false});
    t.columns.push_back({"runs", "runs" + m, false});
    for (const ModelFigure& f : figures)
      t.columns.push_back({f.header, f.csv + m, true, false, f.quantity, 1, f.unit_group});
    if (k > 0)
      for (const ModelFigure& f : figures) {
        // "step", "forward in-step", "joules", "forward isolated-loop joules"
        const std::string lead = f.header.substr(0, f.header.find('{'));
        const std::string what = f.quantity == Quantity::Joules ? lead + "joules" : lead.substr(0, lead.size() - 1);
        t.columns.push_back({what + " vs reference (%)", f.csv + "_vs_reference_percent" + m});
      }
  }
  for (const ModelRow* r : rows) {
    const ConfigGroup& g = *r->first;
    std::vector<Cell> cells = {Cell::of(g.net()), Cell::of(g.key.at("world_size")), Cell::of(g.key.at("global_batch"))};
    if (variant) cells.push_back(Cell::of(variant_label(g.net(), r->identity, varying)));
    const auto ref_group = r->by_model.find(ref);
    for (size_t k = 0; k < models.size(); ++k) {
      const auto it = r->by_model.find(models[k]);
      const bool measured = it != r->by_model.end();
      cells.push_back(Cell::of(models[k]));
      cells.push_back(Cell::of(std::to_string(measured ? it->second.runs.size() : 0)));
      for (const ModelFigure& f : figures) cells.push_back(Cell::of(measured ? it->second.stat(f.figure) : Stat{}));
      if (k > 0)
        for (const ModelFigure& f : figures)
          cells.push_back(Cell::of(measured && ref_group != r->by_model.end()
                                       ? percent_less(it->second.stat(f.figure), ref_group->second.stat(f.figure))
                                       : Stat{}));
    }
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back(
      "Step: seconds_per_batch; in-step forward and backward: time_forward_s and time_backward_s (each the slowest "
      "rank's, inside the full step; on several GPUs in-step backward leaves out the exposed gradient exchange, "
      "which the Time table's backward incl. exchange adds as the study does); joules per batch: joules_per_batch, "
      "the steady window's energy of all GPUs of the job per batch." +
      std::string(figures.size() > 4
                      ? " Forward and backward isolated-loop joules (measure=phases runs): energy_forward_j and "
                        "energy_backward_j, from loops run alone after training, as the Energy table's; never parts "
                        "of the step's joules."
                      : ""));
  t.notes.push_back(
      "The % is taken from the means; its std is propagated to first order from both means' relative stds. A "
      "model that did not run a row's configuration has no figures there (runs 0).");
  t.notes.push_back(
      "Left out: jobs on GPUs of more than one model or on an explicit GPU selection (gpu_mix), and unequal ranks "
      "(a mix, or a split other than even): none of them measures one model alone. Castro et al.'s 4-GPU rows ran "
      "2 Pascal and 2 Maxwell GPUs in one job; here such a job is in the heterogeneous tables, not this one.");
  if (rows.empty())
    t.notes.push_back(fmt::format("No configuration was measured on two or more of the GPU models ({}): no rows.",
                                  fmt::join(models, ", ")));
  else if (rows.size() < all.size())
    t.notes.push_back(
        fmt::format("{} configuration(s) measured on one model only are not rows.", all.size() - rows.size()));
  return t;
}

}  // namespace cnnscale::report
