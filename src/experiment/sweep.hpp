// `cnnscale sweep`: the state of an experiment's results folder (which runs are done, the sweep.json
// record that refuses a changed configuration), the command line of each run (train arguments and
// its launcher: direct, mpirun or srun), batch-script emission (Slurm/PBS arrays) and the run loop.
#pragma once
#include <compare>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment.hpp"

namespace cnnscale {

// ---- results folder state (sweep_state.cpp) ------------------------------------------------------

enum class RunState {
  Todo,      // nothing there
  Done,      // <id>/ holds this run's complete result, intact (see done markers below): never touched again
  Partial,   // <id>.partial/ left by a killed run, or <id>/ of an interrupted one: the run is redone
  Corrupt,   // <id>/ is damaged (files missing, truncated, unreadable or not matching done.json): moved
             // aside to <id>.corrupt-<n>.partial, then the run is redone
  Conflict,  // <id>/ holds a run of another configuration: reported, never overwritten
};
struct RunStatus {
  RunState state = RunState::Todo;
  std::string detail;     // why, for Partial, Corrupt and Conflict
  bool unsealed = false;  // Done without a done marker (left by an older sweep, or train just finished):
                          // verified by reading it; the sweep then writes the marker
};
const char* run_state_name(RunState s);

// ROOT/<experiment>
std::string experiment_dir(const std::string& results_root, const Experiment& e);
RunStatus run_status(const std::string& exp_dir, const RunSpec& run);
// ROOT/<exp>/infer/<run-id>.json: an inference run's result (Experiment::mode infer).
std::string infer_run_file(const std::string& exp_dir, const RunSpec& run);

// ---- done markers and locks (sweep_verify.cpp) ---------------------------------------------------

// <run>/done.json, written by the sweep when it counts a run as done: size and SHA-256 of run.h5 and
// summary.json, so a later sweep tells an intact run from one damaged since (a truncated copy, a
// half-synced file system, an edit) instead of skipping it for ever.
inline constexpr const char* kDoneMarker = "done.json";
std::string sha256_hex(const std::string& data);
std::string sha256_file(const std::string& path);  // RuntimeError when unreadable
// Writes <run_dir>/done.json (atomically) for the files as they are now.
void write_done_marker(const std::string& run_dir, const RunSpec& run);
// "" when run_dir's files match its done.json; else what is wrong, in a few words.
std::string check_done_marker(const std::string& run_dir);
// Renames a damaged run folder to <run_dir>.corrupt-<n>.partial (first free n) and returns that
// path: train can write the run again, the evidence stays, and the report (which ignores *.partial)
// never counts it.
std::string move_aside(const std::string& run_dir);

// An exclusive flock on a file, held until destruction (closed on exec: children never hold it).
class FileLock {
 public:
  // Takes the lock without waiting and writes "host H pid P" into the file. nullptr when another
  // process holds it; `holder` then says who ("host H pid P", or "another process"). A symbolic
  // link at `path` is refused (RuntimeError naming it), never followed. `remove_when_released`:
  // the holder removes the file as it lets go (every user of that file must pass true: a taker
  // checks that the file it locked is still the one at `path`).
  static std::unique_ptr<FileLock> try_lock(const std::string& path, std::string* holder,
                                            bool remove_when_released = false);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  FileLock(int fd, std::string remove_path) : fd_(fd), remove_path_(std::move(remove_path)) {}
  int fd_;
  std::string remove_path_;  // "" keeps the file
};
// ROOT/<exp>/.sweep.lock: one whole sweep of an experiment at a time. ROOT/<exp>/.<id>.lock: one
// process per run, so the tasks of an emitted array (--run-index) run side by side, and a sweep
// skips a run that one of them is running.
std::string sweep_lock_path(const std::string& exp_dir);
std::string run_lock_path(const std::string& exp_dir, const std::string& run_id);

// ROOT/<exp>/sweep.json holds the resolved experiment and its fixed-part hash. A different hash
// throws ConfigError naming the changed keys; with `write`, the record is (re)written atomically.
void check_sweep_record(const std::string& exp_dir, const Experiment& e, const std::vector<std::string>& overrides,
                        bool write);

// The GPU models (system.gpus[].name of summary.json) the complete training runs `run_ids` of an
// experiment were measured on (their summary.json says "status": "complete"; only that file is
// read, not the checksums: an array task does this for the whole matrix), each with the first run
// that names it. A resumed sweep skips finished runs: on other GPUs it would leave the folder with
// some configurations measured on one model and the rest on another, and the skipped ones never
// measured on this one.
std::map<std::string, std::string> finished_run_gpu_models(const std::string& exp_dir,
                                                           const std::vector<std::string>& run_ids);
// "" when some model in `recorded` is among `here` (the GPUs this process sees: a task of a
// mixed-model node may see one model of a folder that holds two), or either is empty (`here` not
// known: no CUDA build or no GPU visible, where a GPU run fails on its own); else, when none of the
// folder's models is here, why the sweep should not resume in `exp_dir` (one line naming a model,
// a run and what to do).
std::string other_gpu_models_problem(const std::string& exp_dir, const std::map<std::string, std::string>& recorded,
                                     const std::vector<std::string>& here);

// ---- command lines (sweep_command.cpp) -----------------------------------------------------------

// `train ...` arguments of one run (without the executable).
std::vector<std::string> train_arguments(const Experiment& e, const RunSpec& run, const std::string& results_root);
// `infer ...` arguments of an inference run (RunSpec::infer).
std::vector<std::string> infer_arguments(const Experiment& e, const RunSpec& run, const std::string& results_root);

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

// A cluster's own settings for an emitted script (sweep --partition, --account, ...), so that it
// runs there without being edited. Empty: not written.
struct EmitSite {
  std::string partition;             // Slurm --partition; PBS -q (its queue)
  std::string account;               // Slurm --account; PBS -A
  std::string qos, constraint;       // Slurm only (PBS puts such things in -l: `options`)
  std::vector<std::string> options;  // further scheduler options, one #SBATCH/#PBS line each
  std::vector<std::string> setup;    // shell lines every task runs before its run (module load ...)
};

struct EmitRequest {
  std::string kind;  // slurm | pbs
  std::string self, file, results_root, workdir;
  std::vector<std::string> overrides, only;
  std::string time_limit = "02:00:00";
  int64_t gpus_per_node = 0;      // --gpus-per-node; 0: every run on one node
  bool allow_other_gpus = false;  // passed on to every task (sweep --allow-other-gpus)
  EmitSite site = {};             // site settings (sweep --partition, ...)
  // How often a Slurm task requeues itself (SLURM_RESTART_COUNT below this): a requeued run starts
  // over unless it has a checkpoint folder, so a run longer than the time limit would otherwise
  // requeue for ever. 0: never.
  int64_t max_requeues = 3;
};
// One job script, two ways to submit it. `sbatch/qsub FILE`: one array over every run, each task
// with the largest need of any group. `bash FILE` (outside a job): one sbatch/qsub per resource
// group, sized for it, an array over its runs whose indices go in CNNSCALE_RUN_LIST (':'-separated).
// Task T runs `cnnscale sweep FILE ... --run-index I`, I = CNNSCALE_RUN_LIST[T], else T, and passes
// the scheduler's stop signals on to it; Slurm signals a task before its time limit and requeues
// it when its run stopped for requeue (exit 75), as launch/slurm.sbatch does. Every value of the
// request is quoted as a shell word, or, where it goes into a #SBATCH/#PBS line (results root,
// name, time, site settings), refused (ConfigError naming its source) when that line cannot carry
// it: control characters, blanks, quotes, '\', '#'. (sweep_emit.cpp)
std::string emit_script(const EmitRequest& req, const Experiment& e, const std::vector<RunSpec>& runs);

std::string shell_quote(const std::string& s);

// ---- the loop (sweep_runner.cpp) -----------------------------------------------------------------

struct SweepResult {
  int ran = 0, skipped = 0, failed = 0, busy = 0;
  std::vector<std::string> failed_ids;
  std::vector<std::string> busy_lines;  // "run X is being run by host H pid P (lock F)"
  // Stopped by a signal (or a run's ranks' own) with the run in progress saved for requeue, or none
  // in progress: the sweep ends with kExitRequeue, and the same command goes on.
  bool stopped_for_requeue = false;
};
// Runs every run not done yet, in order; a failed run is reported and the loop goes on. Each run
// is run under its lock (run_lock_path); one another process holds is skipped and counted busy.
// SIGINT, SIGTERM and SIGUSR1 are passed on to the run in progress and end the loop after it: a
// RuntimeError when that run ended without saving its state, else stopped_for_requeue. A run that
// stopped for requeue without the sweep's own signal (exit 75, or its io/requeue_record.hpp record
// where its launcher reports another code) ends the loop the same way.
SweepResult run_sweep(const Experiment& e, const std::vector<RunSpec>& runs, const std::string& results_root,
                      const LaunchEnv& env);

}  // namespace cnnscale
