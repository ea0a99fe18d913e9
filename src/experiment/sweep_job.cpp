#include "experiment/sweep_job.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include "backend/devices.hpp"
#include "core/error.hpp"
#include "experiment/train_settings.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale {

namespace {

// Why run `r` cannot run on this host's GPUs ("" when it can).
std::string run_lacks_gpus(const Experiment& e, const RunSpec& r, HostInfo host) {
  if (e.device != "gpu") return "";
  host.check_gpus = true;
  return r.gpu_mix.empty() ? host.lacks_gpus_for(r.ranks)
                           : host.lacks_gpu_index(*std::max_element(r.gpu_mix.begin(), r.gpu_mix.end()));
}

// Why this sweep should not resume here ("" when it may): its finished training runs were measured
// on GPU models none of which this process sees (see other_gpu_models_problem). Only for GPU
// experiments run here: an emitted script runs on compute nodes, whose tasks check it themselves.
// Inference runs record no GPU model in a summary.json and are not looked at. GPUs whose model
// cannot be read count as unknown: the runs fail on them on their own if they cannot run.
std::string other_gpus_here(const Experiment& e, const std::string& exp_dir) {
  if (e.device != "gpu" || !cuda_backend_built()) return "";
  std::vector<std::string> here;
  try {
    for (int i = 0; i < cuda_device_count(); ++i) here.push_back(gpu_facts(i).name);
  } catch (const RuntimeError&) {
    return "";
  }
  std::sort(here.begin(), here.end());
  here.erase(std::unique(here.begin(), here.end()), here.end());
  std::vector<std::string> ids;
  for (const RunSpec& r : expand_runs(e))
    if (!r.infer) ids.push_back(r.id);
  return other_gpu_models_problem(exp_dir, finished_run_gpu_models(exp_dir, ids), here);
}

// An inference run has no batch axis, allreduce, split or CPU mix: such a filter would select
// nothing (or everything) without saying why. Nor has it train's settings but the seed, and a
// training run has no infer key.
void check_only_keys(const Experiment& e, const OnlyFilter& only) {
  std::set<std::string> training_only;
  std::vector<std::string> inference_has;  // the keys of both, in --only's order, then the seed
  for (const OnlyPointKey& k : only_point_keys()) {
    if (k.training_only)
      training_only.insert(k.name);
    else
      inference_has.push_back(k.name);
  }
  inference_has.push_back("seed");
  for (const auto& [key, values] : only.terms) {
    const TrainSetting* s = find_train_setting(key);
    const bool train_key = (s && s->part_of.empty()) || training_only.count(key) > 0;
    const bool infer_key = infer_axis_keys().count(key) > 0;
    if (e.mode == "infer" && train_key && !infer_key && key != "seed")
      throw_config("--only {}=...: an inference experiment has no '{}' ({}, or an infer key such as seconds)", key, key,
                   fmt::join(inference_has, ", "));
    if (e.mode != "infer" && infer_key && !train_key)
      throw_config("--only {}=...: '{}' is a key of inference experiments (infer.{})", key, key, key);
  }
}

}  // namespace

SweepPlan plan_sweep(const SweepRequest& req, const HostInfo& host) {
  // A batch script runs on compute nodes: this host's GPUs say nothing about theirs. An array task
  // holds the resources of its own run only (`bash FILE` submits one array per resource group), so
  // the run is checked against them below instead of the whole matrix.
  // With --only, the runs it selects are checked instead of the whole matrix: a 2-GPU host may run
  // the 1- and 2-GPU points of a matrix that also holds 4-GPU ones.
  const bool selected = !req.only.empty();
  HostInfo load_host = host;
  if (!req.emit.empty() || req.run_index >= 0 || selected) load_host.check_gpus = false;
  SweepPlan plan;
  plan.experiment = load_experiment(req.file, req.overrides, load_host);
  const Experiment& e = plan.experiment;
  const OnlyFilter only = parse_only(req.only);
  check_only_keys(e, only);
  for (auto& r : expand_runs(e))
    if (only.matches(r)) plan.runs.push_back(std::move(r));
  if (selected && req.emit.empty() && req.run_index < 0)
    for (const RunSpec& r : plan.runs)
      if (const std::string why = run_lacks_gpus(e, r, host); !why.empty())
        throw_config("--only {}: run {}: {}", fmt::format("{}", fmt::join(req.only, " --only ")), r.id, why);
  plan.exp_dir = experiment_dir(req.results, e);
  // Only checked here: the record is written once the sweep holds the experiment (run_planned_sweep).
  check_sweep_record(plan.exp_dir, e, req.overrides, false);
  if (req.run_index >= 0) {
    if (req.run_index >= static_cast<int64_t>(plan.runs.size()))
      throw_config("--run-index {}: the sweep has {} run(s) (0 to {})", req.run_index, plan.runs.size(),
                   static_cast<int64_t>(plan.runs.size()) - 1);
    plan.runs = {plan.runs[static_cast<size_t>(req.run_index)]};
    // The selected run of an array task against the resources this task holds.
    if (req.emit.empty())
      if (const std::string why = run_lacks_gpus(e, plan.runs[0], host); !why.empty())
        throw_config("--run-index {}: run {}: {}", req.run_index, plan.runs[0].id, why);
  }
  if (req.emit.empty() && !req.allow_other_gpus) plan.other_gpus = other_gpus_here(e, plan.exp_dir);
  return plan;
}

