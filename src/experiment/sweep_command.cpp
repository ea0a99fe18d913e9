// Command lines of a sweep: `cnnscale train` arguments of one run (the contract in
// notes/contract.md), its launcher (direct for one rank, mpirun on a workstation, srun inside a
// Slurm allocation, as launch/ does), and Slurm/PBS job-array scripts with one task per run.
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "experiment/sweep.hpp"

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

std::string number_text(const nlohmann::json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return fmt::format("{}", v.get<double>());
}

std::vector<std::string> split_words(const char* text) {
  std::vector<std::string> out;
  if (!text) return out;
  std::stringstream ss(text);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::vector<std::string> train_arguments(const Experiment& e, const RunSpec& run, const std::string& results_root) {
  const DatasetSpec& d = run.dataset;
  std::vector<std::string> a = {"train", "--net", run.network_path, "--data", d.name};
  auto add = [&a](const std::string& flag, const std::string& value) { a.insert(a.end(), {flag, value}); };
  if (!d.data_dir.empty()) add("--data-dir", d.data_dir);
  if (d.train_samples > 0) add("--train-samples", std::to_string(d.train_samples));
  if (d.test_samples >= 0) add("--test-samples", std::to_string(d.test_samples));
  if (!d.synthetic_fill.empty()) add("--synthetic-fill", d.synthetic_fill);
  a.insert(a.end(), d.args.begin(), d.args.end());
  add("--batch", std::to_string(run.batch));
  if (run.epochs > 0)
    add("--epochs", std::to_string(run.epochs));
  else
    add("--iterations", std::to_string(run.iterations));
  add("--device", e.device);
  add("--seed", std::to_string(e.seed));
  for (const auto& [key, value] : e.solver.items()) {
    std::string flag = fmt::format("--{}", key);
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (value.is_array()) {
      std::string list;
      for (const auto& v : value) list.append(list.empty() ? "" : ",").append(number_text(v));
      add(flag, list);
    } else if (value.is_string()) {
      add(flag, value.get<std::string>());
    } else {
      add(flag, number_text(value));
    }
  }
  add("--measure", e.measure);
  if (run.whole_epochs > 0) add("--whole-epochs", std::to_string(run.whole_epochs));
  if (run.whole_samples > 0) add("--whole-samples", std::to_string(run.whole_samples));
  if (!run.gpu_mix.empty()) {
    add("--gpus", fmt::format("{}", fmt::join(run.gpu_mix, ",")));
  }
  if (run.ranks > 1) {
    if (!run.allreduce.overlap) a.push_back("--no-overlap");
    if (!run.allreduce.algo.empty()) add("--allreduce-algo", run.allreduce.algo);
  }
  add("--results", results_root);
  add("--experiment", e.name);
  add("--run-id", run.id);
  add("--tag", fmt::format("repeat={}", run.repeat));
  add("--tag", fmt::format("config_hash={}", run.config_hash));
  add("--tag", fmt::format("sweep_hash={}", e.fixed_hash()));
  add("--tag", fmt::format("network={}", run.network));
  add("--tag", fmt::format("allreduce={}", run.ranks == 1 ? std::string("single") : run.allreduce.label()));
  if (!run.gpu_mix.empty()) add("--tag", fmt::format("gpu_mix={}", fmt::join(run.gpu_mix, ".")));
  a.insert(a.end(), e.extra_args.begin(), e.extra_args.end());
  return a;
}

LaunchEnv LaunchEnv::detect() {
  LaunchEnv env;
  std::error_code ec;
  env.self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) env.self = "cnnscale";
  env.in_slurm = std::getenv("SLURM_JOB_ID") != nullptr;
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
  } else if (run.ranks > 1) {
    cmd = {env.mpirun, "-np", std::to_string(run.ranks), "--bind-to", "none"};
    // CPU ranks beyond the cores would be refused by Open MPI; they are slow but valid.
    if (e.device == "cpu" && run.ranks > static_cast<int64_t>(env.cores)) cmd.push_back("--oversubscribe");
    cmd.insert(cmd.end(), env.mpirun_args.begin(), env.mpirun_args.end());
  }
  cmd.push_back(env.self);
  auto args = train_arguments(e, run, results_root);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

