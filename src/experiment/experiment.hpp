// Experiment files (experiments/*.yaml): the parsed and validated experiment, its expansion into
// runs with stable ids, command-line overrides (key=value) and --only filters. Schema and rationale
// in experiments/README.md; `cnnscale sweep` (src/app/cmd_sweep.cpp) drives it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "experiment/settings_table.hpp"

namespace cnnscale {

// How many iterations a run trains: a fixed count, whole epochs, or a fraction of the whole
// training (whole_iterations x scale, at least min_iterations), which is how the study's long
// trainings are scaled down to measurable windows.
struct RunLength {
  int64_t iterations = 0;  // > 0: fixed count
  int64_t epochs = 0;      // > 0: whole epochs of the dataset
  double scale = 0;        // > 0: fraction of whole_iterations
  int64_t min_iterations = 20;
  int64_t whole_epochs = 0;   // 0: train's default (the run's epochs)
  int64_t whole_samples = 0;  // 0: train's default (the dataset's size)
};

struct AllreduceMode {
  bool overlap = true;
  std::string algo;           // "" : train's default; else ring|tree|auto
  std::string dtype;          // "" : train's default (fp32); else fp32|bf16|fp16|compute (--allreduce-dtype)
  int max_ctas = 0;           // 0: NCCL's choice; else NCCL_MAX_CTAS (--allreduce-max-ctas), GPU ranks
  std::string cta_policy;     // "" : NCCL's default; else efficiency|zero (--allreduce-cta-policy), GPU ranks
  std::string priority;       // "" : train's default (high); else low (--allreduce-priority), GPU ranks
  bool update_per_bucket = true;  // false: one update after the exchange (--update-per-bucket false)
  bool gather = false;            // --gather-gradients true
  // "ov", "noov", "ov-tree", "ov-bf16", "noov-ring-compute", "ov-bf16-c8", "ov-c8-eff-lowp", "ov-upafter":
  // each field's piece, as its entry in train's table declares it (Setting::id_words)
  std::string label() const;
  std::string long_label() const;  // the same spelt out for --only: "overlap-tree", "no-overlap"
  // The mode as a run's hashed configuration names it (each field's Setting::id_value):
  // {"overlap": true, "algo": ""} and the fields it gives, as experiments write them.
  nlohmann::json id_json() const;
  // The value the mode gives train's setting `name` (a field of the mode in train's table: overlap,
  // algo, dtype, max_ctas, cta_policy, priority, update, gather), or null where it leaves train's
  // default (the runs' command lines pass only what a mode gives).
  nlohmann::json given(const std::string& name) const;
  bool operator==(const AllreduceMode&) const = default;
};

// A matrix.gpu_mix entry: the GPU of each rank (node-local index) and, when the mix partitions
// them, the SMs of each rank's green-context partition (train's --sm-counts; empty: whole GPUs).
// Either every rank names its SMs or none does: --sm-counts has no "whole GPU" value.
struct GpuMix {
  std::vector<int64_t> gpus;
  std::vector<int64_t> sms;  // empty, or one per rank
  // "0.2" for whole GPUs, "0@132.1@66" with SM counts (tags, --only, the plan).
  std::string label() const;
  // The run-id spelling: '@' is not allowed in a run id, so "0s132.1s66".
  std::string id_label() const;
  bool operator==(const GpuMix&) const = default;
};

// A matrix.cpu_mix entry's label: each rank's slowdown factor joined by '+' ("1+3", "1+2.5").
std::string cpu_mix_label(const std::vector<double>& slowdown);

// How train splits the global batch over unequal ranks (its --split); even is train's default.
// manual needs per-rank shares, which a matrix value cannot carry, so it is no axis value.
inline const std::vector<std::string> kSplitPolicies = {"even", "proportional", "auto", "energy", "edp"};

// Training data of a run: the experiment's dataset section, whose keys are train's settings of
// section `dataset` (train_settings_data.cpp), read as the table declares them (experiment_dataset.cpp).
struct DatasetSpec {
  std::string name = "synthetic";  // synthetic | fashion-mnist | hdf5:DIR | list:FILE?...
  // The section's other keys as given, by setting name (data_dir as written: what hashes and ids
  // cover); a point's value of a dataset axis (matrix.train_samples) is put here (make_run).
  nlohmann::json given = nlohmann::json::object();
  std::string data_path;  // data_dir resolved against the experiment file's folder: what train gets
  int64_t train_samples() const { return given.value("train_samples", int64_t(0)); }  // 0: train's default
  // The section as run configurations hash it, in the form every run id so far was made from.
  nlohmann::json to_json() const;
  // train's words for it: --data NAME, then each key given, by its flag in the table's order.
  std::vector<std::string> arguments() const;
};

// The infer: keys' defaults in an experiment (infer_experiment.cpp).
nlohmann::json infer_experiment_defaults();
// The names of infer's settings an inference experiment may sweep (matrix.<name>) and --only select:
// the keys of its infer: section read the common way (not the batch list, which every run sweeps,
// nor the int8 tables, one per network).
std::set<std::string> infer_axis_keys();

// An inference experiment's `infer:` section: what each run's `cnnscale infer` measures. Every run
// sweeps the whole batch list in one process (its nets built once per size, as infer does).
struct InferSpec {
  std::vector<std::string> batches = {"1", "8", "64"};  // batch sizes, or {"max"}: infer's --batch
  // The other keys of infer's table (experiment/command_settings.hpp) in the infer: section, by name:
  // each the file's value or its default (fill's: constant, for honest power readings).
  nlohmann::json settings = infer_experiment_defaults();
  std::set<std::string> given;  // the keys of `settings` the file gives
  // int8 runs' --calibration, per network: a table (cnnscale calibrate --out) as written, or
  // "synthetic" (infer measures scales on its own input: speed only). Keyed "*" for every network.
  std::map<std::string, std::string> calibration;
  std::map<std::string, std::string> calibration_paths;  // the same, tables resolved against the file's folder
  // `net`'s entry of `table` (calibration or calibration_paths): its own, else "*"'s; null if none.
  static const std::string* calibration_of(const std::map<std::string, std::string>& table, const std::string& net);
  // The keys as the run's configuration records them: the batch list and those the table records
  // always or, where it says so, away from their defaults (infer_experiment.cpp).
  nlohmann::json to_json() const;
  // The keys on each run's command line ("--fill", "constant", "--no-fold", ...), with the values of
  // `point` (a run's values of the experiment's axes over these keys, RunSpec::settings) for its keys.
  std::vector<std::string> arguments(const nlohmann::json& point = nlohmann::json::object()) const;
  // Each flag the sweep writes from the infer: section, with its key (extra_args may not repeat one).
  std::map<std::string, std::string> flags_set() const;
};

struct Experiment {
  std::string file;  // as given on the command line
  // "train" (every run a `cnnscale train`) or "infer" (every run a `cnnscale infer` of the batch
  // list in `infer`, its results under ROOT/<name>/infer/<run-id>.json).
  std::string mode = "train";
  InferSpec infer;
  std::string name;
  std::string description;
  DatasetSpec dataset;
  std::map<std::string, DatasetSpec> per_network_dataset;  // network -> its own data
  nlohmann::json solver = nlohmann::json::object();        // key -> value, validated
  nlohmann::json train = nlohmann::json::object();         // train: how the steps run (key -> value), validated
  RunLength length;
  std::map<std::string, RunLength> per_network;  // network -> its own run length
  std::string measure = "steady";
  int64_t seed = 1;
  // vary: repeat r of a point trains with repeat_seed(seed, r) (train_settings.hpp), so repeats show
  // the spread of accuracy too; fixed: every repeat with the point's seed (timing repeats, as the
  // study's). Not in fixed_json: the runs' own configurations carry their seeds.
  std::string seeds = "vary";
  std::string device = "cpu";    // resolved: cpu | gpu (auto already decided)
  std::string device_requested;  // as written: cpu | gpu | auto
  std::vector<std::string> extra_args;
  // matrix
  std::vector<std::string> networks;
  std::map<std::string, std::string> network_paths;  // name as written -> file train gets
  std::vector<int64_t> batches;            // global batches (strong scaling: the same at every rank count)
  std::vector<int64_t> batches_per_gpu;    // per-rank batches (weak scaling: global = this x ranks)
  std::vector<int64_t> gpu_counts;              // ranks with GPU = node-local rank
  std::vector<GpuMix> gpu_mixes;                 // explicit per-rank GPU selectors (and SM partitions)
  std::vector<std::vector<double>> cpu_mixes;    // CPU ranks' slowdown factors, one list per rank set
  std::vector<std::string> splits = {"even"};    // batch split policies (kSplitPolicies)
  bool split_given = false;                      // matrix.split written: --split passed even for even
  std::vector<std::string> precisions;
  std::vector<AllreduceMode> allreduce;
  // matrix.<setting>: a setting as an axis, in its table's order: a train setting (train_settings.hpp),
  // or in an inference experiment a key of infer's infer: section (infer_experiment.cpp).
  struct SettingAxis {
    std::string name;
    std::vector<nlohmann::json> values;
  };
  std::vector<SettingAxis> setting_axes;
  int64_t repeats = 3;

