// How the global batch is split over CPU ranks under mpirun (label mpi): manual shares, probed and
// rebalanced splits match one process; splits that cannot work, shares that do not fit and a bad
// split end the whole job with exit 2.
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
