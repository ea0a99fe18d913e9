// Resume is bit-identical on CPU: LeNet with dropout on a Fashion-MNIST subset, 50 iterations
// over 2.5 epochs (shuffle RNG, dropout masks, momentum, a step LR schedule and warm-up all in
// play) uninterrupted, versus 30 iterations with checkpoints and then a resume to 50, from the
// newest checkpoint (--resume auto, mid-epoch) and from an older one by path. Every weight,
// every momentum entry and the final loss must be equal bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cpu/cli_runner.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> train_args(const std::string& ckpt_dir, int iterations) {
  return {"train",
          "--net",
          std::string(CNNSCALE_TEST_DATA) + "/train_lenet_dropout.yaml",
          "--data",
          "fashion-mnist",
          "--train-samples",
          "640",
          "--test-samples",
          "200",
          "--batch",
          "32",
          "--iterations",
          std::to_string(iterations),
          "--seed",
          "11",
          "--lr",
          "0.02",
          "--lr-policy",
          "step",
          "--step",
          "1",
          "--gamma",
          "0.5",
          "--warmup-iterations",
          "8",
          "--display",
          "5",
          "--checkpoint-dir",
          ckpt_dir,
          "--json"};
}

nlohmann::json run_ok(const std::vector<std::string>& args) {
  auto r = testing::run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

void expect_bit_identical(const std::vector<CheckpointArray>& a, const std::vector<CheckpointArray>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    ASSERT_EQ(a[i].values.size(), b[i].values.size()) << what << " " << a[i].name;
    EXPECT_EQ(0, std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(float)))
        << what << " " << a[i].name << " differs";
  }
}

TEST(Resume, ContinuesBitIdentically) {
  const fs::path root = fs::temp_directory_path() / ("cnnscale_resume_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string full_dir = (root / "full").string(), part_dir = (root / "part").string(),
                    by_path_dir = (root / "by_path").string();

  // 640 samples / 32 = 20 iterations per epoch.
  nlohmann::json full = run_ok(train_args(full_dir, 50));
  auto part_args = train_args(part_dir, 30);
  part_args.insert(part_args.end(), {"--checkpoint-every", "7"});
  nlohmann::json part = run_ok(part_args);
  // Checkpoints at 7, 14, 20 (epoch end), 21, 28 and 30 (the end); the newest two remain.
  CheckpointDir dir(part_dir);
  ASSERT_EQ(dir.list(), std::vector<std::string>({dir.path_for(28), dir.path_for(30)}));

  // From the older checkpoint by path first: the run resumed in part_dir will prune it.
  auto resume_path = train_args(by_path_dir, 50);
  resume_path.insert(resume_path.end(), {"--resume", dir.path_for(28)});
  nlohmann::json resumed28 = run_ok(resume_path);
  EXPECT_EQ(resumed28["start_iteration"], 28);

  auto resume_auto = train_args(part_dir, 50);
  resume_auto.insert(resume_auto.end(), {"--resume", "auto"});
  nlohmann::json resumed = run_ok(resume_auto);
  EXPECT_EQ(resumed["start_iteration"], 30);
  EXPECT_EQ(resumed["resumed_from"], dir.path_for(30));

  // The final loss as printed (JSON keeps doubles exact) and the test accuracy.
  EXPECT_EQ(full["final_loss"].get<double>(), resumed["final_loss"].get<double>());
  EXPECT_EQ(full["final_loss"].get<double>(), resumed28["final_loss"].get<double>());
  EXPECT_EQ(full["test_top1"], resumed["test_top1"]);
  EXPECT_NE(full["final_loss"].get<double>(), part["final_loss"].get<double>());

  CheckpointContents a = read_checkpoint(CheckpointDir(full_dir).path_for(50));
  for (const std::string& d : {part_dir, by_path_dir}) {
    SCOPED_TRACE(d);
    CheckpointContents b = read_checkpoint(CheckpointDir(d).path_for(50));
    expect_bit_identical(a.weights, b.weights, "weights");
    expect_bit_identical(a.history, b.history, "momentum");
    expect_bit_identical(a.state, b.state, "state");
    EXPECT_EQ(a.meta.loader_rng_state, b.meta.loader_rng_state);
    EXPECT_EQ(a.meta.loader_epoch, b.meta.loader_epoch);
    EXPECT_EQ(a.meta.loader_position, b.meta.loader_position);
  }
  EXPECT_EQ(a.meta.loader_epoch, 2);
  EXPECT_EQ(a.meta.loader_position, 10);

  // A checkpoint from another configuration is refused with a clear message: read into a directory
  // of its own (the resume's check), and in the directory of the run that wrote it (its claim).
  auto other = train_args((root / "other").string(), 50);
  *(std::find(other.begin(), other.end(), "--batch") + 1) = "64";
  other.insert(other.end(), {"--resume", dir.path_for(50)});
  auto r = testing::run_cnnscale(other);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(dir.path_for(50) + ": checkpoint was written with batch=32, this run has batch=64"),
            std::string::npos)
      << r.err;
  auto same_dir = train_args(part_dir, 60);
  *(std::find(same_dir.begin(), same_dir.end(), "--batch") + 1) = "64";
  same_dir.insert(same_dir.end(), {"--resume", "auto"});
  r = testing::run_cnnscale(same_dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("that run has batch=32, this one batch=64"), std::string::npos) << r.err;
  EXPECT_EQ(CheckpointDir(part_dir).latest(), dir.path_for(50));
  fs::remove_all(root);
}

}  // namespace
}  // namespace cnnscale
