// The heterogeneous tables of `cnnscale report`: runs on unequal ranks (SM partitions, emulated
// stragglers) or with a split of the global batch other than even, compared per split policy, with
// each rank's busy and waiting time, and the data of the figure of the `auto` split's history.
#pragma once
#include <string>
#include <vector>

#include "experiment/report_data.hpp"
#include "experiment/report_table.hpp"

namespace cnnscale::report {

// Whether a configuration is a row of the heterogeneous table. Its runs recorded a split policy (the
// `split` figure; runs without it predate unequal ranks), it has more than one rank (one rank has
// nothing to split and waits for nobody), and its ranks are unequal (a `mix` figure) or its split is
// not even. An even split of equal ranks joins as the reference of a row that differs from it only
// in the split (a manual split of equal ranks is measured against it).
std::vector<const ConfigGroup*> hetero_groups(const std::vector<ConfigGroup>& groups);

// What the runs of `rows` measured of the hardware they stand for, one sentence per kind of mix among
// them, the one text of the tables' notes and the figures' (report_figure_notes.hpp): a mix of SM
// partitions and a CPU mix of slowdowns are emulations, and what each leaves out of a slower device
// (its memory system, its joules) is said; a mix of GPU models (different gpu_names) was measured
// as it is. Empty where no row is such a mix (equal ranks under another split).
std::vector<std::string> emulation_notes(const std::vector<const ConfigGroup*>& rows);
// Appends emulation_notes(rows) to t's notes.
void add_emulation_notes(Table& t, const std::vector<const ConfigGroup*>& rows);
// The configurations of hetero_groups whose split was refined online (auto, energy, edp) with a
// recorded history: the split_history figure's.
std::vector<const ConfigGroup*> refined_online_groups(const std::vector<ConfigGroup>& groups);

// One row per configuration of hetero_groups: samples/s, efficiency against the ideal combined
// throughput, J/batch, EDP per batch, imbalance and waiting joules, with ★ for the fastest, the fewest
// J/batch and the lowest EDP among the rows equal in everything but the split (network, batch, mix).
Table hetero_table(const std::vector<ConfigGroup>& groups);
// One row per rank of those configurations: its local batch, speed, compute and waiting seconds per
// batch and waiting joules (the rank_balance figure draws it).
Table hetero_ranks_table(const std::vector<ConfigGroup>& groups);
// One row per configuration of hetero_groups whose split came from the probe's models: the step time
// and J/sample they predicted at the final shares beside the measured ones, and measured / predicted
// (each per run). No rows where no run recorded a prediction.
Table split_models_table(const std::vector<ConfigGroup>& groups);

// The split history of the `auto` configurations as CSV, one line per (change, rank) of the first run
// (in path order) of each that recorded changes: net, batch, mix, split, variant, run_id, rank, speed,
// iteration, share, end_iteration (the run's last iteration + 1, where the last step ends). Only the
// header when there is none.
inline const std::string kSplitHistoryFile = "split_history.csv";
std::string split_history_csv(const std::vector<ConfigGroup>& groups);

}  // namespace cnnscale::report
