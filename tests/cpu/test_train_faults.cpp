// `cnnscale train` under faults, single process (label cpu): divergence caught at the step it
// happens although the loss is read only every few steps, with no checkpoint from it and the last
// good one kept; an unreadable newest checkpoint skipped by --resume auto; a results root or a
// checkpoint directory that cannot be written, and zero epochs/iterations, refused before the
// first step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

// dist_convnet on 256 Fashion-MNIST samples at batch 32 (8 iterations per epoch), no test set.
std::vector<std::string> args(const std::string& ckpt, const std::string& iterations = "12") {
  return {"train",
          "--net",
          std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml",
          "--data",
          "fashion-mnist",
          "--train-samples",
          "256",
          "--test-samples",
          "0",
          "--batch",
          "32",
          "--iterations",
          iterations,
          "--display",
          "5",
          "--checkpoint-dir",
          ckpt,
          "--no-results",
          "--json"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& extra) {
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

// Iteration 7 lies between the loss reads at 5 and 10; checkpoints are written after every step.
// The device-side flag must name 7 (not 10, where the loss is next read), no checkpoint of 7 or
// later may exist, and the two kept checkpoints (5 and 6) must hold finite values.
TEST(TrainFaults, NonFiniteStepIsNamedAndNeverCheckpointed) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  CliResult r = run_cnnscale(with(args(ckpt), {"--checkpoint-every", "1"}), {"CNNSCALE_INJECT_NONFINITE_AT=7"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cnnscale: error: training diverged: non-finite loss or gradient at iteration 7 "),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // no JSON line for a failed run
  const std::vector<std::string> kept = CheckpointDir(ckpt).list();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], CheckpointDir(ckpt).path_for(5));
  EXPECT_EQ(kept[1], CheckpointDir(ckpt).path_for(6));
  for (const auto& path : kept) {
    const CheckpointContents c = read_checkpoint(path);
    for (const auto& a : c.weights)
      for (float v : a.values) ASSERT_TRUE(std::isfinite(v)) << path << " " << a.name;
  }
  // And the run continues from the last good state once the cause is gone.
  CliResult again = run_cnnscale(with(args(ckpt), {"--resume", "auto"}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["start_iteration"], 6);
}

// A non-finite step right at a display boundary, and the first step: the same line.
TEST(TrainFaults, NonFiniteAtADisplayOrTheFirstStep) {
  for (const char* at : {"5", "1"}) {
    TempDir dir;
    CliResult r = run_cnnscale(args(dir.file("ckpt")), {std::string("CNNSCALE_INJECT_NONFINITE_AT=") + at});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(std::string("non-finite loss or gradient at iteration ") + at + " "), std::string::npos)
        << r.err;
    EXPECT_TRUE(CheckpointDir(dir.file("ckpt")).list().empty());
  }
}

TEST(TrainFaults, ResumeAutoSkipsAnUnreadableNewestCheckpoint) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_cnnscale(with(args(ckpt), {"--checkpoint-every", "4"})).exit_code, 0);
  CheckpointDir cd(ckpt);
  ASSERT_EQ(cd.list().size(), 2u);  // 8 and 12
  // The newest cut in half, as a full disk or a node failure during a copy leaves it.
  const std::string newest = cd.path_for(12);
  fs::resize_file(newest, fs::file_size(newest) / 2);
  CliResult resumed = run_cnnscale(with(args(ckpt, "16"), {"--resume", "auto"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("--resume auto: skipping unreadable checkpoint: " + newest), std::string::npos)
      << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + cd.path_for(8) + " at iteration 8"), std::string::npos) << resumed.err;
  EXPECT_EQ(nlohmann::json::parse(resumed.out)["start_iteration"], 8);
}

TEST(TrainFaults, ResumeAutoWithNoReadableCheckpointStops) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  fs::create_directories(ckpt);
  std::ofstream(CheckpointDir(ckpt).path_for(4)) << "not a checkpoint";
  CliResult r = run_cnnscale(with(args(ckpt), {"--resume", "auto"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(lines(r.err.substr(r.err.find("cnnscale: error:"))), 1u) << r.err;
  EXPECT_NE(r.err.find("cnnscale: error: --resume auto: none of the 1 checkpoints in " + ckpt + " is readable"),
            std::string::npos)
      << r.err;
}

// Every one of these fails in well under a second, before any training step: no checkpoint
// directory appears, nothing is written under the results root.
TEST(TrainFaults, UnwritableResultsRootOrCheckpointDirIsRefusedBeforeTraining) {
  TempDir dir;
  std::ofstream(dir.file("a_file")) << "x";
  const std::string ckpt = dir.file("ckpt");
  auto train = [&](const std::string& results, const std::string& checkpoints) {
    return run_cnnscale({"train", "--net", std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml", "--data",
                         "fashion-mnist", "--train-samples", "256", "--test-samples", "0", "--batch", "32",
                         "--iterations", "4", "--checkpoint-dir", checkpoints, "--checkpoint-every", "1", "--results",
                         results});
  };
  struct Case {
    std::string results, checkpoints, expect;
  };
  const std::vector<Case> cases = {
      {dir.file("a_file"), ckpt, "--results " + dir.file("a_file") + ": is not a directory"},
      {dir.file("a_file") + "/results", ckpt, "--results " + dir.file("a_file") + "/results: cannot create"},
      // Not writable even for root (CI runs as root, so permission bits would not do).
      {"/proc/cnnscale-results", ckpt, "--results /proc/cnnscale-results: cannot create"},
      {dir.file("results"), dir.file("a_file"), "--checkpoint-dir " + dir.file("a_file") + ": is not a directory"},
      {dir.file("results"), "/proc/cnnscale-ckpt", "--checkpoint-dir /proc/cnnscale-ckpt: cannot create"},
  };
  for (const Case& c : cases) {
    CliResult r = train(c.results, c.checkpoints);
    EXPECT_EQ(r.exit_code, 2) << c.expect << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("cnnscale: error: " + c.expect), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(ckpt) && !CheckpointDir(ckpt).list().empty());
  }
}

TEST(TrainFaults, ZeroEpochsOrIterationsIsAnError) {
  TempDir dir;
  for (const char* flag : {"--epochs", "--iterations"}) {
    CliResult r = run_cnnscale({"train", "--net", "lenet", "--data", "fashion-mnist", flag, "0", "--no-results"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    // In the words of the entry's range, as the command line checks every count of train's table.
    EXPECT_NE(r.err.find(std::string("cnnscale: error: ") + flag + ": must be at least 1, got 0"), std::string::npos)
        << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
  }
}

}  // namespace
}  // namespace cnnscale::testing
