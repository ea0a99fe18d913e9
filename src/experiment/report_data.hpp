// The data side of `cnnscale report`: find the complete run folders under a results directory, read
// their summaries, and group runs that differ only by repeat into configurations with mean, sample
// standard deviation and count per figure. The tables (report_tables.hpp) are built from these.
#pragma once
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "experiment/report_phases.hpp"
#include "experiment/train_settings.hpp"
#include "io/measure_mode.hpp"
#include "io/provenance.hpp"
#include "io/run_results.hpp"

namespace cnnscale::report {

// One complete run folder (a folder holding run.h5; *.partial folders are never listed).
struct RunRecord {
  std::string folder;  // the run folder
  std::string run_id;
  RunSummary summary;
  std::map<std::string, std::string> methods;
  size_t power_samples = 0;  // /power samples over all its GPUs (0: CPU run, no NVML)
  StepPartition step;        // the slowest rank's iteration split into phases (report_phases.hpp)
  std::vector<RankSummary> ranks;  // each rank's own figures (the heterogeneous tables' per-rank view)
  SplitRecord split;               // the batch split's history (the split figure)
  std::string nccl_env;            // /system nccl_env ("" when null: no NCCL, or not recorded)
  std::vector<EpochRecord> epochs;  // /epochs: test accuracy and training seconds per epoch
  std::string config_text;          // /config/text: the recorded settings (runs.csv)
  // The configuration train recorded (the "run:" line of /config; null for files without one): the
  // train settings' values (train_settings.hpp) are read from it.
  nlohmann::json run_config;
  std::optional<Provenance> provenance;  // /provenance (nullopt for files written before it was recorded)

  double number(NumberFigure RunSummary::*figure) const { return (summary.*figure).value_or(kMissing); }
  // A figure by its summary name (the grouping keys, kGroupKeys): "" when missing or null; numbers printed.
  std::string text(const std::string& key) const;
};

// Summary keys that identify a configuration: runs equal in all of them are repeats of one
// configuration. The seed, the run id and the tags (tag.repeat, sweep hashes) are left out on purpose,
// except tag.gpu_mix: a sweep's explicit rank set (--gpus 0,2) on GPUs of one model has the same
// gpu_names as the plain run on GPUs 0,1, but is another configuration. threads_per_rank (CPU runs'
// BLAS threads) is shown in a column of its own, like world_size, not as a variant. split and mix
// (unequal ranks) identify too: an `auto` run is no repeat of an `even` one; a `manual` split's key
// carries its shares ("manual 40+24"), which the user chose, while the shares other policies end
// with are their outcome and vary between repeats. precision and allreduce_dtype (mixed precision)
// identify too; runs that predate them read as fp32. After them, the report label of every train
// setting that has one (train_settings.hpp): lr, momentum, ..., seed (a sweep's runs by the base seed
// of their point, so that repeats of varied seeds stay one configuration).
extern const std::vector<std::string> kGroupKeys;
// The run's recorded configuration in a run.h5 /config text ("run: {...}"), or null.
nlohmann::json run_config_of(const std::string& config_text);
// "seeds: vary" or "seeds: fixed" where every sweep run says (tag seeds) the same; "seeds: mixed" where
// they differ; "" where no run says.
std::string seeds_mode(const std::vector<RunRecord>& runs);

// mean, sample standard deviation (n - 1; NaN for n < 2), min and max over the non-null values.
struct Stat {
  double mean = kMissing;
  double std = kMissing;
  double min = kMissing;
  double max = kMissing;
  int n = 0;  // number of non-null values
  bool null() const { return n == 0; }
};
Stat stat_of(const std::vector<double>& values);  // NaNs are skipped

// The repeats of one configuration.
struct ConfigGroup {
  std::map<std::string, std::string> key;  // kGroupKeys -> value as text
  std::vector<const RunRecord*> runs;

