// Data-parallel training on CPU ranks under mpirun (label mpi): N ranks at global batch B reach the
// weights of ONE process (the plain single-process engine, no mpirun) at batch B, for 1, 2, 4 and 8
// ranks, with and without bucket overlap, an uneven split (64 on 3 ranks), Caffe's per-rank batch
// semantics, a resume with another rank count, and synchronised batch norm (with per-rank batch
// norm as the control that must NOT match). Also: a bad split ends the whole job with exit 2.
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

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

// Tolerance of the weight comparison, relative to each array's largest magnitude.
//
// The runs compare on dist_convnet_smooth.yaml, whose every layer is smooth: with ReLU and max
// pooling (dist_convnet.yaml) a one-ulp difference can move a pre-activation across the kink or
// change a pooling winner, after which that sample's gradient differs by a finite amount that no
// rounding bound covers (seen: a jump from 3e-7 to 3e-5 at the 9th step with OpenBLAS's Haswell
// kernels on an AMD EPYC; whether a near-tie is hit depends on the CPU's kernels).
//
// On a smooth net the runs differ by the association of sums alone: one process sums each gradient
// element over the 64 samples in one order; N ranks sum their shares and the allreduce adds the N
// partial sums. Re-associating a sum of n fp32 terms moves it by at most gamma_{n-1} * sum|terms|
// (Higham, Accuracy and Stability of Numerical Algorithms, 4.2; gamma_k = k u / (1 - k u), u = 2^-24):
// gamma_63 = 3.8e-6. Per-sample gradients of one element mostly share a sign early in training, so
// sum|terms| stays within a small factor (~2) of the largest element; twelve steps of momentum SGD
// at lr 0.05 add up twelve such differences without amplifying them (the step is far below the
// stability limit 2 / L of this small net). Bound: 12 * 3.8e-6 * 2 ~ 1e-4. An error in the weighting
// is nowhere near: summing un-scaled per-rank means on 2 ranks doubles the step, and the control
// below (one process at twice the learning rate) lands at differences of order 1.
constexpr double kRelTolerance = 1e-4;
constexpr const char* kNet = "dist_convnet_smooth.yaml";

