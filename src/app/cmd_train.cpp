// `cnnscale train`: one network, one dataset, one device per rank. Validates every option before
// any heavy work (so bad input costs one clear line and exit 2), runs the Trainer, shows progress
// on stderr and, with --json, prints one JSON line of results on stdout. Under mpirun/srun the
// ranks train data-parallel (train_parallel.cpp binds devices and builds the communicator); only
// rank 0 shows progress and prints the JSON line, which then describes the whole job.
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/train_parallel.hpp"
#include "app/train_progress.hpp"
#include "app/train_results.hpp"
#include "backend/backend.hpp"
#include "core/stop_signal.hpp"
#include "data/datasets.hpp"
#include "data/fashion_mnist.hpp"
#include "backend/devices.hpp"
#include "parallel/mpi_env.hpp"
#include "io/results_writer.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"

namespace cnnscale::app {

namespace {

struct TrainArgs {
  std::string net;
  std::string data;
  std::string synthetic_fill = "gaussian";
  std::string data_dir = FashionMnistDataset::kDefaultDir;
  int64_t train_samples = 0, test_samples = -1;
  std::string device = "cpu";
  std::vector<int64_t> input_shape;
  int64_t classes = 0;
  int pool_batches = 8;
  TrainOptions options;
  // -1: not given (then one epoch); given values must be >= 1.
  int64_t epochs = -1, iterations = -1;
  SolverConfig solver;
  std::string lr_policy = "fixed";
  bool json = false;
  ParallelArgs parallel;
  MeasureArgs measure;
};

// Flags are the YAML keys with '-' for '_' (solver_config.hpp); --step/--warmup are shorter.
std::string flag_for(const std::string& key) {
  if (key == "warmup_epochs") return "--warmup";
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

nlohmann::json nullable(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

void run_train(TrainArgs& a) {
  // ---- validate the options (exit 2 on any problem, before anything is loaded) -------------------
  a.solver.policy = parse_lr_policy(a.lr_policy);
  a.solver.validate(
      [](const std::string& key, const std::string& message) { throw_config("{}: {}", flag_for(key), message); });
  if (a.epochs != -1 && a.epochs < 1) throw_config("--epochs must be >= 1, got {}", a.epochs);
  if (a.iterations != -1 && a.iterations < 1) throw_config("--iterations must be >= 1, got {}", a.iterations);
  a.options.epochs = a.epochs > 0 ? a.epochs : 0;
  a.options.iterations = a.iterations > 0 ? a.iterations : 0;
  if (a.options.epochs == 0 && a.options.iterations == 0) a.options.epochs = 1;
  const DatasetInfo& dataset = dataset_info(a.data);
  const bool synthetic = dataset.synthetic;
  if (!synthetic && (!a.input_shape.empty() || a.classes > 0))
    throw_config("--input-shape/--classes apply to synthetic data only ({} samples are {}, {} classes)", a.data,
                 fmt::join(dataset.sample_shape, "x"), dataset.classes);
  if (!a.input_shape.empty() &&
      (a.input_shape.size() != 3 || a.input_shape[0] < 1 || a.input_shape[1] < 1 || a.input_shape[2] < 1))
    throw_config("--input-shape: expected three positive extents C,H,W");
  if (a.options.resume == "auto" && a.options.checkpoint_dir.empty())
    throw_config("--resume auto needs --checkpoint-dir");
  if (!a.options.resume.empty() && a.options.resume != "auto" && !std::filesystem::is_regular_file(a.options.resume))
    throw_config("--resume {}: no such checkpoint file", a.options.resume);
  validate_measure_args(a.measure);
  apply_measure_args(a.measure, a.options);
  // Where the run will write, checked now rather than after hours of training. Only rank 0
  // writes results and checkpoints.
  if (const MpiEnv* env = MpiEnv::current(); !env || env->rank() == 0) {
    if (!a.measure.no_results) check_writable_dir("--results", a.measure.results_root);
    if (!a.options.checkpoint_dir.empty()) check_writable_dir("--checkpoint-dir", a.options.checkpoint_dir);
  }
  // Fault injection for the divergence tests (documented in tests/, not a user option).
  if (const char* v = std::getenv("CNNSCALE_INJECT_NONFINITE_AT"); v && *v)
    a.options.inject_nonfinite_at = std::strtoll(v, nullptr, 10);
  // The global batch and each rank's share (a single process: the batch itself).
  ParallelRun par(a.parallel, a.device, a.options.batch);
  a.options.batch = par.global_batch();

  NetOptions net_options;
  if (synthetic) {
    if (!a.input_shape.empty()) net_options.input_shape = a.input_shape;
    if (a.classes > 0) net_options.classes = a.classes;
  } else {
    net_options.input_shape = dataset.sample_shape;
    net_options.classes = dataset.classes;
  }
  const std::string net_file = resolve_network_path(a.net);
  NetSpec spec = NetSpec::load(net_file, net_options);

  const DatasetRequest request{a.data, a.data_dir, a.train_samples, a.test_samples, a.synthetic_fill, a.options.seed};
  const auto [train, test] = open_datasets(request, spec.input_shape(), spec.classes(), a.options.batch);
  if (synthetic) {
    a.options.device_pool = true;
    a.options.pool_batches = a.pool_batches;
  }

  nlohmann::json run_config = {{"net", spec.name()},     {"net_file", net_file},
                               {"data", a.data},         {"batch", a.options.batch},
                               {"seed", a.options.seed}, {"train_samples", train->size()},
                               {"device", par.device()}, {"solver", a.solver.describe()}};
  // Informational: a run may resume with another rank count at the same global batch (the data
  // order depends only on the seed), so these are not compared on resume.
  if (par.active()) {
    run_config["world_size"] = par.world_size();
    run_config["rank_batches"] = par.rank_batches();
  }
  if (synthetic) {
    run_config["synthetic_fill"] = a.synthetic_fill;
    run_config["input_shape"] = spec.input_shape();
    run_config["classes"] = spec.classes();
  }
  // Chosen now and stored in the checkpoints, so that a resumed run (after a requeue) writes its
  // results under the same id (not compared on resume).
  const std::string run_id =
      a.measure.run_id.empty() ? make_run_id(run_config.dump() + spec.resolved_yaml()) : a.measure.run_id;
  run_config["run_id"] = run_id;
  a.options.run_config = run_config.dump();
  a.options.network_yaml = spec.resolved_yaml();

  // The backend and communicator live in `par`, declared before (so destroyed after) the trainer.
  Backend& backend = par.connect();  // data parallel: watchdog, device check, communicator
  a.options.parallel = par.data_parallel();
  const MpiEnv* mpi = MpiEnv::current();
  auto energy = open_energy_monitor(backend.device(), mpi ? mpi->local_rank() : 0, a.measure.power_hz);
  a.options.energy = energy.get();
  Trainer trainer(spec, backend, train, test, a.solver, a.options);
  const bool rank0 = par.rank() == 0;

  // ---- run ------------------------------------------------------------------------------------
  if (rank0) {
    std::fprintf(stderr,
                 "cnnscale train: %s (%lld parameters) on %s (%lld samples%s), batch %lld, %lld iterations "
                 "(%lld per epoch), %s on %s\n",
                 spec.name().c_str(), static_cast<long long>(spec.total_params()), train->name().c_str(),
                 static_cast<long long>(train->size()), test ? fmt::format(", test {}", test->size()).c_str() : "",
                 static_cast<long long>(a.options.batch), static_cast<long long>(trainer.total_iterations()),
                 static_cast<long long>(trainer.iterations_per_epoch()), a.solver.describe().c_str(),
                 backend.description().c_str());
    if (par.active()) std::fprintf(stderr, "%s\n", par.describe(trainer).c_str());
  }
  TrainProgress progress(trainer.iterations_per_epoch());
  std::vector<EpochRecord> epochs;
  std::string last_checkpoint;
  TrainCallbacks cb;
  if (rank0) {
    cb.on_iteration = [&](int64_t done, int64_t total) { progress.iteration(done, total); };
    cb.on_display = [&](const DisplayInfo& d) { progress.display(d); };
    cb.on_epoch = [&](const EpochInfo& e) {
      progress.epoch(e);
      epochs.push_back({e.epoch, e.iteration, e.train_loss, e.test ? e.test->top1 : kMissing,
                        e.test ? e.test->top5 : kMissing, e.lr});
    };
    cb.on_message = [&](const std::string& m) { progress.message(m); };
    cb.on_checkpoint = [&](const std::string& path, int64_t) { last_checkpoint = path; };
  }
  // SIGTERM/SIGUSR1/SIGINT from here on stop at a step boundary with a checkpoint (kExitRequeue).
  install_stop_signals();
  par.write_pid_file();
  energy->start_sampling();
  TrainResult r = trainer.run(cb);
  energy->stop_sampling();
  if (rank0) progress.finish();
  // The job's throughput: every rank's steady-state time is gathered, the slowest one counts.
  const JobTiming job = par.job_timing(r);
  const std::vector<nlohmann::json> reports = gather_rank_reports(
      make_rank_report(par.rank(), mpi ? mpi->host() : "", backend.device(), *energy, r, trainer.local_batch()));
  if (r.interrupted) requested_exit_code() = kExitRequeue;
  if (!rank0) return;

  RunDescription run;
  run.experiment = a.measure.experiment;
  run.config_text =
      "# cnnscale train: the run's resolved options and network\nrun: " + run_config.dump() + "\nnetwork: |\n";
  for (size_t pos = 0, next; pos < a.options.network_yaml.size(); pos = next + 1) {
    next = a.options.network_yaml.find('\n', pos);
    if (next == std::string::npos) next = a.options.network_yaml.size();
    run.config_text += "  " + a.options.network_yaml.substr(pos, next - pos) + "\n";
  }
  run.run_id = run_id;
  // A run resumed after an interruption keeps the run id of the run it continues, and its results
  // replace the interrupted folder. A finished run's folder is never replaced: a run that goes on
  // past a finished one (more iterations) gets an id of its own.
  if (a.measure.run_id.empty() && !trainer.resumed_run_config().empty()) {
    const auto saved = nlohmann::json::parse(trainer.resumed_run_config(), nullptr, false);
    if (saved.is_object() && saved.contains("run_id") && saved["run_id"].is_string()) {
      const std::string id = saved["run_id"].get<std::string>();
      const auto folder = std::filesystem::path(a.measure.results_root) / run.experiment / id;
      if (run_folder_writable(folder.string())) run.run_id = id;
    }
  }
  run.net = spec.name();
  run.data = train->name();
  run.device_kind = backend.device().is_cpu() ? "cpu" : "gpu";
  run.world_size = par.world_size();
  run.global_batch = a.options.batch;
  run.seed = static_cast<int64_t>(a.options.seed);
  run.iterations = r.iterations;
  run.iterations_per_epoch = r.iterations_per_epoch;
  run.train_samples = train->size();
  run.run_epochs = r.epochs;
  run.overlap = a.options.parallel.overlap;
  if (par.active() && !backend.device().is_cpu()) run.allreduce_algo = a.parallel.algo;
  run.forward_macs = static_cast<double>(spec.forward_macs());
  run.measure = a.options.measure;
  run.phase_window = a.options.phase_window_seconds;
  run.epochs = epochs;
  run.tags = a.measure.tags;
  if (mpi && mpi->initialized()) run.mpi_version = mpi->library_version();
  if (!backend.device().is_cpu()) {
    const GpuLibraryVersions v = gpu_library_versions();
    run.cuda_version = v.cuda;
    run.cudnn_version = v.cudnn;
    run.nccl_version = v.nccl;
  }
  RunResults results = assemble_run_results(run, r, reports, a.measure.whole_epochs, a.measure.whole_samples);
  if (r.interrupted) results.status = std::string(kRunInterrupted);
  std::string results_path;
  if (!a.measure.no_results) {
    ResultsWriteOptions wo;
    wo.root = a.measure.results_root;
    results_path = write_run_results(results, wo);
  }

  std::fprintf(stderr,
               "done: %lld iterations in %.1f s, %.1f samples/s (steady state, %lld iterations), final loss %.4f",
               static_cast<long long>(r.iterations), r.seconds, job.samples_per_s,
               static_cast<long long>(r.timed_iterations), r.final_loss);
  if (r.test) std::fprintf(stderr, ", test top-1 %.4f top-%d %.4f", r.test->top1, r.test->top5_k, r.test->top5);
  std::fprintf(stderr, "\n");
  // This rank's (rank 0's) phase means; the per-iteration timeline is in r.phases for results files.
  const PhaseSummary& ps = r.phase_summary;
  std::fprintf(stderr, "phases (ms/iteration, mean of %lld after warm-up):", static_cast<long long>(ps.iterations));
  for (int p = 0; p < kStepPhases; ++p)
    std::fprintf(stderr, " %s %.3f", step_phase_name(p), 1e3 * ps.mean_seconds[static_cast<size_t>(p)]);
  std::fprintf(stderr, ", total %.3f\n", 1e3 * ps.mean_total);
  if (results.summary.joules_per_batch.has_value())
    std::fprintf(stderr, "energy: %.3f J/batch, %.1f W (%s)\n", results.summary.joules_per_batch.value(),
                 results.summary.watts.value(), results.methods.at("joules_per_batch").c_str());
  else
    std::fprintf(stderr, "energy: null (%s)\n",
                 r.window ? (run.device_kind == "gpu" ? r.window->gpu_method : r.window->cpu_method).c_str()
                          : "no steady window");
  if (!results_path.empty())
    std::fprintf(stderr, "results: %s%s\n", results_path.c_str(), r.interrupted ? " (status: interrupted)" : "");
  if (r.interrupted)
    std::fprintf(stderr, "interrupted at iteration %lld of %lld: %s; exit code %d (requeue)\n",
                 static_cast<long long>(r.iterations), static_cast<long long>(trainer.total_iterations()),
                 last_checkpoint.empty() ? "no checkpoint (no --checkpoint-dir)"
                                         : ("continue with --resume auto from " + last_checkpoint).c_str(),
                 kExitRequeue);

  if (a.json) {
    nlohmann::json j = {{"net", spec.name()},
                        {"data", train->name()},
                        {"device", backend.device().to_string()},
                        {"batch", a.options.batch},
                        {"seed", a.options.seed},
                        {"iterations", r.iterations},
                        {"start_iteration", r.start_iteration},
                        {"iterations_per_epoch", r.iterations_per_epoch},
                        {"epochs", r.epochs},
                        {"seconds", r.seconds},
                        {"samples_per_s", nullable(job.samples_per_s > 0 ? job.samples_per_s : NAN)},
                        {"timed_iterations", r.timed_iterations},
                        {"timed_seconds", job.timed_seconds},
                        {"data_wait_seconds", r.data_wait_seconds},
                        {"final_loss", nullable(r.final_loss)},
                        {"final_lr", r.final_lr},
                        {"test_top1", r.test ? nlohmann::json(r.test->top1) : nlohmann::json()},
                        {"test_top5", r.test ? nlohmann::json(r.test->top5) : nlohmann::json()},
                        {"test_loss", r.test ? nlohmann::json(r.test->loss) : nlohmann::json()},
                        {"test_samples", r.test ? nlohmann::json(r.test->samples) : nlohmann::json()},
                        {"checkpoint", last_checkpoint.empty() ? nlohmann::json() : nlohmann::json(last_checkpoint)},
                        {"resumed_from", r.resumed_from.empty() ? nlohmann::json() : nlohmann::json(r.resumed_from)}};
    nlohmann::json phases = {{"iterations", ps.iterations}, {"total", ps.mean_total}};
    for (int p = 0; p < kStepPhases; ++p) phases[step_phase_name(p)] = ps.mean_seconds[static_cast<size_t>(p)];
    j["phases"] = phases;  // mean seconds per iteration on rank 0, warm-up excluded
    if (par.active()) j.update(par.job_json(trainer, job));
    j["results"] = results_path.empty() ? nlohmann::json() : nlohmann::json(results_path);
    j["run_id"] = results.run_id;
    j["summary"] = summary_values_json(results.summary);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

void register_train(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  TrainArgs& a = *args;
  CLI::App* cmd = app.add_subcommand("train", "Train a network on one device and report loss, accuracy and throughput");
  cmd->add_option("--net", a.net, "Network: a name in networks/ (lenet) or a YAML file")->required();
  cmd->add_option("--data", a.data, "Training data")->required()->check(CLI::IsMember(dataset_names()));
  cmd->add_option("--synthetic-fill", a.synthetic_fill, "Synthetic values: gaussian noise or a non-zero constant")
      ->check(CLI::IsMember({"gaussian", "constant"}))
      ->capture_default_str();
  cmd->add_option("--data-dir", a.data_dir, "Fashion-MNIST directory (IDX .gz files)")->capture_default_str();
  cmd->add_option("--train-samples", a.train_samples,
                  "Use only the first N training samples (synthetic: samples per epoch, default max(1024, batch))");
  cmd->add_option("--test-samples", a.test_samples, "Use only the first N test samples (0: no test)");
  auto* epochs = cmd->add_option("--epochs", a.epochs, "Epochs to train (default 1)");
  auto* iterations = cmd->add_option("--iterations", a.iterations, "Iterations to train");
  epochs->excludes(iterations);
  cmd->add_option("--batch", a.options.batch,
                  "Batch size: the global batch, split across MPI ranks (see --batch-per-rank)")
      ->capture_default_str();
  cmd->add_option("--test-batch", a.options.test_batch, "Test batch size per rank (default: the rank's batch)");
  cmd->add_option("--device", a.device, "cpu, gpu (under mpirun: the rank's GPU) or gpu:N")->capture_default_str();
  cmd->add_option("--seed", a.options.seed, "Seed of weight init, shuffling, dropout and synthetic data")
      ->capture_default_str();
  cmd->add_option("--lr", a.solver.lr, "Base learning rate")->capture_default_str();
  cmd->add_option("--momentum", a.solver.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--weight-decay", a.solver.weight_decay, "L2 weight decay")->capture_default_str();
  cmd->add_option("--lr-policy", a.lr_policy, "fixed, step, exp, multistep or poly")
      ->check(CLI::IsMember({"fixed", "step", "exp", "multistep", "poly"}))
      ->capture_default_str();
  cmd->add_option("--gamma", a.solver.gamma, "step/exp/multistep factor")->capture_default_str();
  cmd->add_option("--step", a.solver.step_epochs, "step: epochs between lr drops")->capture_default_str();
  cmd->add_option("--milestones", a.solver.milestones, "multistep: epochs of lr drops (comma-separated)")
      ->delimiter(',');
  cmd->add_option("--power", a.solver.power, "poly: exponent")->capture_default_str();
  auto* warm_e = cmd->add_option("--warmup", a.solver.warmup_epochs, "Linear warm-up length in epochs");
  auto* warm_i =
      cmd->add_option("--warmup-iterations", a.solver.warmup_iterations, "Linear warm-up length in iterations");
  warm_e->excludes(warm_i);
  cmd->add_option("--warmup-start-factor", a.solver.warmup_start_factor, "Warm-up starts at lr x this")
      ->capture_default_str();
  cmd->add_option("--input-shape", a.input_shape, "Synthetic: per-sample input C,H,W (default: the network's)")
      ->delimiter(',');
  cmd->add_option("--classes", a.classes, "Synthetic: number of classes (default: the network's)");
  cmd->add_option("--pool-batches", a.pool_batches, "Synthetic: distinct batches kept on the device")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a.options.checkpoint_dir, "Write checkpoints here (the newest two are kept)");
  cmd->add_option("--checkpoint-every", a.options.checkpoint_every,
                  "Also checkpoint every N iterations (always at epoch ends)");
  cmd->add_option("--resume", a.options.resume,
                  "Continue from a checkpoint file, or 'auto': the newest in --checkpoint-dir");
  cmd->add_option("--display", a.options.display, "Iterations between loss reports")->capture_default_str();
  cmd->add_option("--timing-warmup", a.options.timing_warmup, "Iterations left out of samples/s")
      ->capture_default_str();
  cmd->add_flag("--json", a.json, "Print one JSON line of results on stdout");
  add_parallel_options(*cmd, a.parallel);
  add_measure_options(*cmd, a.measure);
  cmd->callback([args] { run_train(*args); });
}

}  // namespace cnnscale::app
