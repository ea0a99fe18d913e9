// The configurations jobs of 2 ranks (and of one kept on the data-parallel path) record for the
// data-parallel settings, pinned as the code before train's table recorded them: the allreduce
// mode's fields, the split and its options, the bucket size and the watchdog. One-rank runs and the
// sweep's ids: tests/cpu/test_settings_pinned_parallel.cpp.
#include <gtest/gtest.h>

#include "common/temp_dir.hpp"
#include "io/results_writer.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale::testing {
namespace {

std::string recorded_line(const TempDir& dir, int ranks, const std::string& id, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"train",    "--net",    "lenet",   "--data",        "synthetic", "--iterations",
                                  "1",        "--batch",  "4",       "--results",     dir.str(),   "--experiment",
                                  "e",        "--run-id", id,        "--min-window",  "0",         "--timing-warmup",
                                  "0"};
  all.insert(all.end(), args.begin(), args.end());
  const MpiResult r = run_mpi(ranks, all);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_run_results(dir.str() + "/e/" + id).config_text;
  const size_t at = text.find("\nrun: ");
  return at == std::string::npos ? text : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

const std::string kHead =
    R"j("batch":4,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
    R"j("net_file":"networks/lenet.yaml",)j";
const std::string kSolver = R"j("solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed",)j";

TEST(SettingsPinnedMpi, DataParallelSettingsRecordAsBeforeTheTable) {
  TempDir dir;
  EXPECT_EQ(recorded_line(dir, 2, "m1",
                          {"--no-overlap", "--allreduce-algo", "tree", "--allreduce-dtype", "bf16",
                           "--update-per-bucket", "false", "--gather-gradients", "true", "--split", "proportional",
                           "--bucket-mb", "0.5", "--watchdog-timeout", "100", "--probe-seconds", "0.1"}),
            R"j(run: {"allreduce_dtype":"bf16","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("gather_gradients":true,"input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml",)j"
            R"j("rank_batches":[2,2],"run_id":"m1","seed":1,)j" +
                kSolver + R"j("split":"proportional","synthetic_fill":"gaussian","train_samples":1024,)j"
                R"j("update_per_bucket":false,"world_size":2})j");
  EXPECT_EQ(recorded_line(dir, 2, "m2",
                          {"--allreduce-overlap", "false", "--update-per-bucket", "true", "--gather-gradients",
                           "false", "--split", "auto", "--auto-start", "even", "--rebalance-every", "5"}),
            R"j(run: {"auto_start":"even",)j" + kHead +
                R"j("rank_batches":[2,2],"rebalance_every":5,"run_id":"m2","seed":1,)j" + kSolver +
                R"j("split":"auto","synthetic_fill":"gaussian","train_samples":1024,"world_size":2})j");
  EXPECT_EQ(recorded_line(dir, 2, "m3", {"--split", "auto"}),
            R"j(run: {"auto_start":"probe",)j" + kHead +
                R"j("rank_batches":[2,2],"rebalance_every":20,"run_id":"m3","seed":1,)j" + kSolver +
                R"j("split":"auto","synthetic_fill":"gaussian","train_samples":1024,"world_size":2})j");
  EXPECT_EQ(recorded_line(dir, 2, "m4", {"--split", "manual", "--shares", "1,3"}),
            "run: {" + kHead + R"j("rank_batches":[1,3],"run_id":"m4","seed":1,)j" + kSolver +
                R"j("split":"manual","synthetic_fill":"gaussian","train_samples":1024,"world_size":2})j");
  EXPECT_EQ(recorded_line(dir, 2, "m5", {"--allreduce-dtype", "compute", "--split", "even"}),
            "run: {" + kHead + R"j("rank_batches":[2,2],"run_id":"m5","seed":1,)j" + kSolver +
                R"j("synthetic_fill":"gaussian","train_samples":1024,"world_size":2})j");
  // One rank kept on the data-parallel path: the update is recorded, the gathering (no other rank's
  // rows) not.
  EXPECT_EQ(recorded_line(dir, 1, "m6",
                          {"--one-rank-exchange", "--update-per-bucket", "false", "--gather-gradients", "true",
                           "--allreduce-dtype", "fp16"}),
            R"j(run: {"allreduce_dtype":"fp16",)j" + kHead +
                R"j("one_rank_exchange":true,"rank_batches":[4],"run_id":"m6","seed":1,)j" + kSolver +
                R"j("synthetic_fill":"gaussian","train_samples":1024,"update_per_bucket":false,"world_size":1})j");
}

// The rank sets' and the batch's options, pinned as the code before they came from train's table
// recorded them: the global batch (--batch-per-rank: ranks x --batch) and each rank's slowdown.
TEST(SettingsPinnedMpi, RankSetAndBatchOptionsRecordAsBeforeTheTable) {
  TempDir dir;
  EXPECT_EQ(recorded_line(dir, 2, "k1", {"--batch-per-rank", "--slowdown", "1,3"}),
            R"j(run: {"batch":8,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
            R"j("net_file":"networks/lenet.yaml","rank_batches":[4,4],"run_id":"k1","seed":1,"slowdown":[1.0,3.0],)j" +
                kSolver + R"j("synthetic_fill":"gaussian","train_samples":1024,"world_size":2})j");
  EXPECT_EQ(recorded_line(dir, 2, "k2", {"--slowdown", "1.5,1"}),
            "run: {" + kHead + R"j("rank_batches":[2,2],"run_id":"k2","seed":1,"slowdown":[1.5,1.0],)j" + kSolver +
                R"j("synthetic_fill":"gaussian","train_samples":1024,"world_size":2})j");
}

}  // namespace
}  // namespace cnnscale::testing
