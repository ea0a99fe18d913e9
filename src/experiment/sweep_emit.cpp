// `sweep --emit slurm|pbs`: a job-array script with one task per run, which submits itself as one
// array per resource group when run with bash. Every outside value in it (paths, names, site
// settings) is either a shell word quoted for the shell or, in a #SBATCH/#PBS line, which the
// scheduler reads and no quoting protects, checked and refused with a line naming where it came from.
#include <fmt/ranges.h>

#include <cctype>
#include <ctime>
#include <filesystem>

#include "core/error.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {

namespace {

// Seconds before the time limit at which Slurm signals the task (as launch/slurm.sbatch): time for
// a step, a checkpoint and the results of the largest networks.
constexpr int kStopLeadSeconds = 120;

// `value` for an error line or a comment: control characters written as escapes (\n, \t, \x01), so
// that it stays on one line and shows what is there.
std::string printable(const std::string& value) {
  std::string out;
  for (const unsigned char c : value) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

// What makes `value` unusable in a directive line, or "". sbatch and qsub split a directive into
// words at blanks, take '"' and '\' as quoting, and end it at '#' (a comment); a control character,
// a newline above all, would end the line and make the rest a command of the job's shell. With
// `words` the value is a list of options (blanks separate them, as on the command line).
std::string directive_problem(const std::string& value, bool words, const std::string& also_refused) {
  if (value.empty()) return "it is empty";
  for (const unsigned char c : value) {
    if (c == '\n') return "a newline";
    if (c < 0x20 || c == 0x7f) return fmt::format("a control character ({})", printable(std::string(1, c)));
    if (!words && c == ' ') return "a blank";
    if (c == '"' || c == '\'' || c == '\\' || c == '#' || also_refused.find(c) != std::string::npos)
      return fmt::format("'{}'", static_cast<char>(c));
  }
  return "";
}

// The directive text of `value`, or a ConfigError naming its source (an option, a key) and the line.
std::string directive_value(const std::string& value, const std::string& source, const std::string& line,
                            bool words = false, const std::string& also_refused = "") {
  if (const std::string why = directive_problem(value, words, also_refused); !why.empty())
    throw_config(
        "{} '{}': cannot go into a '{}' line of the job script: it contains {} (such a line takes no "
        "control characters, {}quotes, '\\' or '#'{})",
        source, printable(value), line, why, words ? "" : "blanks, ",
        also_refused.empty() ? "" : fmt::format(" or '{}'", also_refused));
  return value;
}

// A wall-time limit as both schedulers read it: 90, 02:00:00, 1-12:00:00.
void check_time_limit(const std::string& t) {
  bool ok = !t.empty() && std::isdigit(static_cast<unsigned char>(t.front())) &&
            std::isdigit(static_cast<unsigned char>(t.back()));
  for (const char c : t) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == ':' || c == '-');
  if (!ok)
    throw_config("--time '{}': expected a wall-time limit such as 02:00:00 or 1-12:00:00 (digits, ':' and '-')",
                 printable(t));
}

std::string describe(const RunResources& n, size_t runs) {
  if (n.gpus_per_node == 0) return fmt::format("{} run(s) of {} CPU rank(s) on 1 node", runs, n.ntasks);
  return fmt::format("{} run(s) of {} rank(s) on {} node(s) x {} GPU(s)", runs, n.ntasks, n.nodes, n.gpus_per_node);
}

std::vector<std::string> slurm_options(const RunResources& n) {
  std::vector<std::string> o = {fmt::format("--nodes={}", n.nodes), fmt::format("--ntasks={}", n.ntasks),
                                fmt::format("--ntasks-per-node={}", n.tasks_per_node)};
  if (n.gpus_per_node > 0) o.push_back(fmt::format("--gpus-per-node={}", n.gpus_per_node));
  return o;
}

std::string pbs_select(const RunResources& n) {
  return fmt::format("select={}:ncpus={}:mpiprocs={}{}", n.nodes, n.tasks_per_node, n.tasks_per_node,
                     n.gpus_per_node > 0 ? fmt::format(":ngpus={}", n.gpus_per_node) : "");
}

// The site's directives (--partition, --account, ...), checked; PBS has no QOS or feature
// constraint of its own (those go in its resource list: --sched-option '-l ...').
std::string site_directives(const EmitSite& site, bool slurm) {
  std::string s;
  const std::string prefix = slurm ? "#SBATCH" : "#PBS";
  auto add = [&](const std::string& value, const char* option, const char* slurm_flag, const char* pbs_flag) {
    if (value.empty()) return;
    if (!slurm && !pbs_flag)
      throw_config("{} {}: PBS has no such setting; give it as a resource with --sched-option '-l ...'", option,
                   printable(value));
    const std::string line = fmt::format("{} {}", prefix, slurm ? slurm_flag : pbs_flag);
    s += fmt::format("{}{}{}\n", line, slurm ? "=" : " ", directive_value(value, option, line));
  };
  add(site.partition, "--partition", "--partition", "-q");
  add(site.account, "--account", "--account", "-A");
  add(site.qos, "--qos", "--qos", nullptr);
  add(site.constraint, "--constraint", "--constraint", nullptr);
  for (const auto& o : site.options) {
    if (o.empty() || o[0] != '-')
      throw_config("--sched-option '{}': expected a scheduler option (starting with '-')", printable(o));
    s += fmt::format("{} {}\n", prefix, directive_value(o, "--sched-option", prefix, true));
  }
  return s;
}

// The site's setup lines (module load ...), run by every task before the sweep: the user's own
// shell code, kept to one line each so that the script reads as it was asked for.
std::string setup_lines(const std::vector<std::string>& setup) {
  if (setup.empty()) return "";
  std::string s =
      "# Site setup (--setup), run by every task before its run. Module and environment scripts\n"
      "# may read unset variables: -u is off while they run.\n"
      "set +u\n";
  for (const auto& line : setup) {
    for (const unsigned char c : line)
      if (c < 0x20 || c == 0x7f)
        throw_config(
            "--setup '{}': one shell line each (give several --setup for several commands); it contains "
            "{}",
            printable(line), c == '\n' ? "a newline" : "a control character");
    if (line.find_first_not_of(' ') == std::string::npos) throw_config("--setup: an empty command");
    s += line + "\n";
  }
  return s + "set -u\n";
}

}  // namespace

