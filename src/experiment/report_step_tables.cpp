// The report's tables of the training step's time, energy and efficiency (the study's Tables 4/7,
// 5/8 and 11; declared in report_tables.hpp). Two measurements of forward and backward meet here and
// are named apart everywhere: in-step time (phase timers inside the full training step; with data,
// h2d, exposed allreduce, update and other they partition the step) and, under measure=phases, the
// isolated loops (forward only, forward+backward and full step, each run alone after training),
// whose phases add up to the isolated full-step loop, never to the step: no table sums them as if
// they did.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "experiment/report_layout.hpp"
#include "experiment/report_tables.hpp"

namespace cnnscale::report {

namespace {

bool any_loops(const std::vector<ConfigGroup>& groups) {
  for (const ConfigGroup& g : groups)
    if (uses_loops(g)) return true;
  return false;
}

bool any_ranks(const std::vector<ConfigGroup>& groups) {
  for (const ConfigGroup& g : groups)
    if (g.world_size() > 1) return true;
  return false;
}

// The study's backward: on several GPUs it includes the gradient exchange that overlaps it. In-step
// backward already spans the overlapped part in wall time; the exposed allreduce is the rest, until
// the gradients are exchanged. Both of one rank's step (the Phase breakdown's), so that the sum is
// of parts of one step; one rank's exposed allreduce is 0.
double backward_with_exchange(const RunRecord& r) {
  const auto b = r.step.seconds.find("backward"), a = r.step.seconds.find("allreduce");
  return b != r.step.seconds.end() && a != r.step.seconds.end() ? b->second + a->second : kMissing;
}

// A per-run ratio of two figures (null where either is missing or the divisor is not positive).
RunFigure ratio(NumberFigure RunSummary::*num, NumberFigure RunSummary::*den, double scale = 1) {
  return [num, den, scale](const RunRecord& r) {
    const double d = r.number(den);
    return d > 0 ? scale * r.number(num) / d : kMissing;
  };
}

RunFigure per_second(NumberFigure RunSummary::*seconds) {
  return [seconds](const RunRecord& r) {
    const double s = r.number(seconds);
    return s > 0 ? r.number(&RunSummary::global_batch) / s : kMissing;
  };
}

// A per-batch figure scaled to the whole training: × whole_iterations (iterations per epoch × whole
// epochs), as the summary's own whole-training seconds and joules are.
RunFigure whole(NumberFigure RunSummary::*per_batch) {
  return [per_batch](const RunRecord& r) { return r.number(per_batch) * r.number(&RunSummary::whole_iterations); };
}

}  // namespace

Table time_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  const bool loops = any_loops(groups), ranks = any_ranks(groups);
  Table t = l.start(
      "time", "Time (Castro et al., Tables 4/7)",
      "Time per batch of the full training step (slowest rank), samples per second and whole-training time; "
      "forward and backward as in-step time (phase timers inside the full training step: with data, h2d, exposed "
      "allreduce, update and other they partition the step, see the Phase breakdown)" +
          std::string(ranks ? "; backward incl. exchange, the study's definition (in-step backward + exposed "
                              "allreduce)"
                            : "") +
          (loops ? "; isolated-loop forward and backward (measure=phases: loops run alone after training, not parts "
                   "of the step, so never to be added to it or to the in-step figures)"
                 : "") +
          "; the peak device memory of a rank; mean ± sample std over repeats. CSV: seconds, GiB.");
  std::vector<std::pair<Column, RunFigure>> figures = {
      {seconds("step {unit}/batch", "seconds_per_batch"), scaled(&RunSummary::seconds_per_batch, 1)},
      {{"samples/s", "samples_per_s"}, scaled(&RunSummary::samples_per_s, 1)},
      {seconds("whole training ({unit})", "whole_training_seconds"), scaled(&RunSummary::whole_training_seconds, 1)},
      {seconds("forward in-step {unit}/batch", "forward_seconds_per_batch"), scaled(&RunSummary::time_forward_s, 1)},
      {seconds("backward in-step {unit}/batch", "backward_seconds_per_batch"),
       scaled(&RunSummary::time_backward_s, 1)}};
  if (ranks)
    figures.push_back({seconds("backward incl. exchange, in-step (study's definition) {unit}/batch",
                               "backward_with_exchange_seconds_per_batch"),
                       backward_with_exchange});
  figures.push_back(
      {seconds("forward in-step whole ({unit})", "forward_whole_seconds"), whole(&RunSummary::time_forward_s)});
  figures.push_back(
      {seconds("backward in-step whole ({unit})", "backward_whole_seconds"), whole(&RunSummary::time_backward_s)});
  if (loops) {
    figures.push_back({seconds("forward isolated-loop {unit}/batch", "isolated_forward_seconds_per_batch"),
                       scaled(&RunSummary::loop_forward_s, 1)});
    figures.push_back({seconds("backward isolated-loop {unit}/batch", "isolated_backward_seconds_per_batch"),
                       scaled(&RunSummary::loop_backward_s, 1)});
  }
  // Results written before the backends counted their memory have none: no column of dashes then.
  if (any_value(groups, &RunSummary::peak_memory_bytes))
    figures.push_back(
        {{"peak memory (GiB)", "peak_memory_gib"}, scaled(&RunSummary::peak_memory_bytes, 1.0 / (1 << 30))});
  for (const auto& f : figures) t.columns.push_back(f.first);
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (const auto& f : figures) cells.push_back(Cell::of(stat_by(g, f.second)));
    t.rows.push_back(std::move(cells));
  }
  t.notes.push_back(
      "In-step forward/backward: time_forward_s and time_backward_s (phase timers inside the full step, the slowest "
      "rank's mean over the steady iterations); whole-training in-step time = time per batch × whole_iterations.");
  if (ranks)
    t.notes.push_back(
        "Backward incl. exchange = in-step backward + exposed allreduce of the Phase breakdown's rank (the slowest): "
        "from the start of backward until the gradients are exchanged, as the study's backward on several devices "
        "includes "
        "the allreduce that overlaps it (the overlapped part is inside in-step backward's wall time; the exposed "
        "allreduce is what remains). One rank exchanges nothing: its backward alone. The in-step forward/backward "
        "columns are each phase's slowest rank (time_*_s), so on several ranks they can differ from the Phase "
        "breakdown's, which are all of one rank.");
  if (loops) {
    int rows = 0;
    for (const ConfigGroup& g : groups) rows += uses_loops(g) ? 1 : 0;
    t.notes.push_back(fmt::format(
        "Isolated-loop forward/backward in {} row(s) with measure=phases: loop_forward_s and loop_backward_s, from "
        "a forward-only and a forward+backward loop run alone after training (fixed batch, no data loading, no "
        "exchange), backward = (forward+backward loop) − forward loop. They are not parts of the step: their sum "
        "need not equal the step time and may exceed it; the in-step figures of the Phase breakdown partition the "
        "step. Isolated-loop backward never includes the exchange.",
        rows));
  }
  if (any_value(groups, &RunSummary::peak_memory_bytes))
    t.notes.push_back(
        "Peak memory: the most device memory (tensors and workspaces, GiB = 2^30 bytes) one rank's backend held "
        "at once, the largest over the ranks.");
  note_if_all_null(t, groups, "seconds_per_batch", "no timed iterations");
  return t;
}

