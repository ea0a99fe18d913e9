// `cnnscale sweep`: the state of an experiment's results folder (which runs are done, the sweep.json
// record that refuses a changed configuration), the command line of each run (train arguments and
// its launcher: direct, mpirun or srun), batch-script emission (Slurm/PBS arrays) and the run loop.
#pragma once
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
  std::string self;       // this cnnscale executable
  bool in_slurm = false;  // SLURM_JOB_ID set: srun
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;  // MPIRUN_ARGS, split on blanks
  std::string srun_mpi = "pmix";         // CNNSCALE_SRUN_MPI
  unsigned cores = 1;
  static LaunchEnv detect();
};
// The full argv of one run: [srun ... | mpirun ... ] self train ...
std::vector<std::string> launch_command(const Experiment& e, const RunSpec& run, const std::string& results_root,
                                        const LaunchEnv& env);

struct EmitRequest {
  std::string kind;  // slurm | pbs
  std::string self, file, results_root, workdir;
  std::vector<std::string> overrides, only;
  std::string time_limit = "02:00:00";
};
// A job-array script with one task per run; task I runs `cnnscale sweep FILE ... --run-index I`.
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
