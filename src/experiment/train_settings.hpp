// The settings of `cnnscale train`, declared once in one table (settings_table.hpp says what an
// entry holds): the CLI (train_setting_fields.cpp binds each entry to its field), the experiment
// schema (fixed keys and matrix axes), the sweep's command lines, the recorded run configuration (train_steps.cpp describe_run)
// and the report's grouping are all made from it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiment/option_groups.hpp"
#include "experiment/settings_table.hpp"

namespace cnnscale {

using TrainSetting = Setting;

// Every train setting, in --help order.
const SettingTable& train_settings();
// The part the experiment reads in forms of its own, at its top level or as its own axes: the network,
// the run's length, the device, the precision, the measure mode and the whole-training figures' size
// (train_settings_top.cpp), appended to `all`.
void add_top_settings(SettingTable& all);
// The part of the table in the experiment's section `train`: how the steps run on a device
// (train_settings_run.cpp), appended to `all`.
void add_run_settings(SettingTable& all);
// The checkpoint and resume options, options of train alone (Setting::no_key): a run's own files
// (train_settings_run.cpp), appended to `all`.
void add_checkpoint_settings(SettingTable& all);
// The part in section `train` that says how a run is measured, fed and reported, none of it part of
// its identity (train_settings_run.cpp), appended to `all`.
void add_measure_settings(SettingTable& all);
// The part that are fields of the experiment's matrix.allreduce modes: how a data-parallel job
// exchanges its gradients (train_settings_parallel.cpp), appended to `all`.
void add_parallel_settings(SettingTable& all);
// The part in the experiment's section `dataset`: the data a run trains on (train_settings_data.cpp),
// appended to `all`.
void add_data_settings(SettingTable& all);
// The batch and the rank sets: matrix axes the experiment expands itself (train_settings_ranks.cpp),
// appended to `all`.
void add_rank_settings(SettingTable& all);
// The entry named `name`, or nullptr.
const TrainSetting* find_train_setting(const std::string& name);

// The seed of repeat `repeat` (1-based) under base seed `base`: repeat 1 has the base seed itself (the
// runs made before repeats varied keep their ids), later repeats a deterministic mix of both, in
// [0, 2^62) as the experiment's seed is.
int64_t repeat_seed(int64_t base, int64_t repeat);

// The value a recorded run configuration (run_config, as train records it) holds for `s`: its key,
// or for a solver setting the number after its label in the solver's description, for an augmentation
// setting its part of the augmentation's. Null when the run did not record it; its default where the
// rule leaves a default unrecorded.
nlohmann::json recorded_setting(const TrainSetting& s, const nlohmann::json& run_config);

}  // namespace cnnscale
