// `cnnscale sweep`'s work apart from its flags and its printing (app/cmd_sweep.cpp): read the
// experiment with its overrides, select the runs (--only, --run-index) and check them against this
// host, then either write a job script or run the runs not finished yet under the experiment's lock.
// Everything a sweep refuses is refused by plan_sweep, before any folder or file is made.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experiment/experiment.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {

// What `cnnscale sweep` was asked, as its flags give it.
struct SweepRequest {
  std::string file;                    // the experiment YAML
  std::vector<std::string> overrides;  // key=value overrides of the file
  std::vector<std::string> only;       // --only terms (repeatable)
  std::string results = "results";     // the results root
  bool dry_run = false;
  std::string emit;       // slurm | pbs | "" (run here)
  std::string emit_file;  // "" : the script goes to the caller
  // The script's settings below are passed on to EmitRequest (emit_sweep), whose defaults they take.
  std::string time_limit = EmitRequest{}.time_limit;
  int64_t max_requeues = EmitRequest{}.max_requeues;  // --emit slurm: see EmitRequest
  int64_t gpus_per_node = 0;  // --emit: 0 = every run on one node
  EmitSite site;              // --emit: --partition, --account, --qos, --constraint, --sched-option, --setup
  int64_t run_index = -1;     // an array task's run (-1: every selected run)
  bool allow_other_gpus = false;
};

// The runs a sweep would run, and where.
struct SweepPlan {
  Experiment experiment;
  std::vector<RunSpec> runs;  // selected, in plan order
  std::string exp_dir;        // <results>/<experiment name>
  // Why the experiment's finished runs say it should not resume on this host's GPUs ("" when it may,
  // and always with --emit or --allow-other-gpus): a dry run warns of it, a sweep refuses it.
  std::string other_gpus;
};

// Reads and selects as the request says (ConfigError naming the key, term or index that is wrong):
// --only terms an experiment of this mode has no key for, a selected run this host's GPUs cannot
// hold (checked for the selected runs only, or the one of --run-index; not at all for --emit, whose
// script runs elsewhere), a --run-index outside the selection, a results folder of another
// experiment's record. Makes nothing.
SweepPlan plan_sweep(const SweepRequest& req, const HostInfo& host);

struct EmittedScript {
  std::string script;
  size_t groups = 0;  // with emit_file: the resource groups, arrays `bash FILE` submits
};
// The job script of the plan (emit_script). With req.emit_file set, writes it there (executable,
// atomically); makes the experiment's folder, where the scheduler opens the job's output file.
EmittedScript emit_sweep(const SweepRequest& req, const SweepPlan& plan);

// Runs the plan's runs not done yet (run_sweep) holding the experiment's lock, or with --run-index
// the run's own; refuses (RuntimeError) while another process holds it, and ends with a RuntimeError
// naming the runs that failed or were busy. Returns whether the sweep stopped with its state saved
// for a requeue (the command then ends with kExitRequeue).
bool run_planned_sweep(const SweepRequest& req, const SweepPlan& plan, const HostInfo& host);

}  // namespace cnnscale