std::string emit_script(const EmitRequest& req, const Experiment& e, const std::vector<RunSpec>& runs) {
  if (req.kind != "slurm" && req.kind != "pbs") throw_config("--emit: expected slurm or pbs, got '{}'", req.kind);
  if (runs.empty()) throw_config("--emit {}: no runs to emit (check --only)", req.kind);
  int64_t ranks = 1;
  for (const auto& r : runs) ranks = std::max(ranks, r.ranks);
  const bool gpu = e.device == "gpu";
  const size_t last = runs.size() - 1;
  const bool slurm = req.kind == "slurm";
  const std::string index_var = slurm ? "SLURM_ARRAY_TASK_ID" : "PBS_ARRAY_INDEX";

  std::string cmd = fmt::format("{} sweep {} --results {}", shell_quote(req.self), shell_quote(req.file),
                                shell_quote(req.results_root));
  for (const auto& o : req.overrides) cmd += fmt::format(" {}", shell_quote(o));
  for (const auto& o : req.only) cmd += fmt::format(" --only {}", shell_quote(o));
  cmd += fmt::format(" --run-index \"${{{}:-0}}\"", index_var);

  std::string s = "#!/usr/bin/env bash\n";
  const std::string exp_dir = (std::filesystem::path(req.results_root) / e.name).string();
  if (slurm) {
    s += fmt::format("#SBATCH --job-name=cnnscale-{}\n", e.name);
    s += fmt::format("#SBATCH --array=0-{}\n", last);
    s += "#SBATCH --nodes=1\n";
    s += fmt::format("#SBATCH --ntasks={}\n", ranks);
    if (gpu) s += fmt::format("#SBATCH --gpus-per-node={}\n", ranks);
    s += fmt::format("#SBATCH --time={}\n", req.time_limit);
    s += fmt::format("#SBATCH --output={}/slurm-%A_%a.out\n", exp_dir);
  } else {
    s += fmt::format("#PBS -N cnnscale-{}\n", e.name.substr(0, 15));
    // PBS refuses an array of one subjob: a single run is a plain job (index 0 by default).
    if (last > 0) s += fmt::format("#PBS -J 0-{}\n", last);
    s += fmt::format("#PBS -l select=1:ncpus={}:mpiprocs={}{}\n", std::max<int64_t>(ranks, 1), ranks,
                     gpu ? fmt::format(":ngpus={}", ranks) : "");
    s += fmt::format("#PBS -l walltime={}\n", req.time_limit);
    s += "#PBS -j oe\n";
    s += fmt::format("#PBS -o {}/\n", exp_dir);
  }
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  s += fmt::format("# Experiment '{}' ({}): {} runs, one array task each, at most {} rank(s) per run.\n", e.name,
                   req.file, runs.size(), ranks);
  s += fmt::format("# Written by `cnnscale sweep --emit {}` at {}. Task I runs run I of the sweep; a run that is\n",
                   req.kind, stamp);
  s += "# already complete is skipped, so resubmitting the script finishes an interrupted sweep.\n";
  s += fmt::format("# The sweep launches each run with {} on this node's resources.\n", slurm ? "srun" : "mpirun");
  s += "set -euo pipefail\n";
  s += "export NCCL_NVLS_ENABLE=\"${NCCL_NVLS_ENABLE:-0}\"  # shared hosts: no NVLink multicast (launch/common.sh)\n";
  s += fmt::format("cd {}\n", shell_quote(req.workdir));
  s += fmt::format("mkdir -p {}\n", shell_quote(exp_dir));
  s += fmt::format("exec {}\n", cmd);
  return s;
}

}  // namespace cnnscale