std::string emit_script(const EmitRequest& req, const Experiment& e, const std::vector<RunSpec>& runs) {
  if (req.kind != "slurm" && req.kind != "pbs") throw_config("--emit: expected slurm or pbs, got '{}'", req.kind);
  if (runs.empty()) throw_config("--emit {}: no runs to emit (check --only)", req.kind);
  if (req.gpus_per_node < 0) throw_config("--gpus-per-node {}: expected at least 1", req.gpus_per_node);
  check_time_limit(req.time_limit);
  const std::vector<ResourceGroup> groups = resource_groups(e, runs, req.gpus_per_node);
  // `sbatch FILE` runs every run in one array: each task gets the most any group needs.
  RunResources most;
  for (const auto& g : groups) {
    most.nodes = std::max(most.nodes, g.need.nodes);
    most.ntasks = std::max(most.ntasks, g.need.ntasks);
    most.tasks_per_node = std::max(most.tasks_per_node, g.need.tasks_per_node);
    most.gpus_per_node = std::max(most.gpus_per_node, g.need.gpus_per_node);
  }
  const size_t last = runs.size() - 1;
  const bool slurm = req.kind == "slurm";
  const std::string scheduler = slurm ? "sbatch" : "qsub";
  const std::string index_var = slurm ? "SLURM_ARRAY_TASK_ID" : "PBS_ARRAY_INDEX";
  const std::string job_var = slurm ? "SLURM_JOB_ID" : "PBS_JOBID";
  const std::string exp_dir = (std::filesystem::path(req.results_root) / e.name).string();

  std::string cmd = fmt::format("{} sweep {} --results {}", shell_quote(req.self), shell_quote(req.file),
                                shell_quote(req.results_root));
  for (const auto& o : req.overrides) cmd += fmt::format(" {}", shell_quote(o));
  // device: auto is decided once, here: a task sized for a 1-GPU run would decide cpu for a matrix
  // that needs more. The resolved device is what run ids and hashes cover, so they do not change.
  if (e.device_requested == "auto") cmd += fmt::format(" device={}", e.device);
  for (const auto& o : req.only) cmd += fmt::format(" --only {}", shell_quote(o));
  if (req.allow_other_gpus) cmd += " --allow-other-gpus";
  cmd += " --run-index \"$run\"";

  std::string s = "#!/usr/bin/env bash\n";
  if (slurm) {
    const std::string name = directive_value(e.name, "the experiment's name", "#SBATCH --job-name");
    s += fmt::format("#SBATCH --job-name=cnnscale-{}\n", name);
    s += fmt::format("#SBATCH --array=0-{}\n", last);
    for (const auto& o : slurm_options(most)) s += fmt::format("#SBATCH {}\n", o);
    s += fmt::format("#SBATCH --time={}\n", req.time_limit);
    // '%' starts a Slurm file-name pattern (%A, %a); '%%' is a '%' of the path itself.
    std::string out = directive_value(req.results_root, "--results", "#SBATCH --output") + "/" + name;
    for (size_t at = out.find('%'); at != std::string::npos; at = out.find('%', at + 2)) out.insert(at, "%");
    s += fmt::format("#SBATCH --output={}/slurm-%A_%a.out\n", out);
    // A requeued task appends to its output instead of replacing the first part's.
    s += "#SBATCH --open-mode=append\n";
    s += fmt::format("#SBATCH --signal=B:USR1@{}\n", kStopLeadSeconds);
    s += "#SBATCH --requeue\n";
  } else {
    const std::string name = directive_value(e.name, "the experiment's name", "#PBS -N", false, ":");
    s += fmt::format("#PBS -N cnnscale-{}\n", name.substr(0, 15));
    // PBS refuses an array of one subjob: a single run is a plain job (index 0 by default).
    if (last > 0) s += fmt::format("#PBS -J 0-{}\n", last);
    s += fmt::format("#PBS -l {}\n", pbs_select(most));
    s += fmt::format("#PBS -l walltime={}\n", req.time_limit);
    s += "#PBS -j oe\n";
    // PBS reads "host:path": a ':' in the folder would be taken for a host name.
    s += fmt::format("#PBS -o {}/{}/\n", directive_value(req.results_root, "--results", "#PBS -o", false, ":"), name);
    s += "#PBS -r y\n";  // rerunnable: a pre-empted or failed node's job is run again
  }
  s += site_directives(req.site, slurm);
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  s += fmt::format("# Experiment '{}' ({}): {} run(s) in {} resource group(s):\n", printable(e.name),
                   printable(req.file), runs.size(), groups.size());
  for (const auto& g : groups)
    s += fmt::format("#   {}: runs {}\n", describe(g.need, g.runs.size()), fmt::join(g.runs, ","));
  s += fmt::format("# Written by `cnnscale sweep --emit {}` at {}. Submit it one of two ways:\n", req.kind, stamp);
  s += fmt::format(
      "#   {:<13} one job array per group above, each asking for its group's resources (the\n"
      "#   {:<13} {} options override the #{} lines; its runs go in CNNSCALE_RUN_LIST)\n",
      "bash FILE", "", scheduler, slurm ? "SBATCH" : "PBS");
  s += fmt::format(
      "#   {:<13} one job array over every run, every task asking for the largest group's\n"
      "#   {:<13} resources (the header above): smaller runs leave part idle\n",
      scheduler + " FILE", "");
  s += "# Array task T runs run CNNSCALE_RUN_LIST[T] of the sweep (':'-separated run indices) when set,\n";
  s += "# else run T. A run already complete is skipped, so resubmitting finishes an interrupted sweep.\n";
  s += fmt::format("# The sweep launches each run with {} on the job's nodes.\n", slurm ? "srun" : "mpirun");
  if (slurm)
    s += fmt::format(
        "# {} s before the time limit Slurm sends USR1, which this script passes to the sweep: the run\n"
        "# stops at a step boundary with its checkpoint and results marked interrupted, and the task\n"
        "# ends with 75 and is requeued.\n",
        kStopLeadSeconds);
  else
    s += "# A task whose run stopped for a signal (SIGTERM at the walltime, pre-emption) ends with 75:\n"
         "# submit again (bash FILE) to continue; finished runs are skipped.\n";
  s += "set -euo pipefail\n";
  s += "export NCCL_NVLS_ENABLE=\"${NCCL_NVLS_ENABLE:-0}\"  # shared hosts: no NVLink multicast (launch/common.sh)\n";

  // Submission mode: outside a job, one submission per group.
  s += fmt::format("if [ -z \"${{{}:-}}\" ]; then\n", job_var);
  s += fmt::format(
      "  command -v {0} >/dev/null || {{ echo \"cnnscale: {0} not found: bash FILE submits the sweep "
      "from a login node\" >&2; exit 2; }}\n",
      scheduler);
  s += "  script=${BASH_SOURCE[0]}\n";
  s += fmt::format("  mkdir -p {}  # the scheduler opens the job's output file there\n", shell_quote(exp_dir));
  s += "  submit() {  # what, then the scheduler's options\n";
  s += "    local what=$1 out\n";
  s += "    shift\n";
  if (slurm) {
    s += "    out=$(sbatch \"$@\" \"$script\") || { echo \"cnnscale: sbatch failed for $what\" >&2; exit 1; }\n";
  } else {
    // Options override the directives, but nothing undoes '#PBS -J': qsub reads the script without it.
    s += "    out=$(sed '/^#PBS -J /d' \"$script\" | qsub \"$@\") || { echo \"cnnscale: qsub failed for $what\" >&2; "
         "exit 1; }\n";
  }
  s += "    echo \"$what: $out\"\n";
  s += "  }\n";
  for (const auto& g : groups) {
    const std::string list = fmt::format("{}", fmt::join(g.runs, ":"));
    std::vector<std::string> opts;
    if (slurm) {
      opts.push_back(fmt::format("--array=0-{}", g.runs.size() - 1));
      for (const auto& o : slurm_options(g.need)) opts.push_back(o);
      opts.push_back(fmt::format("--export=ALL,CNNSCALE_RUN_LIST={}", list));
    } else {
      if (g.runs.size() > 1) opts.insert(opts.end(), {"-J", fmt::format("0-{}", g.runs.size() - 1)});
      opts.insert(opts.end(), {"-l", pbs_select(g.need), "-v", fmt::format("CNNSCALE_RUN_LIST={}", list)});
    }
    s +=
        fmt::format("  submit {} {}\n", shell_quote(fmt::format("{} [runs {}]", describe(g.need, g.runs.size()), list)),
                    fmt::join(opts, " "));
  }
  s += "  exit 0\n";
  s += "fi\n";

  // Job mode: this task's run.
  s += fmt::format("cd {}\n", shell_quote(req.workdir));
  s += setup_lines(req.site.setup);
  s += fmt::format("mkdir -p {}\n", shell_quote(exp_dir));
  if (!slurm && most.nodes > 1) {
    s += "# A multi-node run spans the job's nodes: mpirun places its ranks from the node file.\n";
    s += "if [ -n \"${PBS_NODEFILE:-}\" ] && [ \"$(sort -u \"$PBS_NODEFILE\" | wc -l)\" -gt 1 ]; then\n";
    s += "  export MPIRUN_ARGS=\"--hostfile $PBS_NODEFILE ${MPIRUN_ARGS:-}\"\n";
    s += "fi\n";
  }
  s += fmt::format("task=${{{}:-0}}\n", index_var);
  s += "run=$task\n";
  s += "if [ -n \"${CNNSCALE_RUN_LIST:-}\" ]; then\n";
  s += "  IFS=':,' read -r -a list <<< \"$CNNSCALE_RUN_LIST\"\n";
  s += "  if ! [[ $task =~ ^[0-9]+$ ]] || (( 10#$task >= ${#list[@]} )); then\n";
  s += "    echo \"cnnscale: array task $task has no run: CNNSCALE_RUN_LIST=$CNNSCALE_RUN_LIST lists ${#list[@]}\" "
       ">&2\n";
  s += "    exit 2\n";
  s += "  fi\n";
  s += "  run=${list[10#$task]}\n";
  s += "fi\n";
  s += fmt::format("if ! [[ $run =~ ^[0-9]+$ ]] || (( 10#$run > {} )); then\n", last);
  s += fmt::format("  echo \"cnnscale: run index '$run' is out of range: the sweep has {} run(s) (0 to {})\" >&2\n",
                   runs.size(), last);
  s += "  exit 2\n";
  s += "fi\n";
  s += "run=$((10#$run))\n";
  // Not exec: this shell stays to take the scheduler's signals and pass them on to the sweep (which
  // passes them to its run), and to requeue the task when the run stopped for it (exit 75).
  s += fmt::format("{} &\n", cmd);
  s += "sweep=$!\n";
  for (const char* sig : {"USR1", "TERM", "INT"})
    s += fmt::format("trap 'kill -{0} \"$sweep\" 2>/dev/null || true' {0}\n", sig);
  s += "# A trapped signal interrupts wait while the sweep still runs: wait again until it has ended;\n";
  s += "# then wait gives its saved exit status (also when bash reaped it in between).\n";
  s += "while kill -0 \"$sweep\" 2>/dev/null; do\n";
  s += "  wait \"$sweep\" || true\n";
  s += "done\n";
  s += "rc=0\n";
  s += "wait \"$sweep\" || rc=$?\n";
  if (slurm) {
    // SLURM_RESTART_COUNT: how often this job was requeued (unset on its first start); read as
    // digits only, as bash arithmetic would evaluate anything else as an expression.
    s += "if [ \"$rc\" -eq 75 ]; then\n";
    s += "  restarts=${SLURM_RESTART_COUNT:-0}\n";
    s += "  [[ $restarts =~ ^[0-9]+$ ]] || restarts=0\n";
    s += fmt::format("  if (( 10#$restarts < {} )); then\n", req.max_requeues);
    s += fmt::format("    echo \"cnnscale: run $run stopped for requeue (exit 75): requeueing job $SLURM_JOB_ID (requeue "
                     "$((10#$restarts + 1)) of at most {})\" >&2\n",
                     req.max_requeues);
    s += "    scontrol requeue \"$SLURM_JOB_ID\" || echo \"cnnscale: scontrol requeue failed: submit again to "
         "continue\" >&2\n";
    s += "  else\n";
    s += fmt::format("    echo \"cnnscale: run $run stopped for requeue (exit 75), but job $SLURM_JOB_ID was requeued "
                     "$((10#$restarts)) time(s) already (sweep --max-requeues {}): not again; a requeued run starts "
                     "over: raise --time, then submit again\" >&2\n",
                     req.max_requeues);
    s += "  fi\n";
    s += "fi\n";
  } else {
    s += "if [ \"$rc\" -eq 75 ]; then\n";
    s += "  echo \"cnnscale: run $run stopped for requeue (exit 75): submit again (bash FILE) to continue\" >&2\n";
    s += "fi\n";
  }
  s += "exit \"$rc\"\n";
  return s;
}

}  // namespace cnnscale
