// A checkpoint directory belongs to one run: a second live claim is refused naming the holder, a
// run of other settings is refused while the owner's checkpoints are there (naming the difference),
// the same run takes its directory back after its holder died, a run resuming with
// --resume-allow-changes takes it over, and planted links are never followed. The identities
// compared: differences named by key path (a layer by its name) with both values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error_of.hpp"
#include "common/temp_dir.hpp"
#include "solver/checkpoint.hpp"
#include "solver/checkpoint_claim.hpp"
#include "solver/checkpoint_compare.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::TempDir;

const char* kClaimNet = R"(name: tiny
input: {shape: [1, 8, 8], classes: 3}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 2, kernel: 3}
  - {name: pool1, type: Pooling, bottom: conv1, top: pool1, pool: max, kernel: 2, stride: 2}
  - {name: fc, type: InnerProduct, bottom: pool1, top: fc, num_output: 3}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";

std::string with(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

nlohmann::json identity(double lr, const std::string& net = kClaimNet, int64_t batch = 32) {
  SolverConfig solver;
  solver.lr = lr;
  const nlohmann::json run = {{"net", "tiny"}, {"data", "synthetic"}, {"batch", batch}, {"run_id", "ignored"}};
  return checkpoint_identity(run.dump(), solver_settings(solver).dump(), net, "test");
}

TEST(CheckpointIdentity, DifferencesAreNamedByKeyPathWithBothValues) {
  EXPECT_TRUE(identity_differences(identity(0.01), identity(0.01)).empty());
  {
    const auto d = identity_differences(identity(0.02), identity(0.01));
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].key, "solver.lr");
    EXPECT_EQ(describe_difference(d[0], "checkpoint", "this run"),
              "checkpoint solver.lr=0.02, this run solver.lr=0.01");
  }
  {
    const auto d = identity_differences(identity(0.01), identity(0.01, with(kClaimNet, "pool: max", "pool: ave")));
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].key, "network.layers[pool1].pool");
    EXPECT_EQ(d[0].was, "\"max\"");
    EXPECT_EQ(d[0].is_now, "\"ave\"");
  }
  {
    const auto d = identity_differences(identity(0.01), identity(0.01, kClaimNet, 64));
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(describe_difference(d[0], "", "now"), " batch=32, now batch=64");
  }
  {  // a layer added: the new layer is named
    const std::string more =
        with(kClaimNet, "  - {name: fc,", "  - {name: relu, type: ReLU, bottom: pool1, top: pool1}\n  - {name: fc,");
    const auto d = identity_differences(identity(0.01), identity(0.01, more));
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].key, "network.layers[relu]");
    EXPECT_EQ(d[0].was, "(absent)");
  }
  {  // two at once: the first is named, the rest counted
    const auto d = identity_differences(identity(0.02), identity(0.01, with(kClaimNet, "pool: max", "pool: ave")));
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(more_differences(d), " (and 1 more difference)");
    EXPECT_EQ(more_differences({d[0]}), "");
  }
  // The run id, device and rank count are not the run's identity.
  EXPECT_FALSE(identity(0.01).contains("run_id"));
}

// Checkpoints from before solver settings were stored compare by the configuration's summary.
TEST(CheckpointIdentity, OlderCheckpointsCompareTheSolverSummary) {
  const nlohmann::json old_run = {{"batch", 32}, {"solver", "lr 0.02 momentum 0.9"}};
  const nlohmann::json now_run = {{"batch", 32}, {"solver", "lr 0.01 momentum 0.9"}};
  const auto d = identity_differences(checkpoint_identity(old_run.dump(), "", "", "old"),
                                      checkpoint_identity(now_run.dump(), "", "", "now"));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, "solver");
  EXPECT_THROW(checkpoint_identity("{not json", "", "", "bad.h5"), ConfigError);
}

CheckpointDirClaim::Request request(const std::string& dir, double lr, bool resuming = false, bool allow = false) {
  return {.dir = dir,
          .run_id = "run-" + std::to_string(lr),
          .identity = identity(lr),
          .resuming = resuming,
          .allow_changes = allow};
}

void put_checkpoint(const std::string& dir, int64_t iteration) {
  CheckpointContents c;
  c.weights = {{"w", {2}, {1.0f, 2.0f}}};
  c.history = {{"w", {2}, {0.0f, 0.0f}}};
  c.meta.iteration = iteration;
  CheckpointDir(dir).save(c);
}

