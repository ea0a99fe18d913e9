// The steps of `cnnscale train` before and after the Trainer runs: option checks, network and
// datasets, the run's identity (stored in checkpoints and results), and the description of the
// finished run that rank 0 turns into its results.
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "experiment/train_run.hpp"
#include "backend/devices.hpp"
#include "backend/engine_cache.hpp"
#include "core/environment.hpp"
#include "data/augment.hpp"
#include "data/datasets.hpp"
#include "io/measure_mode.hpp"
#include "io/results_writer.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {

namespace {
// Flags are the YAML keys with '-' for '_' (solver_config.hpp); --step/--warmup are shorter.
std::string flag_for(const std::string& key) {
  if (key == "warmup_epochs") return "--warmup";
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}
}  // namespace

void validate_train_args(TrainArgs& a) {
  a.options.precision = parse_precision(a.precision, "--precision");
  const std::optional<MeasureMode> measure = measure_mode_from_name(a.measure_mode);
  if (!measure) throw_config("--measure: expected steady or phases, got '{}'", a.measure_mode);
  a.measure.measure = *measure;
  a.parallel.exchange_dtype = allreduce_dtype_for(a.parallel.allreduce_dtype, a.options.precision);
  a.solver.policy = parse_lr_policy(a.lr_policy);
  a.solver.validate(
      [](const std::string& key, const std::string& message) { throw_config("{}: {}", flag_for(key), message); });
  if (a.epochs != -1 && a.epochs < 1) throw_config("--epochs must be >= 1, got {}", a.epochs);
  if (a.iterations != -1 && a.iterations < 1) throw_config("--iterations must be >= 1, got {}", a.iterations);
  a.options.epochs = a.epochs > 0 ? a.epochs : 0;
  a.options.iterations = a.iterations > 0 ? a.iterations : 0;
  if (a.options.epochs == 0 && a.options.iterations == 0) a.options.epochs = 1;
  const DatasetInfo dataset = dataset_info(a.data);
  if (!dataset.synthetic && (!a.input_shape.empty() || a.classes > 0))
    throw_config("--input-shape/--classes apply to synthetic data only ({} samples are {}, {} classes)", a.data,
                 fmt::join(dataset.sample_shape, "x"), dataset.classes);
  // Before any work; the loader checks again against the data it opens (synthetic: the network's shape).
  if (!dataset.synthetic) check_augment(a.options.augment, dataset.sample_shape);
  if (!a.input_shape.empty() &&
      (a.input_shape.size() != 3 || a.input_shape[0] < 1 || a.input_shape[1] < 1 || a.input_shape[2] < 1))
    throw_config("--input-shape: expected three positive extents C,H,W");
  if (a.options.resume == "auto" && a.options.checkpoint_dir.empty())
    throw_config("--resume auto needs --checkpoint-dir");
  if (!a.options.resume.empty() && a.options.resume != "auto" && !std::filesystem::is_regular_file(a.options.resume))
    throw_config("--resume {}: no such checkpoint file", a.options.resume);
  validate_measure_args(a.measure);
  // A launch question, answered before the folders below are made (ParallelRun asks again).
  check_one_rank_exchange(a.parallel.one_rank_exchange, MpiEnv::current());
  // Where the run will write, checked now rather than after hours of training. Only rank 0
  // writes results and checkpoints.
  if (const MpiEnv* env = MpiEnv::current(); !env || env->rank() == 0) {
    if (!a.measure.no_results) check_writable_dir("--results", a.measure.results_root);
    if (!a.options.checkpoint_dir.empty()) check_writable_dir("--checkpoint-dir", a.options.checkpoint_dir);
  }
}

TrainFaults train_faults_from_environment() {
  TrainFaults faults;
  // Fault injection for the divergence tests (documented in tests/, not a user option).
  if (const char* v = std::getenv("CNNSCALE_INJECT_NONFINITE_AT"); v && *v)
    faults.inject_nonfinite_at = std::strtoll(v, nullptr, 10);
  return faults;
}

