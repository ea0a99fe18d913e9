// The data-parallel side of `cnnscale train`: its settings, and ParallelRun, train's use of the job
// (job/job.hpp): whether the launch's ranks train together, the rank's device and SM partition, the
// split of the global batch, the checks of the settings against the job, and at the end the job's
// timing (slowest rank) and its description for the results. The flags are the command's (app/).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/precision.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/device_binding.hpp"
#include "job/job.hpp"
#include "parallel/mpi_env.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

struct ParallelArgs {
  std::vector<int> gpus;  // by node-local rank
  std::vector<int> sm_counts;  // by node-local rank: SMs of its GPU partition (green context)
  bool batch_per_rank = false;
  std::string split = "even";   // --split: even | manual | proportional | auto | energy | edp
  std::vector<int64_t> shares;  // --shares: each rank's samples under --split manual
  int64_t rebalance_every = kDefaultRebalanceEvery;  // --split auto, energy, edp
  std::string auto_start = "probe";  // --auto-start: probe | even (--split auto's first shares)
  double probe_seconds = 0.5;        // proportional, energy, edp: each probe point
  std::vector<double> slowdown;      // --slowdown: each rank's emulated straggler factor (CPU ranks)
  double bucket_mb = static_cast<double>(kDefaultBucketBytes) / (1 << 20);  // MiB
  // The exchange's settings of train's table (experiment/train_settings_parallel.cpp): their defaults
  // are written there.
  bool overlap = true;             // --allreduce-overlap true|false, --no-overlap
  bool update_per_bucket = true;   // --update-per-bucket true|false
  bool gather_gradients = false;   // --gather-gradients true|false
  std::string algo = "ring";       // --allreduce-algo
  int allreduce_max_ctas = 0;  // --allreduce-max-ctas: NCCL_MAX_CTAS for the exchange (0: NCCL's choice)
  std::string allreduce_cta_policy = "default";  // --allreduce-cta-policy: default | efficiency | zero (NCCL's)
  std::string allreduce_priority = "high";       // --allreduce-priority: high | low (the NCCL stream's)
  std::string allreduce_dtype = "fp32";  // --allreduce-dtype: fp32 | bf16 | fp16 | compute (the precision's storage)
  DType exchange_dtype = DType::F32;      // the same resolved against --precision (validate_train_args)
  double watchdog_timeout = 300.0;
  // --one-rank-exchange: a job of one rank keeps the data-parallel path (measuring what it costs)
  // instead of training as one process.
  bool one_rank_exchange = false;
  bool device_given = false;  // --device was given: an explicit one, not the default
  bool algo_given = false;    // --allreduce-algo was given: an explicit one, not the default
};

struct JobTiming {
  double timed_seconds = 0;  // the slowest rank's steady-state time
  double samples_per_s = 0;  // global batch x timed iterations / timed_seconds
  std::vector<double> rank_timed_seconds;
};

// The dtype of the gradient exchange for --allreduce-dtype `flag`: fp32, bf16 and fp16 as named;
// compute is the precision's storage (bf16 or fp16 for those precisions; fp32 and tf32 store fp32).
// Results name it as the precisions spell it (float_type_name).
inline DType allreduce_dtype_for(const std::string& flag, Precision precision) {
  return flag == "compute" ? compute_dtype(precision) : parse_float_type(flag, "--allreduce-dtype");
}

// --one-rank-exchange without an MPI launch: ConfigError. `train` asks before it makes any folder,
// ParallelRun again for callers that build one directly.
void check_one_rank_exchange(bool flag, const MpiEnv* env);

class ParallelRun {
 public:
  // Validates the flags and works out the device and the per-rank batches (ConfigError on bad
  // input): the one check of --batch and its split. `batch` is --batch, `precision` --precision.
  // Touches no device yet.
  ParallelRun(const ParallelArgs& args, const std::string& device, int64_t batch, Precision precision,
              AlgorithmChoice algorithms = {});
  ~ParallelRun();

  // Launched by an MPI launcher with more than one rank, or with one and --one-rank-exchange.
  bool active() const { return job_.together(); }
  // A job of one rank kept on the data-parallel path by --one-rank-exchange: it measured that path.
  bool one_rank_exchange() const { return one_rank_exchange_; }
  int rank() const { return job_.rank(); }
  int world_size() const { return static_cast<int>(rank_batches_.size()); }
  const std::string& device() const { return device_; }
  int64_t global_batch() const { return global_batch_; }
  const std::vector<int64_t>& rank_batches() const { return rank_batches_; }
  SplitPolicy split() const { return split_; }
  double slowdown() const;  // this rank's --slowdown factor (1: none)
  Job& job() { return job_; }
  const Job& job() const { return job_; }

  // Opens the job's backend (in --precision); data parallel: starts the watchdog, checks that no two
  // ranks share a GPU, and creates the communicator (collective over all ranks). The backend lives
  // as long as this object.
  Backend& connect();
  Backend& backend() const { return job_.backend(); }  // after connect()
  // What the Trainer is given of the job: the communicator, this rank and every rank's batch (a
  // single process's too: the Trainer derives the global batch from them), and the exchange's flags.
  DataParallel data_parallel() const;
  std::string describe(const Trainer& trainer) const;  // a few lines for rank 0's log
  // With CNNSCALE_PID_DIR set, writes <dir>/rank-<R>.pid (fault tests and operators pick a rank);
  // train calls it after the rank's first step.
  void write_pid_file() const { job_.write_pid_file(); }
  JobTiming job_timing(const TrainResult& result) const;  // collective when data parallel
  nlohmann::json job_json(const Trainer& trainer, const JobTiming& job) const;

 private:
  static bool trains_together(const ParallelArgs& args);

  ParallelArgs args_;
  bool one_rank_exchange_ = false;
  std::string device_;
  int sm_count_ = 0;  // this rank's --sm-counts entry; 0: the whole GPU
  Precision precision_ = Precision::FP32;
  AlgorithmChoice algorithms_;
  int64_t global_batch_ = 0;
  std::vector<int64_t> rank_batches_;  // the first split (a probe or `auto` may change it)
  SplitPolicy split_ = SplitPolicy::Even;
  Job job_;
};

}  // namespace cnnscale
