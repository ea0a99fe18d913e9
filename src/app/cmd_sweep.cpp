// `cnnscale sweep FILE [key=value...]`: validates an experiment file (with overrides), expands its
// matrix into runs and either prints the plan (--dry-run), writes a Slurm/PBS array script (--emit)
// or runs every run not finished yet (each as `cnnscale train`, or `cnnscale infer` in an inference
// experiment, under mpirun/srun as needed), one sweep of an experiment at a time.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "app/commands.hpp"
#include "backend/devices.hpp"
#include "core/error.hpp"
#include "core/stop_signal.hpp"
#include "experiment/experiment.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale::app {

namespace {

struct SweepArgs {
  std::string file;
  std::vector<std::string> overrides, only;
  std::string results = "results";
  bool dry_run = false;
  std::string emit, emit_file, time_limit = "02:00:00";
  int64_t max_requeues = 3;  // --emit slurm: see EmitRequest
  int64_t gpus_per_node = 0;  // --emit: 0 = every run on one node
  EmitSite site;              // --emit: --partition, --account, --qos, --constraint, --sched-option, --setup
  int64_t run_index = -1;
  bool allow_other_gpus = false;
};

// A run's rank set as the plan shows it: its GPU mix ("0@132.1@66") or CPU slowdowns ("1+3").
std::string mix_text(const RunSpec& r) {
  if (!r.gpu_mix.empty()) return GpuMix{r.gpu_mix, r.gpu_sms}.label();
  if (!r.slowdown.empty()) return cpu_mix_label(r.slowdown);
  return "-";
}

// An inference experiment's plan: every run measures the same batch list.
void print_infer_plan(const Experiment& e, const std::vector<RunSpec>& runs, const std::string& exp_dir) {
  int id_width = 40;
  for (const RunSpec& r : runs) id_width = std::max(id_width, static_cast<int>(r.id.size()));
  std::printf("# experiment %s (%s): %zu inference run(s), device %s, batch %s, results in %s/infer\n", e.name.c_str(),
              e.file.c_str(), runs.size(), e.device.c_str(), fmt::format("{}", fmt::join(e.infer.batches, ",")).c_str(),
              exp_dir.c_str());
  std::printf("%4s  %-*s %-12s %5s %-8s %-9s %6s  %s\n", "#", id_width, "run_id", "network", "ranks", "gpu_mix",
              "precision", "repeat", "status");
  size_t todo = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunSpec& r = runs[i];
    const RunStatus st = run_status(exp_dir, r);
    if (st.state != RunState::Done) ++todo;
    std::printf("%4zu  %-*s %-12s %5lld %-8s %-9s %6lld  %s\n", i, id_width, r.id.c_str(),
                std::filesystem::path(r.network).stem().c_str(), static_cast<long long>(r.ranks), mix_text(r).c_str(),
                r.precision.c_str(), static_cast<long long>(r.repeat), run_state_name(st.state));
  }
  std::printf("# %zu to run, %zu already complete\n", todo, runs.size() - todo);
}

void print_plan(const Experiment& e, const std::vector<RunSpec>& runs, const std::string& exp_dir) {
  if (e.mode == "infer") return print_infer_plan(e, runs, exp_dir);
  size_t todo = 0;
  int64_t rank_iterations = 0;
  // Mixes with SM counts and split policies make long ids and labels: the columns grow with them.
  int id_width = 52, mix_width = 8;
  for (const RunSpec& r : runs) {
    id_width = std::max(id_width, static_cast<int>(r.id.size()));
    mix_width = std::max(mix_width, static_cast<int>(mix_text(r).size()));
  }
  std::printf("# experiment %s (%s): %zu run(s), device %s, measure %s, results in %s\n", e.name.c_str(),
              e.file.c_str(), runs.size(), e.device.c_str(), e.measure.c_str(), exp_dir.c_str());
  std::printf("%4s  %-*s %-12s %6s %5s %-*s %-10s %-12s %6s %10s %12s  %s\n", "#", id_width, "run_id", "network",
              "batch", "ranks", mix_width, e.cpu_mixes.empty() ? "gpu_mix" : "cpu_mix", "allreduce", "split",
              "repeat", "iterations", "whole_iters", "status");
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunSpec& r = runs[i];
    RunStatus st = run_status(exp_dir, r);
    if (st.state != RunState::Done) {
      ++todo;
      rank_iterations += r.iterations * r.ranks;
    }
    std::printf("%4zu  %-*s %-12s %6lld %5lld %-*s %-10s %-12s %6lld %10lld %12lld  %s\n", i, id_width, r.id.c_str(),
                std::filesystem::path(r.network).stem().c_str(), static_cast<long long>(r.batch),
                static_cast<long long>(r.ranks), mix_width, mix_text(r).c_str(),
                r.ranks == 1 ? "single" : r.allreduce.label().c_str(), r.ranks == 1 ? "single" : r.split.c_str(),
                static_cast<long long>(r.repeat), static_cast<long long>(r.iterations),
                static_cast<long long>(r.whole_iterations), run_state_name(st.state));
  }
  std::printf("# %zu to run, %zu already complete; %lld rank-iterations to go\n", todo, runs.size() - todo,
              static_cast<long long>(rank_iterations));
}