  const DatasetSpec& dataset_for(const std::string& network) const {
    auto it = per_network_dataset.find(network);
    return it != per_network_dataset.end() ? it->second : dataset;
  }
  // The fixed part (everything but the matrix) and the whole resolved experiment, as JSON.
  nlohmann::json fixed_json() const;
  nlohmann::json resolved_json() const;
  // Hash of fixed_json(): a sweep refuses a results folder made under another one. The matrix may
  // grow or shrink between invocations (its points are addressed by run id).
  std::string fixed_hash() const;
};

// One matrix point x repeat.
struct RunSpec {
  // "<net>-b<batch>-g<ranks>[-m0.2|-m0s132.1s66|-c1+3]-<precision>-<allreduce>[-split-<policy>][-lr0.1...]-r<k>-<hash8>";
  // an inference run: "<net>-infer-g<ranks>[-m0.2]-<precision>[-seconds1...]-r<k>-<hash8>"
  std::string id;
  bool infer = false;        // a `cnnscale infer` run (Experiment::mode infer): batch and iterations are 0
  std::string config_hash;   // 16 hex digits of the point's resolved config (the same for its repeats)
  nlohmann::json config;     // the run's resolved config: the point's, with this repeat's seed
  std::string network;       // as written in the experiment
  std::string network_path;  // what train's --net gets
  int64_t batch = 0, ranks = 1, repeat = 1;
  nlohmann::json settings = nlohmann::json::object();  // this point's values of Experiment::setting_axes
  RunContext context;  // what decides which of train's settings apply to it (run_context)
  int64_t seed_base = 1;  // the point's seed (matrix.seed, else the experiment's)
  int64_t seed = 1;       // this repeat's: seed_base, or repeat_seed(seed_base, repeat) with seeds: vary
  std::vector<int64_t> gpu_mix;
  std::vector<int64_t> gpu_sms;   // SMs per rank of a partitioned gpu_mix; empty: whole GPUs
  std::vector<double> slowdown;   // per-rank slowdown of a cpu_mix run; empty: none
  std::string split = "even";     // batch split policy; a 1-rank run is always even
  bool pass_split = false;        // --split goes to train (the experiment names the axis)
  std::string precision = "fp32";
  AllreduceMode allreduce;
  DatasetSpec dataset;
  int64_t iterations = 0, epochs = 0;                                 // exactly one > 0
  int64_t whole_epochs = 0, whole_samples = 0, whole_iterations = 0;  // 0: unknown / train default
};

// What the environment offers, so tests can pretend (GPU count, CPU cores).
struct HostInfo {
  // GPUs the runs can use: this node's, or inside Slurm the allocation's (nodes x per node).
  std::optional<int> gpus;  // nullopt: unknown (no CUDA build, no CUDA_VISIBLE_DEVICES)
  std::string gpus_source;  // for messages: "CUDA_VISIBLE_DEVICES=0,1", "SLURM_GPUS_ON_NODE=4", ...
  bool check_gpus = true;   // false when emitting a batch script (the compute nodes decide)
  std::optional<int> gpus_per_node = std::nullopt;  // a gpu_mix's indices are node-local; nullopt: as `gpus`
  int nodes = 1;                                    // of the Slurm allocation; 1 outside Slurm
  bool in_slurm = false;                            // SLURM_JOB_ID set
  // MPIRUN_ARGS names hosts (--hostfile, -H, ...): ranks may span them, so mpirun decides.
  bool hosts_from_launcher = false;