TrainInputs load_train_inputs(TrainArgs& a, int64_t global_batch) {
  const DatasetInfo dataset = dataset_info(a.data);
  NetOptions net_options;
  if (dataset.synthetic) {
    if (!a.input_shape.empty()) net_options.input_shape = a.input_shape;
    if (a.classes > 0) net_options.classes = a.classes;
  }
  const std::string net_file = resolve_network_path(a.net);
  NetSpec spec = NetSpec::load(net_file, net_options);
  // A real dataset's samples and labels must be what the network was written for: putting the
  // dataset's shape or class count in its place would train another network (other layer sizes)
  // under the file's name, or fail at the first label past an explicit num_output.
  if (!dataset.synthetic && spec.input_shape() != dataset.sample_shape)
    throw_config("{}: the network's input shape is {} (input.shape), but {} samples are {}", net_file,
                 fmt::join(spec.input_shape(), "x"), a.data, fmt::join(dataset.sample_shape, "x"));
  if (!dataset.synthetic && spec.classes() != dataset.classes)
    throw_config("{}: the network has {} classes (input.classes), but {} has {}", net_file, spec.classes(), a.data,
                 dataset.classes);
  const DatasetRequest request{a.data, a.data_dir, a.train_samples, a.test_samples, a.synthetic_fill, a.options.seed};
  OpenedDatasets data = open_datasets(request, spec.input_shape(), spec.classes(), global_batch);
  if (dataset.synthetic) {  // generated batches stay on the device: the run measures the network, not a loader
    a.options.device_pool = true;
    a.options.pool_batches = a.pool_batches;
  }
  return {net_file, std::move(spec), std::move(data.train), std::move(data.test)};
}

RunContext train_run_context(const TrainArgs& a, const TrainInputs& in, const ParallelRun& par) {
  const bool gpu = par.device() != "cpu";
  return {.gpu = gpu,
          .device = par.device(),
          .world_size = par.world_size(),
          .exchanges = par.active(),
          .graph = gpu && a.options.cuda_graph,
          .precision = precision_name(a.options.precision),
          .split = a.parallel.split,
          .auto_start = a.parallel.auto_start,
          .measure = std::string(measure_mode_name(a.measure.measure)),
          .mfu = a.mfu,
          .synthetic = dataset_info(a.data).synthetic,
          .train_samples = static_cast<int64_t>(in.train->size()),
          .input_shape = in.spec.input_shape(),
          .classes = in.spec.classes(),
          .global_batch = par.global_batch()};
}

nlohmann::json describe_run(TrainArgs& a, const TrainInputs& in, const ParallelRun& par) {
  nlohmann::json run_config = {{"net", in.spec.name()}, {"net_file", in.net_file}, {"solver", a.solver.describe()}};
  // The settings of the table, each by its recording rule where it applies; the solver's are in
  // its description above (Record::SolverText), the data set's as the run opened it.
  const RunContext context = train_run_context(a, in, par);
  for (const TrainSetting& s : train_settings()) {
    if (!s.applies_to(context)) continue;
    const nlohmann::json value = s.resolved(setting_value(a, s), context);
    if (s.records(value)) run_config[s.key()] = value;
  }
  // Informational: a run may resume with another rank count at the same global batch (the data
  // order depends only on the seed), so these are not compared on resume.
  if (par.active()) {
    run_config["world_size"] = par.world_size();
    run_config["rank_batches"] = par.rank_batches();
  }
  // The augmentation's settings (crop_pad, mirror: Record::Described), in one description.
  if (a.options.augment.any()) run_config["augment"] = a.options.augment.describe();
  // Chosen now and stored in the checkpoints, so that a resumed run (after a requeue) writes its
  // results under the same id (not compared on resume).
  run_config["run_id"] = a.measure.run_id.empty() ? make_run_id(run_config.dump() + in.spec.resolved_yaml())
                                                  : a.measure.run_id;
  return run_config;
}