// Why run `r` cannot run on this host's GPUs ("" when it can).
std::string run_lacks_gpus(const Experiment& e, const RunSpec& r, HostInfo host) {
  if (e.device != "gpu") return "";
  host.check_gpus = true;
  return r.gpu_mix.empty() ? host.lacks_gpus_for(r.ranks)
                           : host.lacks_gpu_index(*std::max_element(r.gpu_mix.begin(), r.gpu_mix.end()));
}

// The selected run of an array task against the resources this task holds.
void check_run_fits(const Experiment& e, const RunSpec& r, int64_t index, const HostInfo& host) {
  if (const std::string why = run_lacks_gpus(e, r, host); !why.empty())
    throw_config("--run-index {}: run {}: {}", index, r.id, why);
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

void run_sweep_command(const SweepArgs& a) {
  HostInfo host = HostInfo::detect();
  HostInfo load_host = host;
  // A batch script runs on compute nodes: this host's GPUs say nothing about theirs. An array task
  // holds the resources of its own run only (`bash FILE` submits one array per resource group), so
  // the run is checked against them below instead of the whole matrix.
  // With --only, the runs it selects are checked instead of the whole matrix: a 2-GPU host may run
  // the 1- and 2-GPU points of a matrix that also holds 4-GPU ones.
  const bool selected = !a.only.empty();
  if (!a.emit.empty() || a.run_index >= 0 || selected) load_host.check_gpus = false;
  Experiment e = load_experiment(a.file, a.overrides, load_host);
  const OnlyFilter only = parse_only(a.only);
  // An inference run has no batch axis, allreduce, split or CPU mix: such a filter would select
  // nothing (or everything) without saying why.
  // Nor has it train's settings but the seed, and a training run has no infer key.
  for (const auto& [key, values] : only.terms) {
    const TrainSetting* s = find_train_setting(key);
    const bool train_key = (s && s->part_of.empty()) || key == "batch" || key == "allreduce" || key == "split" ||
                           key == "cpu_mix" || key == "batch_per_gpu";
    const bool infer_key = infer_axis_keys().count(key) > 0;
    if (e.mode == "infer" && train_key && !infer_key && key != "seed")
      throw_config(
          "--only {}=...: an inference experiment has no '{}' (network, gpus, gpu_mix, precision, repeat, seed, or "
          "an infer key such as seconds)",
          key, key);
    if (e.mode != "infer" && infer_key && !train_key)
      throw_config("--only {}=...: '{}' is a key of inference experiments (infer.{})", key, key, key);
  }
  std::vector<RunSpec> runs;
  for (auto& r : expand_runs(e))
    if (only.matches(r)) runs.push_back(std::move(r));
  if (selected && a.emit.empty() && a.run_index < 0)
    for (const RunSpec& r : runs)
      if (const std::string why = run_lacks_gpus(e, r, host); !why.empty())
        throw_config("--only {}: run {}: {}", fmt::format("{}", fmt::join(a.only, " --only ")), r.id, why);
  const std::string exp_dir = experiment_dir(a.results, e);
  // Only checked here: the record is written once this sweep holds the experiment (below).
  check_sweep_record(exp_dir, e, a.overrides, false);

  if (a.run_index >= 0) {
    if (a.run_index >= static_cast<int64_t>(runs.size()))
      throw_config("--run-index {}: the sweep has {} run(s) (0 to {})", a.run_index, runs.size(),
                   static_cast<int64_t>(runs.size()) - 1);
    runs = {runs[static_cast<size_t>(a.run_index)]};
    if (a.emit.empty()) check_run_fits(e, runs[0], a.run_index, host);
  }
  const std::string other_gpus = a.emit.empty() && !a.allow_other_gpus ? other_gpus_here(e, exp_dir) : "";
  if (a.dry_run) {
    print_plan(e, runs, exp_dir);
    if (!other_gpus.empty()) std::printf("# warning: %s\n", other_gpus.c_str());
    return;
  }
  if (!other_gpus.empty()) throw_config("{}", other_gpus);
  if (!a.emit.empty()) {
    namespace fs = std::filesystem;
    EmitRequest req;
    req.kind = a.emit;
    req.self = LaunchEnv::detect().self;
    req.file = fs::absolute(a.file).lexically_normal().string();
    req.results_root = fs::absolute(a.results).lexically_normal().string();
    req.workdir = fs::current_path().string();
    req.overrides = a.overrides;
    req.only = a.only;
    req.time_limit = a.time_limit;
    req.max_requeues = a.max_requeues;
    req.gpus_per_node = a.gpus_per_node;
    req.allow_other_gpus = a.allow_other_gpus;
    req.site = a.site;
    const std::string script = emit_script(req, e, runs);
    // The scheduler opens the job's output file there before the script starts.
    std::error_code ec;
    fs::create_directories(experiment_dir(req.results_root, e), ec);
    if (a.emit_file.empty()) {
      std::fputs(script.c_str(), stdout);
    } else {
      write_file_atomically(a.emit_file, script, 0755);  // a job script: executable
      const size_t groups = resource_groups(e, runs, a.gpus_per_node).size();
      std::fprintf(stderr,
                   "sweep: wrote %s (%zu run(s), %zu resource group(s)); submit it with `bash %s` (one array per "
                   "group) or `%s %s` (one array, the largest group's resources)\n",
                   a.emit_file.c_str(), runs.size(), groups, a.emit_file.c_str(), a.emit == "slurm" ? "sbatch" : "qsub",
                   a.emit_file.c_str());
    }
    return;
  }
  // One sweep of an experiment at a time, but array tasks (--run-index) side by side: each of them
  // holds its own run's lock only (run_sweep takes it), which a whole sweep also honours.
  std::error_code ec;
  std::filesystem::create_directories(exp_dir, ec);
  if (ec) throw_runtime("cannot create {}: {}", exp_dir, ec.message());
  std::unique_ptr<FileLock> lock;
  std::string holder;
  if (a.run_index < 0) {
    lock = FileLock::try_lock(sweep_lock_path(exp_dir), &holder);
    if (!lock)
      throw_runtime("experiment '{}' is already being swept by {} (lock {}); wait for it to finish, or stop it", e.name,
                    holder, sweep_lock_path(exp_dir));
  } else {
    // Refused before any output; released at once, run_sweep takes it again for the run.
    if (!FileLock::try_lock(run_lock_path(exp_dir, runs[0].id), &holder))
      throw_runtime("run {} of experiment '{}' is already being run by {} (lock {})", runs[0].id, e.name, holder,
                    run_lock_path(exp_dir, runs[0].id));
  }
  check_sweep_record(exp_dir, e, a.overrides, true);
  SweepResult result = run_sweep(e, runs, a.results, LaunchEnv::detect(host));
  if (a.run_index >= 0 && result.busy > 0) throw_runtime("{}", result.busy_lines[0]);
  if (result.failed > 0) {
    std::string ids;
    for (size_t i = 0; i < result.failed_ids.size() && i < 5; ++i) ids += (i ? ", " : "") + result.failed_ids[i];
    throw_runtime("{} of {} run(s) failed ({}{}); logs in {}/logs", result.failed, runs.size(), ids,
                  result.failed_ids.size() > 5 ? ", ..." : "", exp_dir);
  }
  if (result.busy > 0)
    throw_runtime("{} run(s) were being run by another process and are not complete yet (first: {})", result.busy,
                  result.busy_lines[0]);
  if (result.stopped_for_requeue) {
    // As train: a job stopped with its state saved ends with 75, which launch/slurm.sbatch and the
    // emitted scripts requeue.
    requested_exit_code() = kExitRequeue;
    return;
  }
  std::fprintf(stderr, "sweep: report: cnnscale report %s\n", exp_dir.c_str());
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  SweepArgs& a = *args;
  CLI::App* cmd =
      app.add_subcommand("sweep", "Run an experiment file's matrix of runs (skipping finished ones), or plan/emit it");
  cmd->add_option("file", a.file, "Experiment YAML (experiments/*.yaml)")->required();
  cmd->add_option("overrides", a.overrides, "key=value overrides of the file (e.g. solver.lr=0.01 matrix.batch=[64])");
  cmd->add_option(
         "--only", a.only,
         "Run only matching matrix points, e.g. network=caffenet,batch=64|128 (repeatable); batch is the global "
         "batch, batch_per_gpu the global batch / GPUs; a setting matches only the runs it applies to "
         "(auto_start=probe: the runs of split auto)")
      ->allow_extra_args(false);
  // As train: the environment's results root unless --results names one.
  if (const char* env = std::getenv("CNNSCALE_RESULTS"); env && *env) a.results = env;
  cmd->add_option("--results", a.results,
                  "Results root; runs go to ROOT/<experiment>/<run-id>/, inference runs to "
                  "ROOT/<experiment>/infer/<run-id>.json (default: $CNNSCALE_RESULTS or results)")
      ->capture_default_str();
  cmd->add_flag("--dry-run", a.dry_run, "Print the plan (runs, ranks, iterations, status) and run nothing");
  cmd->add_flag("--allow-other-gpus", a.allow_other_gpus,
                "Resume even where the experiment's finished training runs were all measured on GPU models not "
                "visible here (they stay as they are, and are skipped; report keeps each model's rows apart)");
  cmd->add_option("--emit", a.emit,
                  "Write a job script instead of running: `bash FILE` submits one array per resource group, "
                  "`sbatch/qsub FILE` one array over every run with the largest group's resources")
      ->check(CLI::IsMember({"slurm", "pbs"}));
  cmd->add_option("--emit-file", a.emit_file, "With --emit: write the script here (default: stdout)");
  cmd->add_option("--gpus-per-node", a.gpus_per_node,
                  "With --emit: GPUs per node of the cluster; a run of R ranks asks for ceil(R/G) nodes, at most G "
                  "ranks each (default: every run on one node; gpu_mix runs always are)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--time", a.time_limit, "With --emit: wall-time limit per array task")->capture_default_str();
  CLI::Option* max_requeues = cmd->add_option("--max-requeues", a.max_requeues,
                  "With --emit slurm: how often a task whose run stopped for requeue (its time limit near) requeues "
                  "itself; a requeued run starts over, so a run longer than --time would requeue for ever (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Site settings: scheduler directives and setup lines, so that an emitted script runs unedited.
  std::vector<CLI::Option*> site = {
      cmd->add_option("--partition", a.site.partition,
                      "With --emit: Slurm partition (#SBATCH --partition) or PBS queue (#PBS -q)"),
      cmd->add_option("--account", a.site.account, "With --emit: account charged (#SBATCH --account, #PBS -A)"),
      cmd->add_option("--qos", a.site.qos, "With --emit slurm: quality of service (#SBATCH --qos)"),
      cmd->add_option("--constraint", a.site.constraint, "With --emit slurm: node features (#SBATCH --constraint)"),
      cmd->add_option("--sched-option", a.site.options,
                      "With --emit: any further scheduler option, one directive line each (repeatable), e.g. "
                      "--sched-option=--mem=0 or --sched-option='-l place=scatter'"),
      cmd->add_option("--setup", a.site.setup,
                      "With --emit: a shell line every array task runs before its run, e.g. 'module load cuda' "
                      "(repeatable, in order)")};
  for (CLI::Option* o : site) o->allow_extra_args(false);
  cmd->add_option("--run-index", a.run_index, "Run only the run with this index of the plan (array tasks)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([args, site, max_requeues] {
    if (!args->emit_file.empty() && args->emit.empty()) throw_config("--emit-file needs --emit slurm|pbs");
    if (args->gpus_per_node != 0 && args->emit.empty()) throw_config("--gpus-per-node needs --emit slurm|pbs");
    if (max_requeues->count() > 0 && args->emit != "slurm") throw_config("--max-requeues needs --emit slurm");
    for (CLI::Option* o : site)
      if (o->count() > 0 && args->emit.empty()) throw_config("{} needs --emit slurm|pbs", o->get_name());
    if (args->dry_run && !args->emit.empty()) throw_config("--dry-run and --emit are exclusive");
    run_sweep_command(*args);
  });
}

}  // namespace cnnscale::app
