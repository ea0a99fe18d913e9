// `cnnscale sweep`: the state of an experiment's results folder (which runs are done, the sweep.json
// record that refuses a changed configuration), the command line of each run (train arguments and
// its launcher: direct, mpirun or srun), batch-script emission (Slurm/PBS arrays) and the run loop.
#pragma once
#include <compare>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment.hpp"

namespace cnnscale {

// ---- results folder state (sweep_state.cpp) ------------------------------------------------------

enum class RunState {
  Todo,      // nothing there
  Done,      // <id>/run.h5 exists and summary tag.config_hash matches: never touched again
  Partial,   // <id>.partial/ left by a killed run: removed, then the run is redone
  Conflict,  // <id>/ exists but is not this run's finished result: reported, never overwritten
};
struct RunStatus {
  RunState state = RunState::Todo;
  std::string detail;  // why, for Conflict
};
const char* run_state_name(RunState s);

// ROOT/<experiment>
std::string experiment_dir(const std::string& results_root, const Experiment& e);
RunStatus run_status(const std::string& exp_dir, const RunSpec& run);

// ROOT/<exp>/sweep.json holds the resolved experiment and its fixed-part hash. A different hash
// throws ConfigError naming the changed keys; with `write`, the record is (re)written atomically.
void check_sweep_record(const std::string& exp_dir, const Experiment& e, const std::vector<std::string>& overrides,
                        bool write);

// ---- command lines (sweep_command.cpp) -----------------------------------------------------------

// `train ...` arguments of one run (without the executable).
std::vector<std::string> train_arguments(const Experiment& e, const RunSpec& run, const std::string& results_root);

struct LaunchEnv {
  std::string self;                  // this cnnscale executable
  bool in_slurm = false;             // SLURM_JOB_ID set: srun
  std::optional<int> gpus_per_node;  // Slurm: GPUs per node of the allocation (srun's node layout)
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;  // MPIRUN_ARGS, split on blanks
  std::string srun_mpi = "pmix";         // CNNSCALE_SRUN_MPI
  unsigned cores = 1;
  static LaunchEnv detect();  // with HostInfo::detect()
  static LaunchEnv detect(const HostInfo& host);
};
// The full argv of one run: [srun ... | mpirun ... ] self train ... Under Slurm, GPU ranks fill
// as few nodes as they fit on (--nodes, --ntasks-per-node) when GPUs per node are known; a
// gpu_mix run stays on one node.
std::vector<std::string> launch_command(const Experiment& e, const RunSpec& run, const std::string& results_root,
                                        const LaunchEnv& env);

// What one run asks a scheduler for: `ntasks` ranks on `nodes` nodes, at most `tasks_per_node` on
// each, with `gpus_per_node` GPUs each (0: a CPU run).
struct RunResources {
  int64_t nodes = 1, ntasks = 1, tasks_per_node = 1, gpus_per_node = 0;
  auto operator<=>(const RunResources&) const = default;
};
// gpus_per_node (of the cluster's nodes) 0: every run on one node. A gpu_mix run stays on one node
// with max(index) + 1 GPUs; more than gpus_per_node of them is a ConfigError. CPU runs: one node.
RunResources run_resources(const Experiment& e, const RunSpec& run, int64_t gpus_per_node);

// Runs of the same need, by need ascending; `runs` are indices into the plan.
struct ResourceGroup {
  RunResources need;
  std::vector<size_t> runs;
};
std::vector<ResourceGroup> resource_groups(const Experiment& e, const std::vector<RunSpec>& runs,
                                           int64_t gpus_per_node);

struct EmitRequest {
  std::string kind;  // slurm | pbs
  std::string self, file, results_root, workdir;
  std::vector<std::string> overrides, only;
  std::string time_limit = "02:00:00";
  int64_t gpus_per_node = 0;  // --gpus-per-node; 0: every run on one node
};
// One job script, two ways to submit it. `sbatch/qsub FILE`: one array over every run, each task
// with the largest need of any group. `bash FILE` (outside a job): one sbatch/qsub per resource
// group, sized for it, an array over its runs whose indices go in CNNSCALE_RUN_LIST (':'-separated).
// Task T runs `cnnscale sweep FILE ... --run-index I`, I = CNNSCALE_RUN_LIST[T], else T.
std::string emit_script(const EmitRequest& req, const Experiment& e, const std::vector<RunSpec>& runs);

std::string shell_quote(const std::string& s);

// ---- the loop (sweep_runner.cpp) -----------------------------------------------------------------

struct SweepResult {
  int ran = 0, skipped = 0, failed = 0;
  std::vector<std::string> failed_ids;
};
// Runs every run not done yet, in order; a failed run is reported and the loop goes on.
SweepResult run_sweep(const Experiment& e, const std::vector<RunSpec>& runs, const std::string& results_root,
                      const LaunchEnv& env);

}  // namespace cnnscale