TEST(CheckpointClaim, ASecondLiveRunIsRefusedNamingTheHolder) {
  TempDir tmp;
  // A hostile directory name: it is only ever a path.
  const std::string dir = tmp.file("ck\n$(touch PWNED)`id`;'\"");
  auto first = CheckpointDirClaim::claim(request(dir, 0.01));
  ASSERT_TRUE(first);
  const std::string e = error_of([&] { CheckpointDirClaim::claim(request(dir, 0.01)); });
  EXPECT_NE(e.find("--checkpoint-dir " + dir + " is in use by run run-0.010000 (host "), std::string::npos) << e;
  EXPECT_NE(e.find(fmt::format("pid {}, since ", ::getpid())), std::string::npos) << e;
  EXPECT_THROW(CheckpointDirClaim::claim(request(dir, 0.01)), RuntimeError);
  EXPECT_FALSE(fs::exists(tmp.file("PWNED")));
  // Released when its holder ends (the kernel drops the lock of a dead process the same way).
  first.reset();
  EXPECT_TRUE(CheckpointDirClaim::claim(request(dir, 0.01)));
}

TEST(CheckpointClaim, AnotherRunIsRefusedWhileTheOwnersCheckpointsAreThere) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  CheckpointDirClaim::claim(request(dir, 0.02)).reset();  // the owner ran and ended
  // No checkpoints of it: nothing to lose, another run may take the directory.
  CheckpointDirClaim::claim(request(dir, 0.01)).reset();
  put_checkpoint(dir, 10);
  const std::string e = error_of([&] { CheckpointDirClaim::claim(request(dir, 0.02)); });
  EXPECT_NE(e.find("--checkpoint-dir " + dir + " holds the checkpoints of run run-0.010000"), std::string::npos) << e;
  EXPECT_NE(e.find("that run has solver.lr=0.01, this one solver.lr=0.02"), std::string::npos) << e;
  EXPECT_THROW(CheckpointDirClaim::claim(request(dir, 0.02, true)), ConfigError);  // resuming is not enough
  // The same run again (a requeue after a crash: the recorded pid is dead) takes it back.
  {
    nlohmann::json record = nlohmann::json::parse(std::ifstream(CheckpointDirClaim::record_path(dir)));
    record["pid"] = 999999999;
    std::ofstream(CheckpointDirClaim::record_path(dir)) << record.dump();
  }
  CheckpointDirClaim::claim(request(dir, 0.01, true)).reset();
  // Fine-tuning says so: the directory changes hands and the record names the new owner.
  CheckpointDirClaim::claim(request(dir, 0.02, true, true)).reset();
  const nlohmann::json record = nlohmann::json::parse(std::ifstream(CheckpointDirClaim::record_path(dir)));
  EXPECT_EQ(record["run_id"], "run-0.020000");
  EXPECT_EQ(record["pid"], ::getpid());
  EXPECT_EQ(record["identity"], identity(0.02));
  EXPECT_EQ(CheckpointDir(dir).list().size(), 1u);  // claiming never touches checkpoints
}

TEST(CheckpointClaim, PlantedLinksAreNotFollowed) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt"), target = tmp.file("victim");
  std::ofstream(target) << "precious\n";
  fs::create_directories(dir);
  fs::create_symlink(target, CheckpointDirClaim::lock_path(dir));
  // A refused link is a runtime failure (exit 1), as everywhere cnnscale refuses one.
  std::string e = error_of([&] { CheckpointDirClaim::claim(request(dir, 0.01)); });
  EXPECT_NE(e.find(CheckpointDirClaim::lock_path(dir) + ": is a symbolic link"), std::string::npos) << e;
  EXPECT_THROW(CheckpointDirClaim::claim(request(dir, 0.01)), RuntimeError);
  fs::remove(CheckpointDirClaim::lock_path(dir));
  fs::create_symlink(target, CheckpointDirClaim::record_path(dir));
  e = error_of([&] { CheckpointDirClaim::claim(request(dir, 0.01)); });
  EXPECT_NE(e.find(CheckpointDirClaim::record_path(dir) + ": is a symbolic link"), std::string::npos) << e;
  EXPECT_THROW(CheckpointDirClaim::claim(request(dir, 0.01)), RuntimeError);
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious\n");
}

}  // namespace
}  // namespace cnnscale
