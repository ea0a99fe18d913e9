// ExperimentReader: the experiment's YAML tree with command-line overrides (key=value) applied, and
// ConfigNode access that locates an overridden value in its command-line text instead of the file
// ("command line 'solver.lr=-1':1:1: solver.lr: ..."), so every error still says where it came from.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "experiment/experiment.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale {

class ExperimentReader {
 public:
  ExperimentReader(ConfigNode root, const std::vector<std::string>& overrides);

  const ConfigNode& root() const { return root_; }
  std::optional<ConfigNode> child(const ConfigNode& parent, const std::string& key) const;
  ConfigNode get(const ConfigNode& parent, const std::string& key) const;  // fails when missing
  // Like ConfigNode::check_keys, but an unknown key that came from an override names the override.
  void check_keys(const ConfigNode& node, const std::set<std::string>& allowed) const;
  // Whether `node` (or a key above it) was set by a command-line override, whose relative paths
  // mean the current directory rather than the experiment file's.
  bool overridden(const ConfigNode& node) const;

 private:
  ConfigNode relocate(const ConfigNode& node) const;
  const std::string* override_of(const std::string& path) const;
  ConfigNode root_;
  std::map<std::string, std::string> overridden_;  // key path -> the override's text
};

// Checked scalar values shared by the experiment parser's files: each fails at the node with
// "file:line:col: key.path: message".
std::string one_of(const ConfigNode& n, const std::set<std::string>& allowed);
int64_t int_in(const ConfigNode& n, int64_t lo, int64_t hi);
double number_in(const ConfigNode& n, double lo, double hi, bool lo_open);
// Scalar or sequence, each item checked: the list elements keep their own locations.
std::vector<ConfigNode> list_items(const ConfigNode& n);

// Train's settings in the schema (experiment_settings.cpp), from their table: a value checked as its
// entry declares; the keys of a section ("solver"; "" the top level); every setting's axis name.
nlohmann::json read_setting(const TrainSetting& s, const ConfigNode& n);
std::set<std::string> setting_keys(const std::string& section);
// Refuses a key of `keys` in the mapping `n` that names an entry of `table` and is null (`display: ~`),
// at its key path, unless the entry says what null means (Setting::null_means).
void refuse_null_settings(const ExperimentReader& r, const ConfigNode& n, const SettingTable& table,
                          const std::set<std::string>& keys);
std::set<std::string> setting_axis_keys();
// A section of settings (solver, train): each key a setting of that section, into `values`.
void read_settings_section(const ExperimentReader& r, const ConfigNode& n, const std::string& section,
                           nlohmann::json& values);
// matrix.<setting>: each setting named in the matrix, in the table's order, into e.setting_axes;
// refused where the fixed key is given too or a value is listed twice.
void read_setting_axes(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& m, Experiment& e);
// One setting's axis at `c` (matrix.<name>), of any command's table; refused where `fixed`, the fixed
// key, is given too, or a value is listed twice.
Experiment::SettingAxis read_setting_axis(const Setting& s, const ConfigNode& c,
                                          const std::optional<ConfigNode>& fixed);
// A setting train refuses where it does not apply (Setting::applies_only_to), given as a key or an
// axis in an experiment none of whose runs it applies to: refused at that key.
void check_settings_apply(const ExperimentReader& r, const ConfigNode& root, const Experiment& e);

// A path written in the experiment (`written`, at `n`): relative to the file's folder, or to the
// current directory where an override gave it (experiment_parse.cpp).
std::filesystem::path experiment_path(const ExperimentReader& r, const ConfigNode& n, const std::string& written);
// dataset: a data set's name, or a mapping of train's settings of section `dataset`
// (experiment_dataset.cpp), each checked as the table declares it and where it applies.
DatasetSpec read_dataset(const ExperimentReader& r, const ConfigNode& n);
// The matrix axes over dataset keys (matrix.train_samples, ...), once every network's data is read:
// refused where a network's data takes no such key (synthetic_fill of Fashion-MNIST) or gives it
// itself, and each input shape is three extents.
void check_dataset_axes(const ExperimentReader& r, const ConfigNode& root, const Experiment& e);
// infer: each key an entry of section "infer" of infer's settings table, into e.infer
// (infer_experiment.cpp).
void read_infer(const ExperimentReader& r, const ConfigNode& n, Experiment& e);
// An inference experiment's matrix.<name> of those settings, in the table's order, into
// e.setting_axes; after read_infer (the fixed keys) and the batch list.
void read_infer_axes(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& m, Experiment& e);

// The matrix's rank sets and split policies (experiment_matrix.cpp): gpus, gpu_mix, cpu_mix, split;
// ranks are checked against `host` and each batch.
void read_rank_sets(const ExperimentReader& r, const ConfigNode& matrix, Experiment& e, const HostInfo& host);
// Refuses, at the second of them, an axis (network, batch, batch_per_gpu, gpus, gpu_mix, cpu_mix,
// allreduce) that lists one value twice: both would expand to one run id (experiment_matrix.cpp).
void check_distinct_axis_values(const ExperimentReader& r, const ConfigNode& matrix, const Experiment& e);
// extra_args (experiment_extra_args.cpp): each item appended to e.extra_args, or refused at its
// file:line:col when the sweep already writes that flag on a run's command line (`infer` picks
// infer's flags rather than train's), or when it is a tag the sweep writes itself. The flag of a train
// setting that is no part of a run's identity (--timing-warmup) is refused only where the file gives
// its key (`root`'s section or matrix axis): files from before it was a key keep passing it.
void read_extra_args(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& list, bool infer,
                     Experiment& e);
// The options `cnnscale train` and `cnnscale infer` accept ("--batch", "-h", ...), handed down by
// app/ from the commands' CLI definitions when the program starts (this layer cannot see app/):
// read_extra_args refuses a flag outside them (a typo would fail every run when it starts). Never
// set (a unit test, a program without those commands): flags are not checked against a list.
void set_command_flags(const std::string& command, std::set<std::string> flags);
// The train flags a sweep writes on a run's command line, each with the experiment key that sets it.
const std::map<std::string, std::string>& sweep_train_flags();
// The most runs one experiment's matrix may expand to: 10,000, some 30 times the largest shipped
// experiment (seed_study_hetero.yaml, 360); at a minute a run, a week of one node.
inline constexpr int64_t kMaxMatrixRuns = 10000;
// Refuses, at `matrix`, a matrix whose axes' value counts multiply to more than kMaxMatrixRuns,
// naming each axis and the product; before any value is read.
void check_matrix_size(const ExperimentReader& r, const ConfigNode& matrix, bool infer);
// Whether the matrix names CPU rank sets (cpu_mix): device auto then means the CPU.
bool has_cpu_mix(const ExperimentReader& r, const ConfigNode& root);
// The most GPUs one matrix point asks for (ranks, or the highest selector + 1); 1 when unreadable,
// since validation reports that properly later.
int64_t gpus_needed(const ExperimentReader& r, const ConfigNode& root);

}  // namespace cnnscale
