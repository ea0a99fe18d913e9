// ParallelRun: train's flags checked against its job (job/job.hpp), the batch split, and the
// job-level results rank 0 reports.
#include "experiment/train_parallel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "backend/backend.hpp"
#include "core/log.hpp"
#include "measure/metrics.hpp"

namespace cnnscale {

void check_one_rank_exchange(bool flag, const MpiEnv* env) {
  if (flag && !(env && env->initialized()))
    throw_config("--one-rank-exchange keeps a one-rank MPI job on the data-parallel path: launch it with mpirun -np 1");
}

bool ParallelRun::trains_together(const ParallelArgs& args) {
  // A job of one rank trains as one process: no communicator, buckets or exchange with nobody,
  // which would cost its step what no rank needs (up to 6 % of a ResNet-34 step on an H200:
  // docs/measurements/2026-11-26-scaling-four-gpus.md, "Where weak scaling loses"). A scheduler
  // launches every run through MPI (srun), a 1-GPU baseline included: it must measure what the GPU
  // does alone, as mpirun-less runs do, or every scaling efficiency over it would read high.
  // --one-rank-exchange undoes that, to measure the data-parallel path's own cost on one GPU.
  const MpiEnv* mpi = MpiEnv::current();
  check_one_rank_exchange(args.one_rank_exchange, mpi);
  return mpi && mpi->initialized() && (mpi->size() > 1 || args.one_rank_exchange);
}

ParallelRun::ParallelRun(const ParallelArgs& args, const std::string& device, int64_t batch, Precision precision,
                         AlgorithmChoice algorithms)
    : args_(args), precision_(precision), algorithms_(algorithms), job_(trains_together(args)) {
  const MpiEnv* mpi = job_.mpi();
  const bool launched = mpi && mpi->initialized();
  const bool active = job_.together();
  one_rank_exchange_ = active && job_.size() == 1;
  if (launched && !active) log::info("one rank: trained as one process (no communicator, no gradient exchange)");
  if (one_rank_exchange_)
    log::info("one rank, --one-rank-exchange: the data-parallel path (communicator, buckets, an exchange with itself)");
  if (!(args_.bucket_mb > 0)) throw_config("--bucket-mb must be > 0, got {}", args_.bucket_mb);
  if (!(args_.watchdog_timeout > 0))
    throw_config("--watchdog-timeout must be > 0 seconds, got {}", args_.watchdog_timeout);
  check_global_batch(batch);

  device_ = job_.device_for_train(device, args_.device_given, args_.gpus);
  check_backend_precision(device_, precision_);  // here, before the network and data are loaded
  const int local_rank = active ? job_.local_rank() : 0;
  if (!args_.sm_counts.empty()) {
    if (device_ == "cpu") throw_config("--sm-counts applies to GPU ranks");
    const int local_ranks = active ? job_.local_size() : 1;
    const size_t expected = args_.gpus.empty() ? static_cast<size_t>(local_ranks) : args_.gpus.size();
    if (args_.sm_counts.size() != expected)
      throw_config("--sm-counts {} lists {} count(s) but {} {}", fmt::join(args_.sm_counts, ","),
                   args_.sm_counts.size(), expected,
                   args_.gpus.empty() ? "node-local rank(s) run on this node" : "GPU(s) are given by --gpus");
    for (int n : args_.sm_counts)
      if (n < 1) throw_config("--sm-counts: each count must be >= 1 SM, got {}", n);
    // Every rank computes a gathered layer's gradient for the job; a partition may run other
    // kernels than a whole GPU (another rounding), and the ranks' weights would drift apart.
    if (args_.gather_gradients) throw_config("--gather-gradients needs whole GPUs, not --sm-counts");
    sm_count_ = args_.sm_counts[static_cast<size_t>(local_rank)];
  }

  const int ranks = job_.size();
  const SplitPolicy split = split_ = parse_split_policy(args_.split);
  if (split != SplitPolicy::Manual && !args_.shares.empty()) throw_config("--shares applies to --split manual only");
  if (split != SplitPolicy::Even && args_.batch_per_rank)
    throw_config("--split {} divides --batch among the ranks: it does not combine with --batch-per-rank",
                 args_.split);
  if (split_needs_energy(split) && device_ == "cpu")
    throw_config("--split {} chooses by each GPU's joules; CPU ranks have no energy reading of their own (use "
                 "proportional or auto)",
                 args_.split);
  check_rebalance_every(args_.rebalance_every);
  if (args_.allreduce_max_ctas > 0 && device_ == "cpu")
    throw_config("--allreduce-max-ctas sets NCCL's CTAs for GPU ranks; CPU ranks exchange through MPI");
  if (args_.allreduce_cta_policy != "default" && device_ == "cpu")
    throw_config("--allreduce-cta-policy sets NCCL's CTA policy for GPU ranks; CPU ranks exchange through MPI");
  if (args_.allreduce_priority != "high" && device_ == "cpu")
    throw_config(
        "--allreduce-priority sets the priority of NCCL's stream on GPU ranks; CPU ranks exchange through MPI");
  if (split != SplitPolicy::Auto && args_.auto_start != "probe")
    throw_config("--auto-start applies to --split auto only");
  check_probe_seconds(args_.probe_seconds);
  if (!args_.slowdown.empty()) {
    if (device_ != "cpu") throw_config("--slowdown emulates slower CPU ranks; GPU ranks are made unequal with --sm-counts");
    const size_t want = static_cast<size_t>(ranks);
    if (args_.slowdown.size() != want)
      throw_config("--slowdown: {} factor(s) for {} rank(s): give one per rank, in rank order", args_.slowdown.size(),
                   want);
    for (size_t r = 0; r < want; ++r) check_slowdown(static_cast<int>(r), args_.slowdown[r]);
  }
  if (args_.batch_per_rank)
    rank_batches_.assign(static_cast<size_t>(ranks), batch);
  else
    rank_batches_ =
        split == SplitPolicy::Manual ? manual_split(batch, args_.shares, ranks) : split_global_batch(batch, ranks);
  global_batch_ = std::accumulate(rank_batches_.begin(), rank_batches_.end(), int64_t{0});
}

ParallelRun::~ParallelRun() = default;

double ParallelRun::slowdown() const {
  return args_.slowdown.empty() ? 1.0 : args_.slowdown[static_cast<size_t>(rank())];
}

Backend& ParallelRun::connect() {
  Backend& backend = job_.open_backend(device_, sm_count_, precision_, algorithms_);
  if (!active()) return backend;

  job_.start_watchdog(args_.watchdog_timeout);
  job_.bind_devices();  // no two ranks on one GPU, no mix of CPU and GPU ranks
  if (args_.gather_gradients && !backend.device().is_cpu()) {
    // The same reason on GPUs of different models: the model is what the description starts with.
    const std::string description = backend.description();
    const std::string model = description.substr(0, description.find(" ("));
    for (const std::string& other : job_.gather(model))
      if (other != model)
        throw_config("--gather-gradients needs one GPU model on every rank, got {} and {}", model, other);
  }

  CommunicatorChoice choice;
  choice.algo = parse_allreduce_algo(args_.algo);
  if (backend.device().is_cpu() && rank() == 0 && args_.algo_given)
    log::info("--allreduce-algo {} applies to NCCL only: MPI (CPU ranks) chooses its own allreduce algorithm",
              args_.algo);
  choice.tuning.max_ctas = args_.allreduce_max_ctas;
  choice.tuning.cta_policy = parse_cta_policy(args_.allreduce_cta_policy, "--allreduce-cta-policy");
  choice.tuning.low_priority = args_.allreduce_priority == "low";
  choice.timeout_seconds = args_.watchdog_timeout;
  job_.connect(choice);
  return backend;
}

DataParallel ParallelRun::data_parallel() const {
  DataParallel dp;
  // A single process too: the one split of --batch (ParallelRun's), from which the Trainer derives
  // the global batch instead of checking a second copy of it.
  dp.rank_batches = rank_batches_;
  if (!active()) return dp;
  dp.comm = job_.communicator();
  dp.exchange = job_.exchange();
  dp.rank = rank();
  dp.overlap = args_.overlap;
  dp.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(args_.bucket_mb * 1024.0 * 1024.0));
  dp.exchange_dtype = args_.exchange_dtype;
  dp.update_per_bucket = args_.update_per_bucket;
  dp.exchange_compute_grads = args_.allreduce_dtype == "compute";
  dp.gather_gradients = args_.gather_gradients;
  return dp;
}

