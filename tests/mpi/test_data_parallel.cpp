// Data-parallel training on CPU ranks under mpirun (label mpi): N ranks at global batch B reach the
// weights of ONE process (the plain single-process engine, no mpirun) at batch B, for 1, 2, 4 and 8
// ranks, with and without bucket overlap, an uneven split (64 on 3 ranks), bf16 exchanges, updates
// per bucket, gathered fc gradients, Caffe's per-rank batch semantics, a resume with another rank
// count, and synchronised batch norm (with per-rank batch norm as the control that must NOT match).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/results_writer.hpp"
#include "mpi/mpi_runner.hpp"
#include "parallel/split_policy.hpp"
#include "solver/checkpoint.hpp"
#include "mpi/data_parallel_util.hpp"

namespace cnnscale {
namespace {

using namespace data_parallel_test;

TEST(DataParallel, OneTwoAndFourRanksMatchOneProcess) {
  Workdir w("even");
  const nlohmann::json ref = single_process(train_args(kNet, w.dir("ref")));
  const CheckpointContents ref_ckpt = final_checkpoint(w.dir("ref"));

  // One rank under mpirun trains as one process (no communicator, no buckets: a scheduler's
  // 1-GPU baseline measures the GPU alone): bit for bit the one-process run, with no job fields.
  auto results = [&](const char* id) {
    return std::vector<std::string>{"--results", w.dir("results"), "--experiment", "e", "--run-id", id};
  };
  auto config = [&](const char* id) { return read_run_results(w.dir("results") + "/e/" + id).config_text; };
  nlohmann::json j1 = mpi_job(1, with(train_args(kNet, w.dir("np1")), results("np1")));
  EXPECT_FALSE(j1.contains("world_size")) << j1.dump();
  EXPECT_FALSE(j1.contains("gradient_buckets")) << j1.dump();
  EXPECT_EQ(j1["final_loss"], ref["final_loss"]);
  EXPECT_EQ(max_rel_diff(ref_ckpt, final_checkpoint(w.dir("np1"))), 0.0);
  EXPECT_EQ(config("np1").find("one_rank_exchange"), std::string::npos) << config("np1");

  // --one-rank-exchange keeps the data-parallel path on one rank, to measure what it costs: the
  // communicator, the buckets (several, at 0.05 MiB) and the update per bucket, with a sum of one
  // term each. Still the one-process run bit for bit, now with the job's fields, and recorded in its
  // configuration and summary.
  nlohmann::json j1x = mpi_job(
      1, with(train_args(kNet, w.dir("np1x")), with({"--one-rank-exchange", "--bucket-mb", "0.05"}, results("np1x"))));
  EXPECT_EQ(j1x["world_size"], 1) << j1x.dump();
  EXPECT_GE(j1x["gradient_buckets"].get<int>(), 3) << j1x.dump();
  EXPECT_EQ(j1x["final_loss"], ref["final_loss"]);
  EXPECT_EQ(max_rel_diff(ref_ckpt, final_checkpoint(w.dir("np1x"))), 0.0);
  EXPECT_NE(config("np1x").find("\"one_rank_exchange\":true"), std::string::npos) << config("np1x");
  EXPECT_EQ(j1x["summary"]["one_rank_exchange"], 1) << "what report reads to keep it out of the baselines";
  EXPECT_TRUE(j1["summary"].value("one_rank_exchange", nlohmann::json()).is_null()) << j1["summary"].dump();
  // Without an MPI launch there is no job to keep: refused before any folder is made, the results
  // root and the checkpoint directory included.
  const auto alone = testing::run_cnnscale(
      with(train_args(kNet, w.dir("alone")),
           {"--one-rank-exchange", "--results", w.dir("alone_results"), "--experiment", "e", "--run-id", "alone"}));
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_NE(alone.err.find("--one-rank-exchange keeps a one-rank MPI job on the data-parallel path"), std::string::npos)
      << alone.err;
  EXPECT_FALSE(fs::exists(w.dir("alone_results")));
  EXPECT_FALSE(fs::exists(w.dir("alone")));

  // One allreduce after backward.
  nlohmann::json j2 = mpi_job(2, with(train_args(kNet, w.dir("np2")), {"--no-overlap"}));
  EXPECT_EQ(j2["world_size"], 2);
  EXPECT_EQ(j2["rank_batches"], nlohmann::json({32, 32}));
  EXPECT_EQ(j2["allreduce_overlap"], false);
  expect_matches_reference(ref_ckpt, w.dir("np2"), "2 ranks, no overlap");
  expect_whole_test_set(ref, j2);

  // Buckets of 0.05 MiB: several, one of them cutting ip1's weight, issued during backward.
  nlohmann::json j4 = mpi_job(4, with(train_args(kNet, w.dir("np4")), {"--bucket-mb", "0.05"}));
  EXPECT_EQ(j4["rank_batches"], nlohmann::json({16, 16, 16, 16}));
  EXPECT_EQ(j4["allreduce_overlap"], true);
  EXPECT_GE(j4["gradient_buckets"].get<int>(), 3);
  expect_matches_reference(ref_ckpt, w.dir("np4"), "4 ranks, 0.05 MiB buckets");
  expect_whole_test_set(ref, j4);
  EXPECT_EQ(j4["batch"], 64);
  EXPECT_EQ(j4["iterations_per_epoch"], ref["iterations_per_epoch"]);

  // Control: the comparison catches a weighting error. Summing un-scaled per-rank means on 2 ranks
  // is one process at twice the learning rate; it must land far outside the tolerance.
  std::vector<std::string> double_step = train_args(kNet, w.dir("double_step"));
  *(std::find(double_step.begin(), double_step.end(), "--lr") + 1) = "0.1";
  single_process(double_step);
  const double wrong = max_rel_diff(ref_ckpt, final_checkpoint(w.dir("double_step")));
  std::printf("twice the step (un-scaled per-rank means on 2 ranks): max relative difference %.3g\n", wrong);
  EXPECT_GT(wrong, 100 * kRelTolerance);
}

TEST(DataParallel, UnevenSplitMatchesOneProcess) {
  Workdir w("uneven");
  const nlohmann::json ref = single_process(train_args(kNet, w.dir("ref")));
  nlohmann::json j3 = mpi_job(3, with(train_args(kNet, w.dir("np3")), {"--bucket-mb", "0.05"}));
  EXPECT_EQ(j3["rank_batches"], nlohmann::json({22, 21, 21}));
  expect_matches_reference(final_checkpoint(w.dir("ref")), w.dir("np3"), "3 ranks, 22+21+21");
  expect_whole_test_set(ref, j3);
}

// --allreduce-dtype bf16: each bucket is rounded to bf16 (u = 2^-9, 8 significant bits), summed in
// bf16 by an MPI operation of our own, and widened back. Against the one-process run, every
// gradient element of a step is off by its two roundings: at most u (|g1| + |g2|) + u |g1 + g2|,
// <= 3u |g| when the ranks' shares share a sign (the premise of kRelTolerance's argument above).
// The momentum history sums twelve steps' gradients, so it is off by 3u of the sum of their
// magnitudes, which stays within ~2 of its largest element as argued above: 6u = 0.012. Weights
// move by lr times the history, a fraction of their own magnitude in twelve steps. Bound: 2^-6
// (8u). The fp32 exchange lands within 1e-4, and a bf16 exchange must not: bf16 rounds each
// element by ~u/2 = 1e-3 of itself on average, so an array's largest element alone moves further.
TEST(DataParallel, Bf16GradientExchangeIsWithinItsRoundingOfOneProcess) {
  Workdir w("bf16x");
  single_process(train_args(kNet, w.dir("ref")));
  const CheckpointContents ref = final_checkpoint(w.dir("ref"));
  const nlohmann::json j =
      mpi_job(2, with(train_args(kNet, w.dir("np2")), {"--allreduce-dtype", "bf16", "--bucket-mb", "0.05"}));
  EXPECT_EQ(j["allreduce_dtype"], "bf16");
  EXPECT_EQ(j["summary"]["allreduce_dtype"], "bf16");
  EXPECT_GE(j["gradient_buckets"].get<int>(), 3);
  std::string where;
  const double d = max_rel_diff(ref, final_checkpoint(w.dir("np2")), &where);
  std::printf("2 ranks, bf16 exchange: max relative difference to one process %.3g (%s)\n", d, where.c_str());
  EXPECT_LE(d, 1.0 / 64) << where;
  EXPECT_GT(d, kRelTolerance) << "a bf16 exchange as close as an fp32 one: was it exchanged in bf16?";
}

// --update-per-bucket (the default): each bucket's parameters are updated as soon as its sum is in,
// in parts (SgdSolver::plan_parts); CPU ranks run the parts when the exchange completes, GPU ranks
// on a side stream during backward. The arithmetic is the update after the exchange's, element for
// element: weights and momentum equal bit for bit, with an fp32 and a bf16 exchange (whose widening
// moves into the parts), on buckets of which one cuts ip1's weight.
TEST(DataParallel, UpdatePerBucketIsTheUpdateAfterTheExchangeBitForBit) {
  Workdir w("perbucket");
  for (const std::string dtype : {"fp32", "bf16"}) {
    const std::vector<std::string> extra = {"--allreduce-dtype", dtype, "--bucket-mb", "0.05"};
    const nlohmann::json per = mpi_job(2, with(train_args(kNet, w.dir("per-" + dtype)), extra));
    EXPECT_EQ(per["update_per_bucket"], true);
    EXPECT_EQ(per["summary"]["allreduce_tuning"], "update per bucket");
    EXPECT_GE(per["gradient_buckets"].get<int>(), 3);
    const nlohmann::json after =
        mpi_job(2, with(with(train_args(kNet, w.dir("after-" + dtype)), extra), {"--update-per-bucket", "false"}));
    EXPECT_EQ(after["update_per_bucket"], false);
    EXPECT_EQ(after["summary"]["allreduce_tuning"], "default");
    std::string where;
    EXPECT_EQ(max_rel_diff(final_checkpoint(w.dir("after-" + dtype)), final_checkpoint(w.dir("per-" + dtype)), &where),
              0.0)
        << dtype << " exchange: " << where;
    EXPECT_EQ(per["final_loss"], after["final_loss"]) << dtype;
  }
}

// The update per bucket checks the gradients it reads, in place of the check over the whole
// buffer after the exchange: a rate that blows the weights up ends the job as diverged.
TEST(DataParallel, UpdatePerBucketCatchesDivergence) {
  Workdir w("diverge");
  std::vector<std::string> args = with(train_args(kNet, w.dir("np2")), {"--bucket-mb", "0.05"});
  // The largest rate --lr takes (its table entry's bound): each update multiplies the weights' scale
  // by about that much, so the loss or a gradient overflows fp32 within a few iterations.
  *(std::find(args.begin(), args.end(), "--lr") + 1) = "1e6";
  const auto r = testing::run_mpi(2, args);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("training diverged: non-finite loss or gradient at iteration"), std::string::npos) << r.err;
}

// --gather-gradients: ip1 (1152 -> 256) forms its gradients from every rank's rows, gathered during
// backward, and leaves the allreduce; conv1 and ip2 stay in it. The gathered rows are the global
// batch in order (zero rows pad the smaller shares of 22 + 21 + 21), so the sums are one process's
// up to their order, as the allreduce's are: the same tolerance (kRelTolerance) holds, with the
// update per bucket and after the exchange, overlapped or not, and with shares that auto moves
// mid-run (the gathered rows follow the largest share).
TEST(DataParallel, GatheredFullyConnectedGradientsMatchOneProcess) {
  Workdir w("gather");
  const char* net = "dist_convnet_smooth_wide.yaml";
  single_process(train_args(net, w.dir("ref")));
  const CheckpointContents ref = final_checkpoint(w.dir("ref"));
  struct Case {
    int ranks;
    std::vector<std::string> extra;
    const char* tuning;
  };
  const Case cases[] = {
      {2, {"--bucket-mb", "0.05"}, "update per bucket, fc gradients gathered"},
      {3, {"--bucket-mb", "0.05"}, "update per bucket, fc gradients gathered"},
      {2, {"--update-per-bucket", "false"}, "fc gradients gathered"},
      {2, {"--no-overlap"}, "update per bucket, fc gradients gathered"},
      {2,
       {"--split", "auto", "--auto-start", "even", "--rebalance-every", "3", "--slowdown", "1,3"},
       "update per bucket, fc gradients gathered"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    const std::string dir = w.dir("case" + std::to_string(i));
    const nlohmann::json j =
        mpi_job(c.ranks, with(with(train_args(net, dir), {"--gather-gradients", "true"}), c.extra));
    EXPECT_EQ(j["gathering_layers"], 1) << i;
    EXPECT_EQ(j["summary"]["allreduce_tuning"], c.tuning) << i;
    if (i == 4) {
      EXPECT_NE(j["rank_batches"], j["first_rank_batches"]) << "auto moved the shares";
    }
    expect_matches_reference(ref, dir, ("gathered ip1, case " + std::to_string(i)).c_str());
  }
  // One rank has nothing to gather: it trains as one process.
  const nlohmann::json one = mpi_job(1, with(train_args(net, w.dir("np1")), {"--gather-gradients", "true"}));
  EXPECT_FALSE(one.contains("gathering_layers")) << one.dump();
}

// More ranks than any machine lent for the study's GPU runs has GPUs (8, the study's largest
// point), with an uneven split and a test set that does not divide either: nothing in the engine
// may assume at most 4 ranks.
TEST(DataParallel, EightRanksWithAnUnevenSplitMatchOneProcess) {
  Workdir w("eight");
  const nlohmann::json ref = single_process(train_args(kNet, w.dir("ref"), 60));
  nlohmann::json j8 = mpi_job(8, with(train_args(kNet, w.dir("np8"), 60), {"--bucket-mb", "0.05"}));
  EXPECT_EQ(j8["world_size"], 8);
  EXPECT_EQ(j8["rank_batches"], nlohmann::json({8, 8, 8, 8, 7, 7, 7, 7}));
  EXPECT_EQ(j8["batch"], 60);
  EXPECT_GE(j8["gradient_buckets"].get<int>(), 3);
  expect_matches_reference(final_checkpoint(w.dir("ref")), w.dir("np8"), "8 ranks, 8x4 + 7x4");
  expect_whole_test_set(ref, j8);  // 300 test samples in shards of 37 and 38
}

TEST(DataParallel, BatchPerRankIsCaffesSemantics) {
  Workdir w("per_rank");
  single_process(train_args(kNet, w.dir("ref")));
  // 2 ranks x 32 = a global batch of 64: the same training as one process at 64.
  nlohmann::json j = mpi_job(2, with(train_args(kNet, w.dir("np2"), 32), {"--batch-per-rank"}));
  EXPECT_EQ(j["batch"], 64);
  EXPECT_EQ(j["batch_per_rank"], true);
  EXPECT_EQ(j["rank_batches"], nlohmann::json({32, 32}));
  EXPECT_EQ(j["iterations_per_epoch"], 1280 / 64);
  expect_matches_reference(final_checkpoint(w.dir("ref")), w.dir("np2"), "2 ranks x 32 per rank");
}

TEST(DataParallel, ResumesWithAnotherRankCount) {
  Workdir w("resume");
  single_process(train_args(kNet, w.dir("ref")));
  // 6 iterations on 2 ranks, then on to 12 on 3 ranks from rank 0's checkpoint: the data order
  // depends only on the seed, so this is still the one-process training.
  nlohmann::json first = mpi_job(2, train_args(kNet, w.dir("run"), 64, 6));
  EXPECT_EQ(first["checkpoint"], CheckpointDir(w.dir("run")).path_for(6));
  nlohmann::json second = mpi_job(3, with(train_args(kNet, w.dir("run")), {"--resume", "auto"}));
  EXPECT_EQ(second["start_iteration"], 6);
  expect_matches_reference(final_checkpoint(w.dir("ref")), w.dir("run"), "2 ranks to 6, then 3 ranks to 12");
}

TEST(DataParallel, SyncBatchNormMatchesOneProcessPerRankDoesNot) {
  Workdir w("bn");
  single_process(train_args("dist_convnet_syncbn.yaml", w.dir("ref_sync")));
  single_process(train_args("dist_convnet_bn.yaml", w.dir("ref_local")));
  mpi_job(2, train_args("dist_convnet_syncbn.yaml", w.dir("sync2")));
  mpi_job(3, train_args("dist_convnet_syncbn.yaml", w.dir("sync3")));
  mpi_job(2, train_args("dist_convnet_bn.yaml", w.dir("local2")));
  const CheckpointContents ref_sync = final_checkpoint(w.dir("ref_sync"));
  expect_matches_reference(ref_sync, w.dir("sync2"), "sync batch norm, 2 ranks");
  expect_matches_reference(ref_sync, w.dir("sync3"), "sync batch norm, 3 ranks (22+21+21)");
  // Running statistics too (the checkpoint's batch norm state).
  const CheckpointContents sync3 = final_checkpoint(w.dir("sync3"));
  ASSERT_EQ(ref_sync.state.size(), sync3.state.size());
  for (size_t i = 0; i < sync3.state.size(); ++i)
    for (size_t k = 0; k < sync3.state[i].values.size(); ++k)
      EXPECT_NEAR(sync3.state[i].values[k], ref_sync.state[i].values[k], 1e-4) << sync3.state[i].name;
  // Control: per-rank statistics are a different computation, far outside the tolerance.
  const double d = max_rel_diff(final_checkpoint(w.dir("ref_local")), final_checkpoint(w.dir("local2")));
  std::printf("per-rank batch norm, 2 ranks: max relative difference to one process %.3g\n", d);
  EXPECT_GT(d, 100 * kRelTolerance);
}

}  // namespace
}  // namespace cnnscale