std::string results_run_id(const TrainArgs& a, const nlohmann::json& run_config, const Trainer& trainer) {
  // A run resumed after an interruption keeps the run id of the run it continues, and its results
  // replace the interrupted folder. A finished run's folder is never replaced: a run that goes on
  // past a finished one (more iterations) gets an id of its own.
  if (a.measure.run_id.empty() && !trainer.resumed_run_config().empty()) {
    const auto saved = nlohmann::json::parse(trainer.resumed_run_config(), nullptr, false);
    if (saved.is_object() && saved.contains("run_id") && saved["run_id"].is_string()) {
      const std::string id = saved["run_id"].get<std::string>();
      const auto folder = std::filesystem::path(a.measure.results_root) / a.measure.experiment / id;
      if (run_folder_writable(folder.string())) return id;
    }
  }
  return run_config["run_id"].get<std::string>();
}

RunDescription describe_results(const TrainArgs& a, const TrainInputs& in, const nlohmann::json& run_config,
                                const Trainer& trainer, const TrainResult& r, const ParallelRun& par,
                                std::vector<EpochRecord> epochs) {
  const Backend& backend = par.backend();
  RunDescription run;
  run.experiment = a.measure.experiment;
  run.config_text =
      "# cnnscale train: the run's resolved options and network\nrun: " + run_config.dump() + "\nnetwork: |\n";
  const std::string network_yaml = in.spec.resolved_yaml();
  for (size_t pos = 0, next; pos < network_yaml.size(); pos = next + 1) {
    next = network_yaml.find('\n', pos);
    if (next == std::string::npos) next = network_yaml.size();
    run.config_text += "  " + network_yaml.substr(pos, next - pos) + "\n";
  }
  run.run_id = results_run_id(a, run_config, trainer);
  run.net = in.spec.name();
  run.data = in.train->name();
  run.device_kind = backend.device().is_cpu() ? "cpu" : "gpu";
  run.world_size = par.world_size();
  run.global_batch = par.global_batch();
  run.seed = static_cast<int64_t>(a.options.seed);
  run.iterations = r.iterations;
  run.iterations_per_epoch = r.iterations_per_epoch;
  run.train_samples = in.train->size();
  run.run_epochs = r.epochs;
  run.overlap = par.data_parallel().overlap;
  run.one_rank_exchange = par.one_rank_exchange();
  if (par.active() && !backend.device().is_cpu()) run.allreduce_algo = a.parallel.algo;
  run.precision = precision_name(a.options.precision);
  run.allreduce_dtype = float_type_name(a.parallel.exchange_dtype);
  {
    std::vector<std::string> tuning;
    if (a.parallel.allreduce_cta_policy != "default") tuning.push_back(a.parallel.allreduce_cta_policy);
    if (a.parallel.allreduce_priority != "high") tuning.push_back(a.parallel.allreduce_priority + " priority");
    if (trainer.updates_per_bucket()) tuning.push_back("update per bucket");
    if (trainer.exchanges_compute_grads()) tuning.push_back("bf16 gradients summed in place");
    if (trainer.gathering_layers() > 0) tuning.push_back("fc gradients gathered");
    if (!tuning.empty()) run.allreduce_tuning = fmt::format("{}", fmt::join(tuning, ", "));
  }
  run.forward_macs = static_cast<double>(in.spec.forward_macs());
  run.measure = a.measure.measure;
  run.phase_window = a.measure.phase_window;
  run.epochs = std::move(epochs);
  run.tags = a.measure.tags;
  run.solver = a.solver;
  if (const MpiEnv* mpi = MpiEnv::current(); mpi && mpi->initialized()) run.mpi_version = mpi->library_version();
  if (!backend.device().is_cpu()) {
    const GpuLibraryVersions v = gpu_library_versions();
    run.cuda_version = v.cuda;
    run.cudnn_version = v.cudnn;
    run.nccl_version = v.nccl;
    // After the communicator's set-up: what NCCL read, cnnscale's own NCCL_ALGO included.
    if (par.active()) run.nccl_env = environment_line("NCCL_");
    if (const EngineCache* cache = EngineCache::from_environment()) run.engine_cache = cache->path();
  }
  return run;
}

}  // namespace cnnscale