std::string ParallelRun::describe(const Trainer& trainer) const {
  const GradientBuckets* b = trainer.buckets();
  const Communicator* comm = job_.communicator();
  const std::vector<RankDevice>& devices = job_.devices();
  std::string out = fmt::format(
      "data parallel: {} rank(s) ({}), global batch {} = {} per rank{}, gradients in {} bucket(s) of <= {:g} MiB, "
      "overlap {}, exchanged in {}, {}",
      world_size(), comm ? comm->name() : "none", global_batch_, fmt::join(rank_batches_, "+"),
      args_.batch_per_rank ? " (--batch-per-rank)" : "", b ? b->buckets().size() : 0, args_.bucket_mb,
      b && b->overlap() ? "on" : "off", float_type_name(args_.exchange_dtype),
      trainer.updates_per_bucket() ? "updated per bucket" : "updated after the exchange");
  if (trainer.gathering_layers() > 0)
    out += fmt::format(", {} layer(s) forming their gradients from gathered rows", trainer.gathering_layers());
  if (comm && comm->name() != "mpi") {
    out += fmt::format(", algorithm {}", args_.algo);
    if (const char* ctas = std::getenv("NCCL_MAX_CTAS")) out += fmt::format(", at most {} CTAs", ctas);
    if (args_.allreduce_cta_policy != "default") out += fmt::format(", CTA policy {}", args_.allreduce_cta_policy);
    if (args_.allreduce_priority != "high") out += fmt::format(", {} stream priority", args_.allreduce_priority);
  }
  for (size_t r = 0; r < devices.size(); ++r)
    out += fmt::format("\n  rank {}: host {}, {}{}", r, devices[r].host, devices[r].device,
                       devices[r].uuid.empty() ? "" : " (" + devices[r].uuid + ")");
  return out;
}