  using Getenv = std::function<const char*(const char*)>;
  static HostInfo detect();                      // from this process's environment
  static HostInfo detect(const Getenv& getenv);  // from any (tests pretend to be in Slurm)
  // Why `ranks` GPU ranks (one GPU each) do not fit, or "" when they do or it cannot be told here.
  std::string lacks_gpus_for(int64_t ranks) const;
  // Why the node-local GPU `index` (a gpu_mix selector) does not exist, or "".
  std::string lacks_gpu_index(int64_t index) const;
};

// "matrix.network=[caffenet,resnet34]" -> path and YAML value; ConfigError when malformed.
struct Override {
  std::string text, path, value;
};
Override parse_override(const std::string& text);

// Loads, applies overrides and validates: ConfigError with "file:line:col: key.path: message".
Experiment load_experiment(const std::string& file, const std::vector<std::string>& overrides, const HostInfo& host);
Experiment parse_experiment_text(const std::string& text, const std::string& file,
                                 const std::vector<std::string>& overrides, const HostInfo& host);

// All runs in matrix order (network, batch, gpus/mix, precision, allreduce, split, repeat). A run that a
// refused-elsewhere setting's axis (Setting::applies_only_to) does not apply to is made once, without it.
std::vector<RunSpec> expand_runs(const Experiment& e);
// What decides whether a train setting applies to `run` (Setting::applies), as train will have it
// (experiment_settings.cpp).
RunContext run_context(const Experiment& e, const RunSpec& run);
// `point`'s setting values without those that do not apply to a run of context `c` (Setting::applies):
// train refuses some there (Setting::applies_only_to), the others change nothing.
nlohmann::json applying_point(const nlohmann::json& point, const RunContext& c);

// --only "network=caffenet,batch=64" (keys: network, batch, gpus, gpu_mix, cpu_mix, precision, allreduce,
// split, repeat, and any train setting's name: lr=0.1, or an inference run's infer key: seconds=1;
// '|' separates alternatives: batch=64|128).
// Several --only options all must hold.
struct OnlyFilter {
  std::map<std::string, std::vector<std::string>> terms;
  bool matches(const RunSpec& run) const;
};
OnlyFilter parse_only(const std::vector<std::string>& exprs);
// The keys --only takes besides the settings' (train's, infer's): a run's place in the matrix, in the
// order its messages list them, each with whether only a training run has it (an inference run has no
// batch axis, allreduce, split or CPU mix).
struct OnlyPointKey {
  std::string name;
  bool training_only = false;
};
const std::vector<OnlyPointKey>& only_point_keys();

// 16 hex digits of FNV-1a 64 over `text`: stable across hosts, compilers and runs.
std::string stable_hash(const std::string& text);

}  // namespace cnnscale