Table energy_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  const bool loop_energy = any_value(groups, &RunSummary::energy_forward_j);
  const bool loop_time = any_value(groups, &RunSummary::loop_forward_s);
  Table t = l.start(
      "energy", "Energy (Castro et al., Tables 5/8)",
      std::string(l.noun.many == "GPUs" ? "Energy per batch and power of the full training step (summed over all "
                                          "GPUs of the job)"
                  : all_cpu(groups)     ? "Energy per batch and power of the full training step (RAPL package + "
                                          "DRAM of each host)"
                                        : "Energy per batch and power of the full training step (GPU runs: all GPUs "
                                          "of the job; CPU runs: RAPL package + DRAM of each host)") +
          ", whole-training energy" +
          (loop_energy || loop_time
               ? "; then, from the isolated loops of measure=phases (forward only, forward+backward, full step, each "
                 "run alone after training), each phase's isolated-loop joules per batch, power (its joules / its "
                 "isolated-loop seconds) and samples/s (global batch / its isolated-loop seconds), and forward and "
                 "backward isolated-loop whole training (the isolated-loop joules per batch × the whole training's "
                 "iterations: a per-batch figure scaled to the whole training, not measured over it). Isolated-loop "
                 "forward, backward and update + exchange add up to the isolated full-step loop, not to the step's "
                 "joules per batch"
               : "") +
          ". CSV: joules, watts.");
  using F = std::pair<Column, RunFigure>;
  auto watts = [](std::string header, std::string csv) -> Column {
    return {std::move(header), std::move(csv), true, false, Quantity::Watts};
  };
  std::vector<F> figures = {
      {joules("{unit}/batch", "joules_per_batch"), scaled(&RunSummary::joules_per_batch, 1)},
      {watts("power ({unit})", "watts"), scaled(&RunSummary::watts, 1)},
      {joules("whole training ({unit})", "whole_training_joules"), scaled(&RunSummary::whole_training_joules, 1)}};
  if (loop_energy) {
    const std::vector<F> isolated = {
        {joules("forward isolated-loop {unit}/batch", "forward_joules_per_batch"),
         scaled(&RunSummary::energy_forward_j, 1)},
        {joules("backward isolated-loop {unit}/batch", "backward_joules_per_batch"),
         scaled(&RunSummary::energy_backward_j, 1)},
        {joules("update + exchange isolated-loop {unit}/batch", "isolated_update_exchange_joules_per_batch"),
         scaled(&RunSummary::energy_update_allreduce_j, 1)},
        {joules("full step isolated-loop {unit}/batch", "isolated_full_step_joules_per_batch"),
         scaled(&RunSummary::energy_full_step_j, 1)},
        {joules("forward isolated-loop whole training ({unit})", "isolated_forward_whole_joules"),
         whole(&RunSummary::energy_forward_j)},
        {joules("backward isolated-loop whole training ({unit})", "isolated_backward_whole_joules"),
         whole(&RunSummary::energy_backward_j)},
        {watts("forward isolated-loop power ({unit})", "isolated_forward_watts"),
         ratio(&RunSummary::energy_forward_j, &RunSummary::loop_forward_s)},
        {watts("backward isolated-loop power ({unit})", "isolated_backward_watts"),
         ratio(&RunSummary::energy_backward_j, &RunSummary::loop_backward_s)},
        {watts("update + exchange isolated-loop power ({unit})", "isolated_update_exchange_watts"),
         ratio(&RunSummary::energy_update_allreduce_j, &RunSummary::loop_update_allreduce_s)}};
    figures.insert(figures.end(), isolated.begin(), isolated.end());
  }
  if (loop_time) {
    figures.push_back({{"forward isolated-loop samples/s", "isolated_forward_samples_per_s"},
                       per_second(&RunSummary::loop_forward_s)});
    figures.push_back({{"backward isolated-loop samples/s", "isolated_backward_samples_per_s"},
                       per_second(&RunSummary::loop_backward_s)});
  }
  if (any_value(groups, &RunSummary::cpu_package_joules_per_batch))
    figures.push_back({joules("CPU package {unit}/batch", "cpu_package_joules_per_batch"),
                       scaled(&RunSummary::cpu_package_joules_per_batch, 1)});
  if (any_value(groups, &RunSummary::cpu_dram_joules_per_batch))
    figures.push_back({joules("CPU DRAM {unit}/batch", "cpu_dram_joules_per_batch"),
                       scaled(&RunSummary::cpu_dram_joules_per_batch, 1)});
  for (const auto& f : figures) t.columns.push_back(f.first);
  for (const ConfigGroup& g : groups) {
    auto cells = l.row(g);
    for (const auto& f : figures) cells.push_back(Cell::of(stat_by(g, f.second)));
    t.rows.push_back(std::move(cells));
  }
  if (loop_energy)
    t.notes.push_back(
        "Isolated-loop joules: energy_forward_j, energy_backward_j, energy_update_allreduce_j and energy_full_step_j "
        "of summary.json; update + exchange = full-step loop − forward+backward loop: the update and, on several "
        "ranks, the gradient exchange, which the loops cannot part. The study's backward on several devices includes "
        "the "
        "exchange; here its joules are in update + exchange, so isolated-loop backward + update + exchange bounds "
        "the study's backward energy from above. Isolated-loop whole training = energy_forward_j or "
        "energy_backward_j × whole_iterations (iterations per epoch × whole_epochs), as the Time table's "
        "whole-training seconds: the loops' per-batch joules scaled to the whole training, not energy measured over "
        "it.");
  note_if_all_null(t, groups, "joules_per_batch",
                   all_cpu(groups) ? "no energy counters were readable: CPU run without NVML/RAPL"
                                   : "no energy counters were readable (NVML unavailable)");
  return t;
}

Table efficiency_table(const std::vector<ConfigGroup>& groups) {
  Layout l{groups};
  Table t = l.start(
      "efficiency", "Efficiency (Castro et al., Table 11)",
      "Training GFLOPS = 6 × forward multiply-adds (MACs) per sample × samples/s / 1e9 (2 operations per MAC, and "
      "training counted as 3 forward passes: forward, backward-data, backward-weights; convolution and fully "
      "connected layers only), GFLOPS per watt (GFLOPS / the step's power) and joules per sample. The study counts "
      "differently (its Section 4, Eqs. 1–10): one operation per multiply-accumulate, plus the bias adds and the "
      "operations of pooling, ReLU, dropout, batch normalisation and softmax, per forward sample (its Table 1); its "
      "Table 11 includes forward and backward without stating the backward's count. That count is not in the "
      "results, so these GFLOPS compare with the study's in trend, not one to one.");
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

}  // namespace cnnscale::report
