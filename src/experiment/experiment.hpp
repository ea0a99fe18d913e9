// Experiment files (experiments/*.yaml): the parsed and validated experiment, its expansion into
// runs with stable ids, command-line overrides (key=value) and --only filters. Schema and rationale
// in experiments/README.md; `cnnscale sweep` (src/app/cmd_sweep.cpp) drives it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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
  std::string label() const;  // "ov", "noov", "ov-tree"
  bool operator==(const AllreduceMode&) const = default;
};

// Training data of a run; `args` are train flags it implies (--classes, --input-shape).
struct DatasetSpec {
  std::string name = "synthetic";        // synthetic | fashion-mnist
  std::string data_dir, synthetic_fill;  // data_dir as written: what hashes and ids cover
  std::string data_path;                 // data_dir resolved against the experiment file's folder: what train gets
  int64_t train_samples = 0, test_samples = -1;  // 0 / -1: train's defaults
  std::vector<std::string> args;
  nlohmann::json to_json() const;
};

struct Experiment {
  std::string file;  // as given on the command line
  std::string name;
  std::string description;
  DatasetSpec dataset;
  std::map<std::string, DatasetSpec> per_network_dataset;  // network -> its own data
  nlohmann::json solver = nlohmann::json::object();        // key -> value, validated
  RunLength length;
  std::map<std::string, RunLength> per_network;  // network -> its own run length
  std::string measure = "steady";
  int64_t seed = 1;
  std::string device = "cpu";    // resolved: cpu | gpu (auto already decided)
  std::string device_requested;  // as written: cpu | gpu | auto
  std::vector<std::string> extra_args;
  // matrix
  std::vector<std::string> networks;
  std::map<std::string, std::string> network_paths;  // name as written -> file train gets
  std::vector<int64_t> batches;
  std::vector<int64_t> gpu_counts;              // ranks with GPU = node-local rank
  std::vector<std::vector<int64_t>> gpu_mixes;  // explicit per-rank GPU selectors
  std::vector<std::string> precisions;
  std::vector<AllreduceMode> allreduce;
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
  std::string id;            // "<net>-b<batch>-g<ranks>[-m0.2]-<allreduce>-<precision>-r<k>-<hash8>"
  std::string config_hash;   // 16 hex digits of the resolved run config (repeat excluded)
  nlohmann::json config;     // the resolved run config the hash covers
  std::string network;       // as written in the experiment
  std::string network_path;  // what train's --net gets
  int64_t batch = 0, ranks = 1, repeat = 1;
  std::vector<int64_t> gpu_mix;
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

// All runs in matrix order (network, batch, gpus/mix, precision, allreduce, repeat).
std::vector<RunSpec> expand_runs(const Experiment& e);

// --only "network=caffenet,batch=64" (keys: network, batch, gpus, gpu_mix, precision, allreduce,
// repeat; '|' separates alternatives: batch=64|128). Several --only options all must hold.
struct OnlyFilter {
  std::map<std::string, std::vector<std::string>> terms;
  bool matches(const RunSpec& run) const;
};
OnlyFilter parse_only(const std::vector<std::string>& exprs);

// 16 hex digits of FNV-1a 64 over `text`: stable across hosts, compilers and runs.
std::string stable_hash(const std::string& text);

}  // namespace cnnscale
