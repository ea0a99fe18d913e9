// The tables of `cnnscale report`, one row per configuration (network × GPUs × global batch, plus a
// variant column when other identity keys differ within a network), in the form of the study's
// Tables 4–9 and 11: time, energy, whole training (EDP), efficiency, accuracy, strong scaling (long,
// and wide by GPU count) and the phase breakdown.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "experiment/report_baseline.hpp"
#include "experiment/report_data.hpp"
#include "experiment/report_table.hpp"

namespace cnnscale::report {

Table time_table(const std::vector<ConfigGroup>& groups);        // study Tables 4/7
Table energy_table(const std::vector<ConfigGroup>& groups);      // study Tables 5/8
Table whole_table(const std::vector<ConfigGroup>& groups);       // study Tables 6/9, best EDP marked
Table efficiency_table(const std::vector<ConfigGroup>& groups);  // study Table 11
Table accuracy_table(const std::vector<ConfigGroup>& groups);    // study Tables 12/13
Table scaling_table(const std::vector<ConfigGroup>& groups);     // speedup, parallel efficiency
// Weak scaling: each multi-rank configuration against the 1-rank run of its per-rank batch; rows
// only where that run exists (an empty table where none does).
Table weak_scaling_table(const std::vector<ConfigGroup>& groups);
// Wide: one row per network × global batch [× variant], a column group per GPU count in the data
// (samples/s, speedup, J/batch, EDP), as the study lays out Tables 4–9; gpu_mix runs and unequal
// ranks (is_unequal) left out.
Table by_gpus_table(const std::vector<ConfigGroup>& groups);
Table phases_table(const std::vector<ConfigGroup>& groups);  // per-phase ms per batch
// Another framework's throughput beside the runs' (report_baseline.hpp): one row per configuration
// of equal ranks and baseline point of its network, precision, global batch and GPU count, with
// samples/s on both sides, their ratio, and each side's strong and weak efficiency from its own
// 1-GPU measurements; no rows where nothing matches.
Table baseline_table(const std::vector<ConfigGroup>& groups, const std::vector<BaselineFile>& files);

// The note on BLAS threads, one sentence (the one text of the scaling tables' note and of their
// figures'): where CPU ranks ran another thread count each than the 1-rank run they are compared
// with (Strong: at the same global batch; Weak: at the per-rank batch), each pair, e.g. "1 rank ran
// 2 BLAS threads, 2 ranks 1 each (2 in all)". "" where no pair differs.
enum class Scaling { Strong, Weak };
std::string thread_note(const std::vector<ConfigGroup>& groups, Scaling scaling);

// All of the above, in that order, the GPU models compared (report_models.hpp) where the runs measured
// more than one, then the heterogeneous tables (report_hetero.hpp) when any
// configuration qualifies for them.
// target_top1: time_to_accuracy's target for every network (unset: each network's own, see the .cpp).
// baselines: `report --baseline` files; their table follows the scaling tables (ConfigError when
// none of their points matches a configuration: the file names another study).
std::vector<Table> build_tables(const std::vector<ConfigGroup>& groups, std::optional<double> target_top1 = {},
                                const std::vector<BaselineFile>& baselines = {});

}  // namespace cnnscale::report
