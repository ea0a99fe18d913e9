// `cnnscale sweep FILE [key=value...]`: its flags and its printing. The work is the library's
// (experiment/sweep_job.hpp): read the experiment with its overrides and select its runs, then print
// the plan (--dry-run), write a Slurm/PBS array script (--emit) or run every run not finished yet
// (each as `cnnscale train`, or `cnnscale infer` in an inference experiment, under mpirun/srun as
// needed), one sweep of an experiment at a time.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.hpp"
#include "app/results_options.hpp"
#include "core/error.hpp"
#include "core/stop_signal.hpp"
#include "experiment/experiment.hpp"
#include "experiment/option_groups.hpp"
#include "experiment/sweep.hpp"
#include "experiment/sweep_job.hpp"

namespace cnnscale::app {

namespace {

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

void run_sweep_command(const SweepRequest& a) {
  const HostInfo host = HostInfo::detect();
  const SweepPlan plan = plan_sweep(a, host);
  if (a.dry_run) {
    print_plan(plan.experiment, plan.runs, plan.exp_dir);
    if (!plan.other_gpus.empty()) std::printf("# warning: %s\n", plan.other_gpus.c_str());
    return;
  }
  if (!a.emit.empty()) {
    const EmittedScript emitted = emit_sweep(a, plan);
    if (a.emit_file.empty()) {
      std::fputs(emitted.script.c_str(), stdout);
    } else {
      std::fprintf(stderr,
                   "sweep: wrote %s (%zu run(s), %zu resource group(s)); submit it with `bash %s` (one array per "
                   "group) or `%s %s` (one array, the largest group's resources)\n",
                   a.emit_file.c_str(), plan.runs.size(), emitted.groups, a.emit_file.c_str(),
                   a.emit == "slurm" ? "sbatch" : "qsub", a.emit_file.c_str());
    }
    return;
  }
  if (run_planned_sweep(a, plan, host)) {
    // As train: a job stopped with its state saved ends with 75, which launch/slurm.sbatch and the
    // emitted scripts requeue.
    requested_exit_code() = kExitRequeue;
    return;
  }
  std::fprintf(stderr, "sweep: report: cnnscale report %s\n", plan.exp_dir.c_str());
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto args = std::make_shared<SweepRequest>();
  SweepRequest& a = *args;
  CLI::App* cmd =
      app.add_subcommand("sweep", "Run an experiment file's matrix of runs (skipping finished ones), or plan/emit it");
  cmd->add_option("file", a.file, "Experiment YAML (experiments/*.yaml)")->required();
  cmd->add_option("overrides", a.overrides, "key=value overrides of the file (e.g. solver.lr=0.01 matrix.batch=[64])");
  using namespace option_group;
  cmd->add_option(
         "--only", a.only,
         "Run only matching matrix points, e.g. network=caffenet,batch=64|128 (repeatable); batch is the global "
         "batch, batch_per_gpu the global batch / GPUs; a setting matches only the runs it applies to "
         "(auto_start=probe: the runs of split auto)")
      ->allow_extra_args(false)
      ->group(kSweepPlan);
  cmd->add_option("--results", a.results,
                  "Results root; runs go to ROOT/<experiment>/<run-id>/, inference runs to "
                  "ROOT/<experiment>/infer/<run-id>.json (default: $CNNSCALE_RESULTS or results)")
      ->capture_default_str()
      ->group(kSweepResults);
  // As train: the environment's results root unless --results names one (after the default is captured).
  take_results_root_from_environment(a.results);
  cmd->add_flag("--dry-run", a.dry_run, "Print the plan (runs, ranks, iterations, status) and run nothing")
      ->group(kSweepPlan);
  cmd->add_flag("--allow-other-gpus", a.allow_other_gpus,
                "Resume even where the experiment's finished training runs were all measured on GPU models not "
                "visible here (they stay as they are, and are skipped; report keeps each model's rows apart)")
      ->group(kSweepResults);
  cmd->add_option("--emit", a.emit,
                  "Write a job script instead of running: `bash FILE` submits one array per resource group, "
                  "`sbatch/qsub FILE` one array over every run with the largest group's resources")
      ->check(CLI::IsMember({"slurm", "pbs"}))
      ->group(kSweepEmit);
  cmd->add_option("--emit-file", a.emit_file, "With --emit: write the script here (default: stdout)")
      ->group(kSweepEmit);
  cmd->add_option("--gpus-per-node", a.gpus_per_node,
                  "With --emit: GPUs per node of the cluster; a run of R ranks asks for ceil(R/G) nodes, at most G "
                  "ranks each (default: every run on one node; gpu_mix runs always are)")
      ->check(CLI::PositiveNumber)
      ->group(kSweepEmit);
  cmd->add_option("--time", a.time_limit, "With --emit: wall-time limit per array task")
      ->capture_default_str()
      ->group(kSweepEmit);
  CLI::Option* max_requeues = cmd->add_option("--max-requeues", a.max_requeues,
                  "With --emit slurm: how often a task whose run stopped for requeue (its time limit near) requeues "
                  "itself; a requeued run starts over, so a run longer than --time would requeue for ever (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(kSweepEmit);
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
  for (CLI::Option* o : site) o->allow_extra_args(false)->group(kSweepEmit);
  cmd->add_option("--run-index", a.run_index, "Run only the run with this index of the plan (array tasks)")
      ->check(CLI::NonNegativeNumber)
      ->group(kSweepPlan);
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