struct Workdir {
  fs::path root;
  explicit Workdir(const std::string& name) {
    root = fs::temp_directory_path() / ("cnnscale_dp_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Workdir() { fs::remove_all(root); }
  std::string dir(const std::string& sub) const { return (root / sub).string(); }
};

std::vector<std::string> train_args(const std::string& net, const std::string& ckpt_dir, int batch = 64,
                                    int iterations = 12) {
  return {"train",
          "--net",
          std::string(CNNSCALE_TEST_DATA) + "/" + net,
          "--data",
          "fashion-mnist",
          "--train-samples",
          "1280",
          "--test-samples",
          "300",
          "--batch",
          std::to_string(batch),
          "--iterations",
          std::to_string(iterations),
          "--seed",
          "5",
          "--lr",
          "0.05",
          "--display",
          "4",
          "--checkpoint-dir",
          ckpt_dir,
          "--json"};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& extra) {
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// One thread of OpenBLAS, as the mpi runner gives every rank: OpenBLAS may pick another kernel
// path (another summation order) for another thread count, and the 1-rank job must be bit for bit
// the one-process run.
nlohmann::json single_process(const std::vector<std::string>& args) {
  auto r = testing::run_cnnscale(args, {"OPENBLAS_NUM_THREADS=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

nlohmann::json mpi_job(int ranks, const std::vector<std::string>& args) {
  auto r = testing::run_mpi(ranks, args);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0 || r.out.empty()) return nlohmann::json();
  // Only rank 0 prints the JSON line: exactly one line on stdout.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  return nlohmann::json::parse(r.out);
}

CheckpointContents final_checkpoint(const std::string& dir, int iteration = 12) {
  return read_checkpoint(CheckpointDir(dir).path_for(iteration));
}

// Largest |a - b| / max|a| over every array of weights and momentum history.
double max_rel_diff(const CheckpointContents& a, const CheckpointContents& b, std::string* where = nullptr) {
  double worst = 0;
  auto compare = [&](const std::vector<CheckpointArray>& x, const std::vector<CheckpointArray>& y, const char* kind) {
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      EXPECT_EQ(x[i].name, y[i].name);
      EXPECT_EQ(x[i].values.size(), y[i].values.size());
      double scale = 0, diff = 0;
      for (size_t k = 0; k < std::min(x[i].values.size(), y[i].values.size()); ++k) {
        scale = std::max(scale, std::fabs(static_cast<double>(x[i].values[k])));
        diff = std::max(diff, std::fabs(static_cast<double>(x[i].values[k]) - y[i].values[k]));
      }
      const double rel = scale > 0 ? diff / scale : diff;
      if (rel >= worst) {
        worst = rel;
        if (where) *where = std::string(kind) + " " + x[i].name;
      }
    }
  };
  compare(a.weights, b.weights, "weights");
  compare(a.history, b.history, "momentum");
  return worst;
}

void expect_matches_reference(const CheckpointContents& ref, const std::string& dir, const char* what) {
  std::string where;
  const double d = max_rel_diff(ref, final_checkpoint(dir), &where);
  std::printf("%s: max relative difference to one process %.3g (%s)\n", what, d, where.c_str());
  EXPECT_LE(d, kRelTolerance) << what << ": " << where;
}

// The job's accuracy is over the whole test set although each rank evaluated a shard.
void expect_whole_test_set(const nlohmann::json& ref, const nlohmann::json& job) {
  EXPECT_EQ(job["test_samples"], 300);
  EXPECT_NEAR(job["test_top1"].get<double>(), ref["test_top1"].get<double>(), 1.5 / 300);
  EXPECT_NEAR(job["final_loss"].get<double>(), ref["final_loss"].get<double>(), 1e-4);
}

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
  *(std::find(args.begin(), args.end(), "--lr") + 1) = "1e30";
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

// Arbitrary shares (--split manual) give the one-process update too: each rank's loss is weighted by
// its own n_r / B, however unequal; one rank may hold a single sample. The test set is sharded by
// rank independently of the training shares, so the job still evaluates all of it.
TEST(DataParallel, ManualSharesMatchOneProcess) {
  Workdir w("manual");
  const nlohmann::json ref = single_process(train_args(kNet, w.dir("ref")));
  const CheckpointContents ref_ckpt = final_checkpoint(w.dir("ref"));
  const std::vector<std::string> shares_48_16 = {"--split", "manual", "--shares", "48,16", "--bucket-mb", "0.05"};
  nlohmann::json j2 = mpi_job(2, with(train_args(kNet, w.dir("np2")), shares_48_16));
  EXPECT_EQ(j2["rank_batches"], nlohmann::json({48, 16}));
  expect_matches_reference(ref_ckpt, w.dir("np2"), "2 ranks, 48+16");
  expect_whole_test_set(ref, j2);
  nlohmann::json j4 = mpi_job(4, with(train_args(kNet, w.dir("np4")), {"--split", "manual", "--shares", "1,30,2,31"}));
  EXPECT_EQ(j4["rank_batches"], nlohmann::json({1, 30, 2, 31}));
  expect_matches_reference(ref_ckpt, w.dir("np4"), "4 ranks, 1+30+2+31");
  expect_whole_test_set(ref, j4);
}

// Ranks made unequal (--slowdown: rank 1 idles twice its compute time, so it computes 3x slower).
// proportional picks shares from its start-up probe; auto starts from the same probe (or, with
// --auto-start even, from even shares) and changes them mid-run (every 3 steps here), each time
// rebuilding the loader at the same position of the global order. The update stays the
// one-process update: the tolerance argument above holds for any shares, changed or not.
//
// How many samples the slow rank gets is a timing, not a number the test can predict: with a step
// cost of a + b n on rank 0 and 3 (a + b n) on rank 1, equal step times give rank 1
// 16 - a / (2 b) of 64, and the fixed part a (per-layer overhead of this tiny net) against the
// per-sample part b differs from one CPU to the next (a host where a = 24 b gives it 4). So the
// shares are checked two ways that hold on every host: they are exactly the ones the recorded probe
// models choose (the decision is deterministic given its inputs), and the slow rank gets fewer than
// the fast one (16 - a / 2b < 32 for any a, b >= 0; noise would have to slow rank 0 threefold).
TEST(DataParallel, ProbedAndRebalancedSplitsMatchOneProcess) {
  Workdir w("probed");
  const nlohmann::json ref = single_process(train_args(kNet, w.dir("ref")));
  const CheckpointContents ref_ckpt = final_checkpoint(w.dir("ref"));
  auto expect_slow_rank_gets_less = [](const nlohmann::json& j, const char* what) {
    ASSERT_TRUE(j.contains("rank_batches")) << what;
    const int64_t fast = j["rank_batches"][0].get<int64_t>(), slow = j["rank_batches"][1].get<int64_t>();
    EXPECT_EQ(fast + slow, 64) << what;
    EXPECT_GE(slow, 1) << what;
    EXPECT_LT(slow, fast) << what;
  };
  nlohmann::json prop = mpi_job(2, with(train_args(kNet, w.dir("prop")),
                                        {"--split", "proportional", "--slowdown", "1,3", "--probe-seconds", "0.1",
                                         "--results", w.dir("results"), "--experiment", "dp", "--run-id", "prop"}));
  EXPECT_EQ(prop["split"], "proportional");
  expect_slow_rank_gets_less(prop, "proportional");
  // The recorded models, put back through the policy, give the shares the run used.
  std::ifstream summary_file(fs::path(w.dir("results")) / "dp" / "prop" / "summary.json");
  ASSERT_TRUE(summary_file) << "no summary.json for the proportional run";
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  std::vector<RankCost> models;
  for (const nlohmann::json& m : summary["split"]["models"])
    models.push_back({m["seconds_fixed"].get<double>(), m["seconds_per_sample"].get<double>(),
                      m["joules_fixed"].is_number() ? m["joules_fixed"].get<double>() : std::nan(""),
                      m["joules_per_sample"].is_number() ? m["joules_per_sample"].get<double>() : std::nan(""),
                      m["wait_watts"].is_number() ? m["wait_watts"].get<double>() : std::nan("")});
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(nlohmann::json(choose_split(SplitPolicy::Proportional, 64, models)), prop["rank_batches"]);
  // Whole steps with the exchange, timed on both ranks at the even split before the shares were
  // chosen, and the exchange's seconds fitted from them: the prediction is the models' compute at
  // the final shares plus that (CPU ranks have no joules).
  const nlohmann::json& steps = summary["split"]["steps"];
  ASSERT_EQ(steps.size(), 2u);
  for (const nlohmann::json& p : steps) {
    EXPECT_EQ(p["batch"], 32);
    EXPECT_GT(p["seconds"].get<double>(), 0.0);
  }
  const nlohmann::json& exchange = summary["split"]["exchange"];
  ASSERT_TRUE(exchange["seconds"].is_number()) << exchange;
  const ExchangeCost x{exchange["seconds"].get<double>(), 0.0};
  const std::vector<ProbeSample> timed = {{32, steps[0]["seconds"].get<double>(), std::nan("")},
                                          {32, steps[1]["seconds"].get<double>(), std::nan("")}};
  EXPECT_DOUBLE_EQ(fit_exchange_cost({32, 32}, models, timed).seconds, x.seconds);
  EXPECT_DOUBLE_EQ(summary["summary"]["predicted_seconds_per_batch"].get<double>(),
                   predict_split(prop["rank_batches"].get<std::vector<int64_t>>(), models, x).seconds);
  // Each rank's recorded probe points are the ones its model was fitted to: refitted, they give the
  // model's per-sample seconds (the update raised only the fixed part). The points and the model
  // crossed the ranks as float32 (relative rounding 2^-24 = 6e-8 each); the slope of a line through
  // the points at 16, 32 and 64 samples moves by at most (sum |x - mean x| / sum (x - mean x)^2) x
  // max |y| x 2^-24 = (53.3 / 1195) x max |y| x 6e-8. With max |y| = a + 64 b, that is below 3e-6 of
  // the slope b for any fixed part a up to 1000 b (these CPU ranks have a few tens): 1e-4 relative
  // is far above it and far below what points read from another offset would give.
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<ProbeSample> points;
    for (const nlohmann::json& p : summary["split"]["probe"])
      if (p["rank"] == r) points.push_back({p["batch"].get<int64_t>(), p["seconds"].get<double>(), std::nan("")});
    ASSERT_EQ(points.size(), 3u) << "rank " << r;
    const double b = models[static_cast<size_t>(r)].seconds_per_sample;
    EXPECT_NEAR(fit_rank_cost(points, std::nan("")).seconds_per_sample, b, 1e-4 * b) << "rank " << r;
  }
  expect_matches_reference(ref_ckpt, w.dir("prop"), "2 ranks, proportional, rank 1 3x slower");
  expect_whole_test_set(ref, prop);

  nlohmann::json aut = mpi_job(2, with(train_args(kNet, w.dir("auto")),
                                       {"--split", "auto", "--auto-start", "even", "--rebalance-every", "3",
                                        "--slowdown", "1,3"}));
  EXPECT_EQ(aut["first_rank_batches"], nlohmann::json({32, 32}));
  expect_slow_rank_gets_less(aut, "auto");
  expect_matches_reference(ref_ckpt, w.dir("auto"), "2 ranks, auto, rank 1 3x slower");
  expect_whole_test_set(ref, aut);

  // auto's default start: the probe's proportional shares, recorded with their models like
  // proportional's, then online rebalancing from there.
  nlohmann::json autp = mpi_job(2, with(train_args(kNet, w.dir("autop")),
                                        {"--split", "auto", "--rebalance-every", "3", "--slowdown", "1,3",
                                         "--probe-seconds", "0.1", "--results", w.dir("results"), "--experiment",
                                         "dp", "--run-id", "autop"}));
  std::ifstream autp_file(fs::path(w.dir("results")) / "dp" / "autop" / "summary.json");
  ASSERT_TRUE(autp_file) << "no summary.json for the probed auto run";
  const nlohmann::json autp_summary = nlohmann::json::parse(autp_file);
  EXPECT_EQ(autp_summary["split"]["policy"], "auto");
  std::vector<RankCost> autp_models;
  for (const nlohmann::json& m : autp_summary["split"]["models"])
    autp_models.push_back({m["seconds_fixed"].get<double>(), m["seconds_per_sample"].get<double>(), std::nan(""),
                           std::nan(""), std::nan("")});
  ASSERT_EQ(autp_models.size(), 2u);
  ASSERT_FALSE(autp_summary["split"]["changes"].empty());
  EXPECT_EQ(autp_summary["split"]["changes"][0]["iteration"], 0);
  EXPECT_EQ(nlohmann::json(choose_split(SplitPolicy::Proportional, 64, autp_models)),
            autp_summary["split"]["changes"][0]["shares"]);
  expect_slow_rank_gets_less(autp, "auto from the probe");
  expect_matches_reference(ref_ckpt, w.dir("autop"), "2 ranks, auto from the probe, rank 1 3x slower");
  EXPECT_EQ(autp_summary["split"]["refine_every"], 3);
  EXPECT_EQ(autp_summary["split"]["refine_model"], kRefineModel);
  EXPECT_EQ(summary["split"]["refine_every"], 0);  // proportional keeps the probe's shares
  EXPECT_TRUE(summary["split"]["refine_model"].is_null());

  // --rebalance-every 0: the probe's shares are kept for the whole run, and recorded as such.
  nlohmann::json kept =
      mpi_job(2, with(train_args(kNet, w.dir("kept")),
                      {"--split", "auto", "--rebalance-every", "0", "--slowdown", "1,3", "--probe-seconds", "0.1",
                       "--results", w.dir("results"), "--experiment", "dp", "--run-id", "kept"}));
  std::ifstream kept_file(fs::path(w.dir("results")) / "dp" / "kept" / "summary.json");
  ASSERT_TRUE(kept_file) << "no summary.json for the auto run without refinement";
  const nlohmann::json kept_summary = nlohmann::json::parse(kept_file);
  EXPECT_EQ(kept_summary["split"]["refine_every"], 0);
  EXPECT_TRUE(kept_summary["split"]["refine_model"].is_null());  // nothing refined
  ASSERT_EQ(kept_summary["split"]["changes"].size(), 1u);
  EXPECT_EQ(kept["rank_batches"], kept_summary["split"]["changes"][0]["shares"]);
  expect_slow_rank_gets_less(kept, "auto without refinement");
  expect_matches_reference(ref_ckpt, w.dir("kept"), "2 ranks, auto without refinement, rank 1 3x slower");

  nlohmann::json aut4 = mpi_job(4, with(train_args(kNet, w.dir("auto4")),
                                        {"--split", "auto", "--auto-start", "even", "--rebalance-every", "3",
                                         "--slowdown", "1,2,1,3"}));
  EXPECT_NE(aut4["rank_batches"], aut4["first_rank_batches"]);
  expect_matches_reference(ref_ckpt, w.dir("auto4"), "4 ranks, auto, slowdowns 1,2,1,3");
}

TEST(DataParallel, SplitOptionsThatCannotWorkEndTheJobWithExitTwo) {
  const std::string net = std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml";
  const std::vector<std::string> base = {"train", "--net", net, "--data", "synthetic", "--batch", "8", "--iterations",
                                         "1"};
  auto r = testing::run_mpi(2, with(base, {"--split", "energy"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--split energy chooses by each GPU's joules; CPU ranks have no energy reading"),
            std::string::npos)
      << r.err;
  r = testing::run_mpi(2, with(base, {"--slowdown", "3"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--slowdown: 1 factor(s) for 2 rank(s)"), std::string::npos) << r.err;
  r = testing::run_mpi(2, with(base, {"--slowdown", "1,0.5"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--slowdown: rank 1 has factor 0.5"), std::string::npos) << r.err;
  r = testing::run_mpi(2, with(base, {"--split", "auto", "--batch-per-rank"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--split auto divides --batch among the ranks"), std::string::npos) << r.err;
  r = testing::run_mpi(2, with(base, {"--split", "proportional", "--auto-start", "even"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--auto-start applies to --split auto only"), std::string::npos) << r.err;
}

TEST(DataParallel, ManualSharesThatDoNotFitTheJobEndItWithExitTwo) {
  const std::string net = std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml";
  auto r = testing::run_mpi(2, {"train", "--net", net, "--data", "synthetic", "--batch", "8", "--iterations", "1",
                                "--split", "manual", "--shares", "5,4"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--shares: the shares sum to 9, but the global batch (--batch) is 8"), std::string::npos)
      << r.err;
  r = testing::run_mpi(2, {"train", "--net", net, "--data", "synthetic", "--batch", "8", "--iterations", "1",
                           "--shares", "4,4"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--shares applies to --split manual only"), std::string::npos) << r.err;
}

TEST(DataParallel, BadSplitEndsTheJobWithExitTwo) {
  auto r = testing::run_mpi(3, {"train", "--net", std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml", "--data",
                                "synthetic", "--batch", "2", "--iterations", "1"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("global batch 2 cannot be split across 3 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cnnscale: error: rank 0 (host "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cnnscale