JobTiming ParallelRun::job_timing(const TrainResult& r) const {
  JobTiming job;
  job.rank_timed_seconds = job_.gather(r.timed_seconds);
  job.timed_seconds = *std::max_element(job.rank_timed_seconds.begin(), job.rank_timed_seconds.end());
  job.samples_per_s = measure::samples_per_second(global_batch_, r.timed_iterations, job.timed_seconds);
  return job;
}

nlohmann::json ParallelRun::job_json(const Trainer& trainer, const JobTiming& job) const {
  const DataParallel dp = data_parallel();
  const Communicator* comm = job_.communicator();
  const std::vector<RankDevice>& devices = job_.devices();
  // Where NCCL exchanges gradients and they differ from the defaults, as allreduce_max_ctas; else null.
  const bool nccl = comm && comm->name() != "mpi";
  const nlohmann::json cta_policy =
      args_.allreduce_cta_policy != "default" && nccl ? nlohmann::json(args_.allreduce_cta_policy) : nlohmann::json();
  const nlohmann::json priority =
      args_.allreduce_priority != "high" && nccl ? nlohmann::json(args_.allreduce_priority) : nlohmann::json();
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < devices.size(); ++r)
    ranks.push_back({{"rank", r},
                     {"host", devices[r].host},
                     {"device", devices[r].device},
                     {"uuid", devices[r].uuid.empty() ? nlohmann::json() : nlohmann::json(devices[r].uuid)},
                     {"batch", trainer.rank_batches().at(r)},
                     {"timed_seconds", job.rank_timed_seconds[r]}});
  return {{"world_size", world_size()},
          {"rank_batches", trainer.rank_batches()},
          {"first_rank_batches", rank_batches_},
          {"split", args_.split},
          {"batch_per_rank", args_.batch_per_rank},
          {"communicator", comm ? comm->name() : ""},
          {"allreduce_overlap", dp.overlap},
          {"update_per_bucket", trainer.updates_per_bucket()},
          {"exchange_in_place", trainer.exchanges_compute_grads()},
          {"gathering_layers", trainer.gathering_layers()},
          {"allreduce_algo", comm && comm->name() == "mpi" ? nlohmann::json() : nlohmann::json(args_.algo)},
          {"allreduce_max_ctas", args_.allreduce_max_ctas > 0 && comm && comm->name() != "mpi"
                                     ? nlohmann::json(args_.allreduce_max_ctas)
                                     : nlohmann::json()},
          {"allreduce_cta_policy", cta_policy},
          {"allreduce_priority", priority},
          {"bucket_mb", args_.bucket_mb},
          {"gradient_buckets", trainer.buckets() ? trainer.buckets()->buckets().size() : 0},
          {"ranks", ranks}};
}

}  // namespace cnnscale
