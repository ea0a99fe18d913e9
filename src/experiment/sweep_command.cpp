// Command lines of a sweep: `cnnscale train` arguments of one run (the contract in
// notes/contract.md), its launcher (direct for one rank, mpirun on a workstation, srun inside a
// Slurm allocation, as launch/ does), and what each run asks a scheduler for (the resource groups
// of the Slurm/PBS scripts that sweep_emit.cpp writes).
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"
#include "io/requeue_record.hpp"

namespace cnnscale {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,@+%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {

std::vector<std::string> split_words(const char* text) {
  std::vector<std::string> out;
  if (!text) return out;
  std::stringstream ss(text);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::vector<std::string> train_arguments(const Experiment& e, const RunSpec& run, const std::string& results_root) {
  std::vector<std::string> a = {"train"};
  auto add = [&a](const std::string& flag, const std::string& value) { a.insert(a.end(), {flag, value}); };
  // A train setting's words for `value`, by its entry in the table (train_settings.hpp).
  auto put = [&a](const TrainSetting& s, const nlohmann::json& value) {
    const std::vector<std::string> words = s.arguments(value);
    a.insert(a.end(), words.begin(), words.end());
  };
  auto put_named = [&put](const char* name, const nlohmann::json& value) { put(*find_train_setting(name), value); };
  put_named("network", run.network_path);
  // The run's data (its fixed keys and its point's dataset axes), by the table's flags.
  const std::vector<std::string> data = run.dataset.arguments();
  a.insert(a.end(), data.begin(), data.end());
  put(*find_train_setting("batch"), run.batch);  // the global batch, matrix.batch's or batch_per_gpu's
  if (run.epochs > 0)
    put_named("epochs", run.epochs);
  else
    put_named("iterations", run.iterations);
  put_named("device", e.device);
  put_named("precision", run.precision);
  // The run's settings, each by its flag in the table (train_settings.hpp): its seed, then the fixed
  // values of the solver and train sections and the point's axis values (but the data's, above), in key
  // order.
  put(*find_train_setting("seed"), run.seed);
  nlohmann::json values = e.solver;
  values.update(e.train);
  for (const auto& [name, value] : run.settings.items())
    if (const std::string& section = find_train_setting(name)->section; !section.empty() && section != "dataset")
      values[name] = value;
  // A setting recorded Never (how the run is run or measured, not what it computes) is no part of the
  // recorded configuration: the run is tagged with its value, so that the report keeps apart the
  // points of a sweep over it rather than count them as one point's repeats.
  std::vector<std::string> tags;
  const RunContext context = run_context(e, run);
  for (const auto& [key, value] : values.items()) {
    const TrainSetting& s = *find_train_setting(key);
    if (s.refused_elsewhere() && !s.applies_to(context)) continue;  // --auto-start off split auto
    const std::vector<std::string> words = s.arguments(value);
    a.insert(a.end(), words.begin(), words.end());
    if (!s.identity() && !s.report_label.empty()) tags.push_back(fmt::format("{}={}", s.name, s.text(value)));
  }
  for (const std::string& tag : tags) add("--tag", tag);
  put_named("measure", e.measure);
  if (run.whole_epochs > 0) put_named("whole_epochs", run.whole_epochs);
  if (run.whole_samples > 0) put_named("whole_samples", run.whole_samples);
  // The rank set: matrix.gpu_mix's GPUs and the SMs of each node-local rank's green-context partition,
  // in --gpus order, or matrix.cpu_mix's slowdown factors.
  if (!run.gpu_mix.empty()) {
    put(*find_train_setting("gpu_mix"), run.gpu_mix);
    if (!run.gpu_sms.empty()) put(*find_train_setting("sms"), run.gpu_sms);
  }
  if (!run.slowdown.empty()) put(*find_train_setting("cpu_mix"), run.slowdown);
  if (run.ranks > 1) {
    // The allreduce mode's fields by their flags in the table's order; then the split (matrix.split).
    for (const TrainSetting& s : train_settings())
      if (s.part_of == "allreduce")
        if (const nlohmann::json value = run.allreduce.given(s.name); !value.is_null()) put(s, value);
    if (run.pass_split) put(*find_train_setting("split"), run.split);
  }
  add("--results", results_root);
  add("--experiment", e.name);
  add("--run-id", run.id);
  add("--tag", fmt::format("repeat={}", run.repeat));
  add("--tag", fmt::format("config_hash={}", run.config_hash));
  add("--tag", fmt::format("sweep_hash={}", e.fixed_hash()));
  add("--tag", fmt::format("network={}", run.network));
  add("--tag", fmt::format("allreduce={}", run.ranks == 1 ? std::string("single") : run.allreduce.label()));
  add("--tag", fmt::format("split={}", run.ranks == 1 ? std::string("single") : run.split));
  if (!run.gpu_mix.empty()) add("--tag", fmt::format("gpu_mix={}", GpuMix{run.gpu_mix, run.gpu_sms}.label()));
  if (!run.slowdown.empty()) add("--tag", fmt::format("cpu_mix={}", cpu_mix_label(run.slowdown)));
  // The report groups a point's repeats by their base seed and says whether their seeds varied.
  add("--tag", fmt::format("seed_base={}", run.seed_base));
  add("--tag", fmt::format("seeds={}", e.seeds));
  a.insert(a.end(), e.extra_args.begin(), e.extra_args.end());
  return a;
}

std::vector<std::string> infer_arguments(const Experiment& e, const RunSpec& run, const std::string& results_root) {
  const InferSpec& s = e.infer;
  // Each flag as infer's table (command_settings.hpp) declares it.
  auto flag = [](const std::string& name) { return find_setting(infer_settings(), name)->flag; };
  std::vector<std::string> a = {"infer", flag("network"), run.network_path};
  auto add = [&a](const std::string& flag, const std::string& value) { a.insert(a.end(), {flag, value}); };
  add(flag("batch"), fmt::format("{}", fmt::join(s.batches, ",")));
  // One process names its GPU; under mpirun --gpus gives each node-local rank its own.
  add(flag("device"), run.gpu_mix.size() == 1 ? fmt::format("gpu:{}", run.gpu_mix[0]) : e.device);
  add(flag("precision"), run.precision);
  if (run.precision == "int8") {
    const std::string* table = InferSpec::calibration_of(s.calibration_paths, run.network);
    if (!table)  // read_matrix refuses such an experiment
      throw_config("int8 run {}: infer.calibration names no table for {}", run.id, run.network);
    add(flag("calibration"), *table);
  }
  add(flag("seed"), std::to_string(e.seed));
  // The infer: keys, an axis's by the run's point. Unlike train's, no setting needs a tag for the
  // report: infer's result records every entry of its table as it ran (report_infer.cpp groups by it).
  for (const std::string& w : s.arguments(run.settings)) a.push_back(w);
  if (run.gpu_mix.size() > 1) add(flag("gpu_mix"), fmt::format("{}", fmt::join(run.gpu_mix, ",")));
  add("--results", results_root);
  add("--experiment", e.name);
  add("--run-id", run.id);
  a.insert(a.end(), e.extra_args.begin(), e.extra_args.end());
  return a;
}

LaunchEnv LaunchEnv::detect() {
  return detect(HostInfo::detect());
}

LaunchEnv LaunchEnv::detect(const HostInfo& host) {
  LaunchEnv env;
  std::error_code ec;
  env.self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) env.self = "cnnscale";
  env.in_slurm = std::getenv("SLURM_JOB_ID") != nullptr;
  if (env.in_slurm) env.gpus_per_node = host.gpus_per_node;
  if (const char* m = std::getenv("MPIRUN")) env.mpirun = m;
  env.mpirun_args = split_words(std::getenv("MPIRUN_ARGS"));
  if (const char* m = std::getenv("CNNSCALE_SRUN_MPI")) env.srun_mpi = m;
  env.cores = std::max(1u, std::thread::hardware_concurrency());
  return env;
}

std::vector<std::string> launch_command(const Experiment& e, const RunSpec& run, const std::string& results_root,
                                        const LaunchEnv& env) {
  std::vector<std::string> cmd;
  if (env.in_slurm) {
    // As launch/slurm.sbatch: a failed rank ends the step; every task sees all GPUs of its node.
    cmd = {"srun", fmt::format("--mpi={}", env.srun_mpi), "--kill-on-bad-exit=1", "--gpu-bind=none",
           fmt::format("--ntasks={}", run.ranks)};
    // A rank uses the GPU of its node-local rank: fill as few nodes as the ranks fit on, so a small
    // run in a large allocation does not spread (a gpu_mix names GPUs of one node).
    if (e.device == "gpu" && !run.gpu_mix.empty()) {
      cmd.insert(cmd.end(), {"--nodes=1", fmt::format("--ntasks-per-node={}", run.ranks)});
    } else if (e.device == "gpu" && env.gpus_per_node.value_or(0) > 0) {
      const int64_t g = *env.gpus_per_node;
      cmd.insert(cmd.end(), {fmt::format("--nodes={}", (run.ranks + g - 1) / g),
                             fmt::format("--ntasks-per-node={}", std::min(run.ranks, g))});
    }
  } else if (run.ranks > 1) {
    cmd = {env.mpirun, "-np", std::to_string(run.ranks), "--bind-to", "none"};
    // CPU ranks beyond the cores would be refused by Open MPI; they are slow but valid.
    if (e.device == "cpu" && run.ranks > static_cast<int64_t>(env.cores)) cmd.push_back("--oversubscribe");
    // Where rank 0 records a stop for requeue (the sweep sets it per run; remote ranks need -x).
    cmd.insert(cmd.end(), {"-x", kRequeueRecordEnv});
    cmd.insert(cmd.end(), env.mpirun_args.begin(), env.mpirun_args.end());
  }
  cmd.push_back(env.self);
  auto args = run.infer ? infer_arguments(e, run, results_root) : train_arguments(e, run, results_root);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

RunResources run_resources(const Experiment& e, const RunSpec& run, int64_t gpus_per_node) {
  RunResources r;
  r.ntasks = r.tasks_per_node = run.ranks;
  if (e.device != "gpu") return r;  // CPU ranks: one node, no GPU
  if (!run.gpu_mix.empty()) {
    const int64_t need = *std::max_element(run.gpu_mix.begin(), run.gpu_mix.end()) + 1;
    if (gpus_per_node > 0 && need > gpus_per_node)
      throw_config("--gpus-per-node {}: run {} uses GPUs {} of one node, but a node has {}", gpus_per_node, run.id,
                   fmt::join(run.gpu_mix, ","), gpus_per_node);
    r.gpus_per_node = need;
    return r;
  }
  if (gpus_per_node <= 0) {
    r.gpus_per_node = run.ranks;
    return r;
  }
  r.nodes = (run.ranks + gpus_per_node - 1) / gpus_per_node;
  r.tasks_per_node = r.gpus_per_node = std::min(run.ranks, gpus_per_node);
  return r;
}

std::vector<ResourceGroup> resource_groups(const Experiment& e, const std::vector<RunSpec>& runs,
                                           int64_t gpus_per_node) {
  std::map<RunResources, std::vector<size_t>> by_need;
  for (size_t i = 0; i < runs.size(); ++i) by_need[run_resources(e, runs[i], gpus_per_node)].push_back(i);
  std::vector<ResourceGroup> groups;
  for (auto& [need, indices] : by_need) groups.push_back({need, std::move(indices)});
  return groups;
}

}  // namespace cnnscale
