// Builders of the per-configuration report tables (see report_tables.hpp): whole training, accuracy
// and the phase breakdown; time, energy and efficiency are report_step_tables.cpp, the scaling tables
// report_scaling.cpp.
// Figures derived per run (whole-training forward seconds, unit changes) are computed per run first
// and then averaged, so their std is the spread over repeats.
#include "experiment/report_tables.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "experiment/report_hetero.hpp"
#include "experiment/report_layout.hpp"
#include "experiment/report_models.hpp"

namespace cnnscale::report {

Table whole_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("whole", "Whole training, energy and EDP (Castro et al., Tables 6/9)",
                    "Whole-training time, energy and energy-delay product (EDP = energy × time; MJ·ks = 1e9 J·s); "
                    "★ marks the lowest mean EDP per network. CSV: ks, MJ, MJ·ks as in Castro et al.");
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
  // Move-assigned, not `= "1"`: GCC 12 reports a false -Wrestrict on the literal assignment here.
  for (const auto& [net, b] : best) t.rows[b.second].back().text = std::string("1");
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

// The test set a run's top-1/top-5 were measured on, as the data sets name their splits: the test
// split of the data it trained on (fashion-mnist/train -> fashion-mnist/test; a shard folder's
// NAME/train (shards in DIR) -> NAME/test (shards in DIR)), whole, or its first N samples where the
// run's command line gave --test-samples N (train records no setting of it). A training subset's
// "[:N]" says nothing of the test split. "" where the name has no split (synthetic data, image lists).
namespace {
std::string tested_on(const RunRecord& r) {
  std::string data = r.summary.data.value_or("");
  if (!data.empty() && data.back() == ']' && data.rfind('[') != std::string::npos) data.erase(data.rfind('['));
  const size_t split = data.find("/train");
  if (split == std::string::npos || (split + 6 < data.size() && data[split + 6] != ' ')) return "";
  data.replace(split, 6, "/test");
  const std::vector<std::string> argv = r.provenance ? r.provenance->command_line : std::vector<std::string>{};
  std::string samples;
  for (size_t i = 0; i < argv.size(); ++i)
    if (argv[i] == "--test-samples" && i + 1 < argv.size())
      samples = argv[i + 1];
    else if (argv[i].rfind("--test-samples=", 0) == 0)
      samples = argv[i].substr(15);
  return samples.empty() || samples == "-1" ? data : fmt::format("{}, its first {} samples", data, samples);
}
}  // namespace

Table accuracy_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  std::vector<std::string> test_sets;  // of the runs with a test top-1, each once, in row order
  for (const ConfigGroup& g : groups)
    for (const RunRecord* r : g.runs)
      if (const std::string t = tested_on(*r); !t.empty() && std::isfinite(r->number(&RunSummary::test_top1)) &&
                                               std::find(test_sets.begin(), test_sets.end(), t) == test_sets.end())
        test_sets.push_back(t);
  // "trained on", not "data": the column names the training data (part of what identifies a
  // configuration), which a reader would otherwise take for the set the accuracy was measured on.
  Table t = l.start("accuracy", "Accuracy (Castro et al., Tables 12/13)",
                    "Test-set figures: top-1 and top-5 accuracy (%) and test loss at the end of the run, measured "
                    "on the test split of the data set the run trained on" +
                        (test_sets.empty() ? std::string() : fmt::format(" ({})", fmt::join(test_sets, "; "))) +
                        "; final loss: the last training loss. trained on: the training data, part of what "
                        "identifies a configuration; epochs: how long the run trained (iterations / iterations per "
                        "epoch; fewer than 1 is part of an epoch).");
  t.columns.insert(t.columns.end(), {{"trained on", "data", false},
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

Table phases_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start("phases", "Phase breakdown (in-step time)",
                    "In-step time per batch in each part of the full training step of the slowest rank (the rank "
                    "with the largest mean iteration time; mean over its steady iterations). The parts partition "
                    "the step: data, h2d, forward, backward, exposed allreduce, update and other add up to total. "
                    "measure=phases' isolated-loop figures (Time and Energy tables) are other measurements and no "
                    "part of this sum. CSV: ms.");
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
  t.columns.push_back({"input wait (%)", "input_wait_percent"});
  int rescaled = 0;
  double worst = 0;
  std::vector<std::string> input_bound;
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
    cells.push_back(Cell::of(stat_by(g, scaled(&RunSummary::input_wait_share, 100))));
    for (const RunRecord* r : g.runs)
      if (r->step.excess > 0) ++rescaled, worst = std::max(worst, r->step.excess / (r->step.total + r->step.excess));
    if (std::any_of(g.runs.begin(), g.runs.end(),
                    [](const RunRecord* r) { return r->number(&RunSummary::input_bound) == 1.0; }))
      input_bound.push_back(
          fmt::format("{} at global batch {:g} on {:g} rank(s)", g.net(), g.global_batch(), g.world_size()));
    t.rows.push_back(std::move(cells));
  }
  if (!input_bound.empty())
    t.notes.push_back(fmt::format(
        "Input-bound ({} of {} configurations: the step waits for its batch more than {:.0f} % of the time, so "
        "these figures measure the input pipeline as much as the network; more loader threads or shards would "
        "speed them up): {}.",
        input_bound.size(), groups.size(), 100 * kInputBoundShare, fmt::join(input_bound, "; ")));
  t.notes.push_back(
      "exposed allreduce: the time from the end of backward until the gradients are exchanged (what the step "
      "waits for communication); other: total minus the measured parts (what no phase timer covers, e.g. the "
      "step's bookkeeping). comm busy is the time communication ran, overlapping the other parts: not part of the "
      "sum.");
  if (rescaled)
    t.notes.push_back(fmt::format(
        "In {} run(s) the measured parts summed past the total (by up to {:.1f}%: the host-clock data wait overlaps "
        "device work on GPUs, or, without a timeline, the parts are maxima of different ranks); they were scaled to "
        "the total, other = 0.",
        rescaled, 100 * worst));
  note_if_all_null(t, groups, "time_total_s", "no phase timings were recorded");
  return t;
}

// The first epoch of a run whose test top-1 reaches `target` (null when none does).
const EpochRecord* first_reaching(const RunRecord& r, double target) {
  for (const EpochRecord& e : r.epochs)
    if (std::isfinite(e.top1) && e.top1 >= target) return &e;
  return nullptr;
}

double best_top1(const RunRecord& r) {
  double best = kMissing;
  for (const EpochRecord& e : r.epochs)
    if (std::isfinite(e.top1)) best = std::isfinite(best) ? std::max(best, e.top1) : e.top1;
  return best;
}

// Time and energy to a test top-1: `given` for every network, else each network's highest that every
// configuration reaches on average (the lowest of their mean best top-1, rounded down to 0.1 %).
Table time_to_accuracy_table(const std::vector<ConfigGroup>& groups, std::optional<double> given) {
  Layout l{groups};
  Table t = l.start(
      "time_to_accuracy", "Time and energy to accuracy",
      std::string(given ? "The target is the test top-1 given to report (--target-top1)"
                        : "Per network, the target is the highest test top-1 every configuration reaches on average "
                          "(the lowest of their mean best top-1, rounded down to 0.1 %)") +
          "; per run, the first epoch whose end-of-epoch test top-1 "
          "reaches it: the epochs, the training seconds to that epoch's end (wall time, evaluations and checkpoints "
          "left out) and the energy (that epoch's iterations × the steady window's joules per batch); mean ± std over "
          "the runs that reach it.");
  t.columns.insert(t.columns.end(), {{"target top-1 (%)", "target_top1_percent", false},
                                     {"reached", "reached", false},
                                     {"epochs", "epochs"},
                                     seconds("time ({unit})", "seconds"),
                                     joules("energy ({unit})", "joules")});
  std::map<std::string, double> target;  // net -> lowest mean best top-1
  for (const ConfigGroup& g : groups) {
    const Stat best = stat_by(g, [](const RunRecord& r) { return best_top1(r); });
    if (best.null()) continue;
    auto [it, fresh] = target.emplace(g.net(), best.mean);
    if (!fresh) it->second = std::min(it->second, best.mean);
  }
  for (auto& [net, v] : target) v = given ? *given : std::floor(v * 1000.0) / 1000.0;
  for (const ConfigGroup& g : groups) {
    auto it = target.find(g.net());
    if (it == target.end()) continue;
    const double goal = it->second;
    auto cells = l.row(g);
    int reached = 0, with_epochs = 0;
    for (const RunRecord* r : g.runs) {
      with_epochs += r->epochs.empty() ? 0 : 1;
      reached += first_reaching(*r, goal) ? 1 : 0;
    }
    auto at_target = [goal](const std::function<double(const RunRecord&, const EpochRecord&)>& f) {
      return [goal, f](const RunRecord& r) {
        const EpochRecord* e = first_reaching(r, goal);
        return e ? f(r, *e) : kMissing;
      };
    };
    cells.push_back(Cell::of(fmt::format("{:.1f}", 100 * goal)));
    cells.push_back(Cell::of(fmt::format("{} of {}", reached, with_epochs)));
    cells.push_back(Cell::of(
        stat_by(g, at_target([](const RunRecord&, const EpochRecord& e) { return static_cast<double>(e.epoch); }))));
    cells.push_back(Cell::of(stat_by(g, at_target([](const RunRecord&, const EpochRecord& e) { return e.seconds; }))));
    cells.push_back(Cell::of(stat_by(g, at_target([](const RunRecord& r, const EpochRecord& e) {
                                       return static_cast<double>(e.iteration) *
                                              r.number(&RunSummary::joules_per_batch);
                                     }))));
    t.rows.push_back(std::move(cells));
  }
  return t;
}

std::vector<Table> build_tables(const std::vector<ConfigGroup>& groups, std::optional<double> target_top1,
                                const std::vector<BaselineFile>& baselines) {
  std::vector<Table> tables = {time_table(groups),       energy_table(groups),   whole_table(groups),
                               efficiency_table(groups), accuracy_table(groups), scaling_table(groups),
                               by_gpus_table(groups),    phases_table(groups)};
  // Unequal ranks and mixes of GPU models are rows of the per-configuration tables too: what their
  // figures measured goes with them (by_gpus leaves them out).
  std::vector<const ConfigGroup*> all;
  for (const ConfigGroup& g : groups) all.push_back(&g);
  for (Table& t : tables)
    if (t.name == "time" || t.name == "energy" || t.name == "whole" || t.name == "efficiency" || t.name == "scaling" ||
        t.name == "phases")
      add_emulation_notes(t, all);
  // Only where some configuration has the 1-rank run of its per-rank batch.
  if (Table weak = weak_scaling_table(groups); !weak.rows.empty()) tables.push_back(std::move(weak));
  // Only where the runs measured more than one GPU model.
  if (gpu_models_of(groups).size() > 1) tables.push_back(gpu_models_table(groups));
  if (!baselines.empty()) {
    Table versus = baseline_table(groups, baselines);
    if (versus.rows.empty()) {
      size_t points = 0;
      for (const BaselineFile& f : baselines) points += f.points.size();
      throw_config(
          "--baseline {}: none of its {} measurement(s) has a configuration of the runs with the same "
          "network, precision, global batch and GPU count",
          baselines.front().path, points);
    }
    tables.push_back(std::move(versus));
  }
  // Only where runs were tested after their epochs.
  if (Table tta = time_to_accuracy_table(groups, target_top1); !tta.rows.empty()) tables.push_back(std::move(tta));
  // Only where unequal ranks were run: a plain sweep's report has no empty heterogeneous table.
  if (!hetero_groups(groups).empty()) {
    tables.push_back(hetero_table(groups));
    tables.push_back(hetero_ranks_table(groups));
    if (Table models = split_models_table(groups); !models.rows.empty()) tables.push_back(std::move(models));
  }
  return tables;
}

}  // namespace cnnscale::report