  std::string net() const { return key.at("net"); }
  // The runs' --measure; nullopt for a name this build does not know (results of another version).
  std::optional<MeasureMode> measure() const { return measure_mode_from_name(key.at("measure")); }
  double global_batch() const;
  double world_size() const;
  Stat stat(NumberFigure RunSummary::*figure) const;  // over the runs' values of that figure
  // First non-empty method string of the key among the runs ("" when none).
  std::string method(const std::string& summary_key) const;
};

// Every complete run folder under `results_dir`, recursively, sorted by path. A folder that holds
// run.h5 but cannot be read is skipped with a warning (counted in `unreadable`); a run whose status
// is "interrupted" (stopped by a signal; its figures cover only the steps that ran) is left out and
// its folder listed in `interrupted`. Throws a ConfigError when `results_dir` is not a readable
// directory.
// The *.json files directly inside every folder named `folder` under `results_dir` (a tool's own
// results, e.g. allreduce/ or infer/ beside train's run folders), sorted. A writer's temporary
// files are hidden (.name.tmp) and never taken; *.partial run folders are not entered.
std::vector<std::filesystem::path> find_json_files(const std::string& results_dir, const std::string& folder);
// Every file called `name` under `results_dir` (hidden and *.partial folders skipped), sorted.
std::vector<std::filesystem::path> find_json_files_named(const std::string& results_dir, const std::string& name);

std::vector<RunRecord> scan_runs(const std::string& results_dir, int* unreadable = nullptr,
                                 std::vector<std::string>* interrupted = nullptr);

// Groups runs by kGroupKeys; groups ordered by net, device, precision, global batch, world size,
// then the remaining keys.
std::vector<ConfigGroup> group_runs(const std::vector<RunRecord>& runs);

// What the parallel units are called: GPUs when every run is a GPU run, else ranks (CPU ranks; a GPU
// run has one rank per GPU, so "ranks" stays true for a mix of both).
struct DeviceNoun {
  std::string one = "rank", many = "ranks";
  std::string count(double n) const;  // "1 rank", "2 ranks"
};
DeviceNoun device_noun(const std::vector<ConfigGroup>& groups);

// The distinct GPU names of a group's ranks ({""} on CPU).
std::set<std::string> gpu_name_set(const ConfigGroup& group);
// The GPU model of a group: the name every rank's GPU has ("" on CPU), or the comma-joined names
// when they differ.
std::string gpu_model(const ConfigGroup& group);
// A run on an explicit GPU selection (tag.gpu_mix, from a sweep's matrix.gpu_mix) or on GPUs of
// different models: not a plain point of an N-GPU scaling series.
bool is_gpu_mix(const ConfigGroup& group);
// Ranks of unequal speed (a mix figure: SM partitions, emulated stragglers) or a split other than
// even: not a plain point of an N-GPU scaling series either; the heterogeneous table shows them.
bool is_unequal(const ConfigGroup& group);
// A one-rank job kept on the data-parallel path (--one-rank-exchange): it measured that path's cost,
// not the GPU alone.
bool is_one_rank_exchange(const ConfigGroup& group);

// What the variant column compares: the group keys besides net, global_batch and world_size (the
// tables show those in their own columns), gpu_names as "gpu" (its gpu_model, so that 1 × H100 and
// 4 × H100 are one GPU), without the allreduce settings of a single rank (it exchanges nothing,
// unless --one-rank-exchange kept it on the data-parallel path).
// Nor a train setting's label where the setting did not apply to the group's runs (auto_start of an
// even split); a setting's label the runs left unrecorded reads as its default (report_applies.cpp).
using Identity = std::map<std::string, std::string>;
Identity variant_identity(const ConfigGroup& group);
// The train setting a group key is the report label of, or nullptr.
const TrainSetting* setting_of_label(const std::string& key);
// What decided which train settings applied to the group's runs, as the runs recorded it.
RunContext run_context_of(const ConfigGroup& group);
// Whether group key `key` says nothing of the group's runs: the allreduce settings of a single rank
// on no exchange, a train setting that did not apply to them.
bool irrelevant(const std::string& key, const ConfigGroup& group);
// The group's value of `key` as its variant names it: a train setting left unrecorded, its default.
std::string variant_value(const std::string& key, const ConfigGroup& group);

// Per network, the keys of the identities whose value differs among that network's identities (one
// lacking the key is not compared), in kGroupKeys order: the "variant" column. A key that differs
// only between networks (each network on its own dataset) is no variant.
using VaryingKeys = std::map<std::string, std::vector<std::string>>;  // net -> keys
VaryingKeys varying_keys(const std::vector<std::pair<std::string, Identity>>& identities);
VaryingKeys varying_keys(const std::vector<ConfigGroup>& groups);
bool any_varying(const VaryingKeys& varying);
// "key=value ..." over the varying keys of its network ("gpu_mix" for tag.gpu_mix, "none" for ""); a
// precision by its name alone ("bf16").
std::string variant_label(const std::string& net, const Identity& identity, const VaryingKeys& varying);
std::string variant_label(const ConfigGroup& group, const VaryingKeys& varying);

// The 1-GPU (world_size 1) group with the same configuration apart from world size, GPU names and
// GPU mix, preferring one whose GPU is the first of `group`'s, then a plain (not gpu_mix) one;
// nullptr when there is none. Never a one-rank job on the data-parallel path (--one-rank-exchange):
// that measured the path, and its own baseline is the GPU alone.
const ConfigGroup* baseline_of(const ConfigGroup& group, const std::vector<ConfigGroup>& groups);
// The same with the 1-rank run's global batch `batch` instead of the group's own (weak scaling: the
// group's per-rank batch).
const ConfigGroup* baseline_at_batch(const ConfigGroup& group, const std::vector<ConfigGroup>& groups,
                                     const std::string& batch);

}  // namespace cnnscale::report
