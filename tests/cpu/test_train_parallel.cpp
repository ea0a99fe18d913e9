// ParallelRun (experiment/train_parallel.hpp) on a job of one rank in this process: the one check of
// --batch and its split, the checks of train's data-parallel settings against the job (each a
// ConfigError naming its flag, before any device is touched), what the Trainer is handed of the job,
// and the job's timing.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error_of.hpp"
#include "core/error.hpp"
#include "experiment/train_parallel.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
// A namespace of its own: the helpers' names stay this file's in a unity build.
namespace train_parallel_test {
namespace {

// The shared reader of a refusal's line (tests/common/error_of.hpp).
using testing::config_error_of;

// The refusal of a run of `args` on `device` at --batch `batch`, or "" where it is accepted.
std::string refusal(const ParallelArgs& args, int64_t batch = 8, const std::string& device = "cpu") {
  return config_error_of([&] { ParallelRun(args, device, batch, Precision::FP32); });
}

bool launched() { return MpiEnv::current() && MpiEnv::current()->initialized(); }

TEST(TrainParallel, OneRankTrainsAsOneProcessWithTheWholeBatch) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  ParallelRun par(ParallelArgs{}, "cpu", 12, Precision::FP32);
  EXPECT_FALSE(par.active());
  EXPECT_FALSE(par.one_rank_exchange());
  EXPECT_EQ(par.rank(), 0);
  EXPECT_EQ(par.world_size(), 1);
  EXPECT_EQ(par.device(), "cpu");
  EXPECT_EQ(par.global_batch(), 12);
  EXPECT_EQ(par.rank_batches(), std::vector<int64_t>{12});
  EXPECT_EQ(par.split(), SplitPolicy::Even);
  EXPECT_EQ(par.slowdown(), 1.0);
  // The Trainer derives its global batch from this split, a single process's too; no communicator.
  const DataParallel dp = par.data_parallel();
  EXPECT_EQ(dp.rank_batches, std::vector<int64_t>{12});
  EXPECT_EQ(dp.comm, nullptr);
}

TEST(TrainParallel, BatchPerRankOfOneRankIsTheBatch) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  ParallelArgs args;
  args.batch_per_rank = true;
  EXPECT_EQ(ParallelRun(args, "cpu", 5, Precision::FP32).rank_batches(), std::vector<int64_t>{5});
  args = {};
  args.split = "manual";
  args.shares = {7};
  EXPECT_EQ(ParallelRun(args, "cpu", 7, Precision::FP32).rank_batches(), std::vector<int64_t>{7});
}

TEST(TrainParallel, RefusesBadSettingsNamingTheFlag) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  EXPECT_EQ(refusal({}), "");
  EXPECT_NE(refusal({}, 0).find("--batch"), std::string::npos) << refusal({}, 0);
  ParallelArgs a;
  a.bucket_mb = 0;
  EXPECT_EQ(refusal(a), "--bucket-mb must be > 0, got 0");
  a = {};
  a.watchdog_timeout = -1;
  EXPECT_EQ(refusal(a), "--watchdog-timeout must be > 0 seconds, got -1");
  a = {};
  a.shares = {8};
  EXPECT_EQ(refusal(a), "--shares applies to --split manual only");
  a = {};
  a.split = "manual";
  a.shares = {3};
  EXPECT_NE(refusal(a).find("--shares"), std::string::npos) << "shares that do not sum to --batch: " << refusal(a);
  a = {};
  a.split = "proportional";
  a.batch_per_rank = true;
  EXPECT_EQ(refusal(a),
            "--split proportional divides --batch among the ranks: it does not combine with --batch-per-rank");
  a = {};
  a.split = "energy";
  EXPECT_NE(refusal(a).find("CPU ranks have no energy reading of their own"), std::string::npos) << refusal(a);
  a = {};
  a.auto_start = "even";
  EXPECT_EQ(refusal(a), "--auto-start applies to --split auto only");
  a = {};
  a.allreduce_max_ctas = 4;
  EXPECT_NE(refusal(a).find("--allreduce-max-ctas"), std::string::npos);
  a = {};
  a.allreduce_cta_policy = "zero";
  EXPECT_NE(refusal(a).find("--allreduce-cta-policy"), std::string::npos);
  a = {};
  a.allreduce_priority = "low";
  EXPECT_NE(refusal(a).find("--allreduce-priority"), std::string::npos);
  a = {};
  a.sm_counts = {16};
  EXPECT_EQ(refusal(a), "--sm-counts applies to GPU ranks");
  a = {};
  a.slowdown = {1.0, 2.0};
  EXPECT_EQ(refusal(a), "--slowdown: 2 factor(s) for 1 rank(s): give one per rank, in rank order");
  a = {};
  a.one_rank_exchange = true;
  EXPECT_EQ(refusal(a),
            "--one-rank-exchange keeps a one-rank MPI job on the data-parallel path: launch it with mpirun -np 1");
  // --gpus implies a GPU device: refused with an explicit --device cpu.
  a = {};
  a.gpus = {0};
  a.device_given = true;
  EXPECT_NE(refusal(a).find("--gpus picks each rank's GPU"), std::string::npos) << refusal(a);
}

TEST(TrainParallel, SlowdownOfTheRankAndTheJobsTiming) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  ParallelArgs args;
  args.slowdown = {2.5};
  ParallelRun par(args, "cpu", 4, Precision::FP32);
  EXPECT_EQ(par.slowdown(), 2.5);
  TrainResult r;
  r.timed_seconds = 2.0;
  r.timed_iterations = 10;
  const JobTiming job = par.job_timing(r);
  EXPECT_EQ(job.rank_timed_seconds, std::vector<double>{2.0});
  EXPECT_EQ(job.timed_seconds, 2.0);
  EXPECT_DOUBLE_EQ(job.samples_per_s, 4 * 10 / 2.0);
}

TEST(TrainParallel, ConnectOfOneRankOpensTheBackendOnly) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  ParallelRun par(ParallelArgs{}, "cpu", 4, Precision::FP32);
  Backend& backend = par.connect();
  EXPECT_TRUE(backend.device().is_cpu());
  EXPECT_EQ(&par.backend(), &backend);
  EXPECT_EQ(par.job().precision(), Precision::FP32);
  EXPECT_EQ(par.job().communicator(), nullptr) << "one process: no communicator";
}

}  // namespace
}  // namespace train_parallel_test
}  // namespace cnnscale