EmittedScript emit_sweep(const SweepRequest& req, const SweepPlan& plan) {
  namespace fs = std::filesystem;
  EmitRequest emit;
  emit.kind = req.emit;
  emit.self = LaunchEnv::detect().self;
  emit.file = fs::absolute(req.file).lexically_normal().string();
  emit.results_root = fs::absolute(req.results).lexically_normal().string();
  emit.workdir = fs::current_path().string();
  emit.overrides = req.overrides;
  emit.only = req.only;
  emit.time_limit = req.time_limit;
  emit.max_requeues = req.max_requeues;
  emit.gpus_per_node = req.gpus_per_node;
  emit.allow_other_gpus = req.allow_other_gpus;
  emit.site = req.site;
  EmittedScript out;
  out.script = emit_script(emit, plan.experiment, plan.runs);
  // The scheduler opens the job's output file there before the script starts.
  std::error_code ec;
  fs::create_directories(experiment_dir(emit.results_root, plan.experiment), ec);
  if (!req.emit_file.empty()) {
    write_file_atomically(req.emit_file, out.script, 0755);  // a job script: executable
    out.groups = resource_groups(plan.experiment, plan.runs, req.gpus_per_node).size();
  }
  return out;
}

bool run_planned_sweep(const SweepRequest& req, const SweepPlan& plan, const HostInfo& host) {
  const Experiment& e = plan.experiment;
  const std::string& exp_dir = plan.exp_dir;
  if (!plan.other_gpus.empty()) throw_config("{}", plan.other_gpus);
  // One sweep of an experiment at a time, but array tasks (--run-index) side by side: each of them
  // holds its own run's lock only (run_sweep takes it), which a whole sweep also honours.
  std::error_code ec;
  std::filesystem::create_directories(exp_dir, ec);
  if (ec) throw_runtime("cannot create {}: {}", exp_dir, ec.message());
  std::unique_ptr<FileLock> lock;
  std::string holder;
  if (req.run_index < 0) {
    lock = FileLock::try_lock(sweep_lock_path(exp_dir), &holder);
    if (!lock)
      throw_runtime("experiment '{}' is already being swept by {} (lock {}); wait for it to finish, or stop it", e.name,
                    holder, sweep_lock_path(exp_dir));
  } else {
    // Refused before any output; released at once, run_sweep takes it again for the run.
    if (!FileLock::try_lock(run_lock_path(exp_dir, plan.runs[0].id), &holder))
      throw_runtime("run {} of experiment '{}' is already being run by {} (lock {})", plan.runs[0].id, e.name, holder,
                    run_lock_path(exp_dir, plan.runs[0].id));
  }
  check_sweep_record(exp_dir, e, req.overrides, true);
  SweepResult result = run_sweep(e, plan.runs, req.results, LaunchEnv::detect(host));
  if (req.run_index >= 0 && result.busy > 0) throw_runtime("{}", result.busy_lines[0]);
  if (result.failed > 0) {
    std::string ids;
    for (size_t i = 0; i < result.failed_ids.size() && i < 5; ++i) ids += (i ? ", " : "") + result.failed_ids[i];
    throw_runtime("{} of {} run(s) failed ({}{}); logs in {}/logs", result.failed, plan.runs.size(), ids,
                  result.failed_ids.size() > 5 ? ", ..." : "", exp_dir);
  }
  if (result.busy > 0)
    throw_runtime("{} run(s) were being run by another process and are not complete yet (first: {})", result.busy,
                  result.busy_lines[0]);
  return result.stopped_for_requeue;
}

}  // namespace cnnscale
