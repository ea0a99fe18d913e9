// `cnnscale train` and its checkpoint directory, single process (label cpu): a resume into another
// network (max pooling changed to average) or other solver settings is refused naming the key and
// both values unless --resume-allow-changes says so; a directory held by a live run is refused
// naming the holder; a write that fails (file-size limit, as a full disk) ends with exit 1 and one
// line naming the checkpoint and the reason, leaving the newest intact checkpoint and no temporary
// file; after --resume auto skipped a truncated newest checkpoint, the rotation removes that one;
// a newest checkpoint that cannot be read now (not damaged) stops --resume auto instead.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "solver/checkpoint.hpp"
#include "solver/checkpoint_claim.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

// dist_convnet on 256 Fashion-MNIST samples at batch 32 (8 iterations per epoch), no test set.
std::vector<std::string> args(const std::string& net, const std::string& ckpt, const std::string& iterations,
                              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {
      "train",   net,  "--data",       "fashion-mnist", "--train-samples",  "256", "--test-samples", "0",
      "--batch", "32", "--iterations", iterations,      "--checkpoint-dir", ckpt,  "--no-results",   "--json"};
  a.insert(a.begin() + 1, "--net");
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

const std::string kConvNet = std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml";

// run_cnnscale in a forked child whose file-size limit is `limit` bytes, with SIGXFSZ ignored so
// that a write past it fails (EFBIG) instead of killing; cnnscale inherits both, the test process
// keeps its own (its other files, gtest's output, must not hit the limit). The child's result
// comes back through <base>.out and <base>.err (a few lines, far below the limit) and its status.
CliResult run_with_file_size_limit(const std::vector<std::string>& a, rlim_t limit, const std::string& base) {
  const pid_t child = ::fork();
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit l{};
    ::getrlimit(RLIMIT_FSIZE, &l);
    l.rlim_cur = limit;
    if (::setrlimit(RLIMIT_FSIZE, &l) != 0) ::_exit(100);
    const CliResult r = run_cnnscale(a);
    std::ofstream(base + ".out") << r.out;
    std::ofstream(base + ".err") << r.err;
    ::_exit(r.exit_code);
  }
  CliResult r;
  if (child < 0) {
    ADD_FAILURE() << "fork failed";
    return r;
  }
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  r.exit_code = exit_code_of(status);
  take_output(base, r.out, r.err);
  return r;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointCli, ResumeIntoAnotherNetworkOrSolverIsRefusedUnlessAllowed) {
  TempDir dir;
  ASSERT_EQ(run_cnnscale(args(kConvNet, dir.file("a"), "8")).exit_code, 0);
  const std::string ckpt = CheckpointDir(dir.file("a")).path_for(8);
  // The same network with its max pooling made average pooling.
  std::string text;
  {
    std::ifstream in(kConvNet);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = text.find("pool: max");
  ASSERT_NE(at, std::string::npos) << "dist_convnet.yaml has no max pooling any more";
  text.replace(at, std::strlen("pool: max"), "pool: ave");
  std::ofstream(dir.file("avg.yaml")) << text;

  CliResult r = run_cnnscale(args(dir.file("avg.yaml"), dir.file("b"), "12", {"--resume", ckpt}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  ASSERT_EQ(r.error_lines().size(), 1u) << r.err;
  EXPECT_NE(r.error_lines()[0].find(ckpt + ": checkpoint was written with network.layers["), std::string::npos)
      << r.err;
  EXPECT_NE(r.error_lines()[0].find("].pool=\"max\", this run has network.layers["), std::string::npos) << r.err;
  EXPECT_NE(r.error_lines()[0].find("].pool=\"ave\""), std::string::npos) << r.err;
  EXPECT_TRUE(CheckpointDir(dir.file("b")).list().empty());

  // Another learning rate, --resume auto in the owner's directory: refused when claiming it.
  r = run_cnnscale(args(kConvNet, dir.file("a"), "12", {"--resume", "auto", "--lr", "0.02"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  ASSERT_EQ(r.error_lines().size(), 1u) << r.err;
  EXPECT_NE(r.error_lines()[0].find("that run has solver.lr=0.01, this one solver.lr=0.02"), std::string::npos)
      << r.err;
  EXPECT_EQ(CheckpointDir(dir.file("a")).list(), std::vector<std::string>({ckpt}));

  // Fine-tuning says so: each difference is logged and the run goes on from the checkpoint.
  r = run_cnnscale(args(dir.file("avg.yaml"), dir.file("b"), "12", {"--resume", ckpt, "--resume-allow-changes"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resuming with a change (--resume-allow-changes): checkpoint network.layers["),
            std::string::npos)
      << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["start_iteration"], 8);
  // Without --resume the flag means nothing: a usage error.
  EXPECT_EQ(run_cnnscale(args(kConvNet, dir.file("c"), "8", {"--resume-allow-changes"})).exit_code, 2);
}

TEST(CheckpointCli, ADirectoryHeldByALiveRunIsRefusedNamingTheHolder) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  // This process holds the directory, as a run training in it would.
  auto holder = CheckpointDirClaim::claim({.dir = ckpt, .run_id = "the-holder", .identity = nlohmann::json::object()});
  CliResult r = run_cnnscale(args(kConvNet, ckpt, "8"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_EQ(r.error_lines().size(), 1u) << r.err;
  EXPECT_NE(r.error_lines()[0].find("--checkpoint-dir " + ckpt + " is in use by run the-holder (host "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.error_lines()[0].find(fmt::format("pid {}", ::getpid())), std::string::npos) << r.err;
  EXPECT_TRUE(CheckpointDir(ckpt).list().empty());
  holder.reset();
  EXPECT_EQ(run_cnnscale(args(kConvNet, ckpt, "8")).exit_code, 0);
}

// The file-size limit stands in for a full disk in CI (a write past it fails with EFBIG, as one
// on a full disk with ENOSPC; test_checkpoint_faults.cpp has a real tmpfs where mounting works).
TEST(CheckpointCli, AFailedCheckpointWriteEndsTheRunWithOneLineAndKeepsTheNewest) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_cnnscale(args(kConvNet, ckpt, "8", {"--checkpoint-every", "4"})).exit_code, 0);
  CheckpointDir cd(ckpt);
  ASSERT_EQ(cd.list(), std::vector<std::string>({cd.path_for(4), cd.path_for(8)}));
  const auto size = static_cast<rlim_t>(fs::file_size(cd.path_for(8)));
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  ASSERT_GT(before.rlim_max, size / 2);
  CliResult r = run_with_file_size_limit(args(kConvNet, ckpt, "16", {"--checkpoint-every", "4", "--resume", "auto"}),
                                         size / 2, dir.file("limited"));

  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_EQ(r.error_lines().size(), 1u) << r.err;
  EXPECT_EQ(r.error_lines()[0].rfind("cnnscale: error: " + cd.path_for(12) + ": cannot write checkpoint: ", 0), 0u)
      << r.err;
  EXPECT_NE(r.error_lines()[0].find(std::strerror(EFBIG)), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // The newest intact checkpoint stays (the oldest went first to make room); no temporary file.
  std::vector<std::string> want = {".cnnscale-owner.json", ".cnnscale-owner.lock", "checkpoint-000000008.h5"};
  EXPECT_EQ(entries(ckpt), want);
  EXPECT_EQ(read_checkpoint(cd.path_for(8)).meta.iteration, 8);
  // And the run goes on from it once there is room.
  r = run_cnnscale(args(kConvNet, ckpt, "16", {"--checkpoint-every", "4", "--resume", "auto"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["start_iteration"], 8);
}

TEST(CheckpointCli, AfterSkippingATruncatedNewestCheckpointTheRotationRemovesIt) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_cnnscale(args(kConvNet, ckpt, "12", {"--checkpoint-every", "4"})).exit_code, 0);
  CheckpointDir cd(ckpt);
  ASSERT_EQ(cd.list(), std::vector<std::string>({cd.path_for(8), cd.path_for(12)}));
  fs::resize_file(cd.path_for(12), fs::file_size(cd.path_for(12)) / 2);
  // Resumed from 8, it writes 10 (its end): 12 is the one to go, 8 and 10 stay.
  CliResult r = run_cnnscale(args(kConvNet, ckpt, "10", {"--resume", "auto"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("removing damaged checkpoint " + cd.path_for(12)), std::string::npos) << r.err;
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(8), cd.path_for(10)}));
  for (const auto& path : cd.list()) EXPECT_EQ(checkpoint_problem(path), "") << path;
}

// --resume auto skips a damaged checkpoint, never one that only cannot be read now (here: a lock
// another program holds, as an NFS or disk error would do): continuing from the older one would
// train that stretch again, and its first checkpoint would remove the newer one as abandoned.
TEST(CheckpointCli, ResumeAutoStopsAtANewestCheckpointThatCannotBeReadNow) {
  if (const char* locking = std::getenv("HDF5_USE_FILE_LOCKING"); locking && std::string(locking) == "FALSE")
    GTEST_SKIP() << "HDF5 file locking is switched off here: a lock cannot make a good file unreadable";
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_cnnscale(args(kConvNet, ckpt, "12", {"--checkpoint-every", "4"})).exit_code, 0);
  CheckpointDir cd(ckpt);
  ASSERT_EQ(cd.list(), std::vector<std::string>({cd.path_for(8), cd.path_for(12)}));
  CliResult r;
  {
    const int fd = ::open(cd.path_for(12).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    r = run_cnnscale(args(kConvNet, ckpt, "16", {"--checkpoint-every", "4", "--resume", "auto"}));
    ::close(fd);
  }
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_EQ(r.error_lines().size(), 1u) << r.err;
  EXPECT_EQ(r.error_lines()[0].rfind("cnnscale: error: --resume auto: cannot read " + cd.path_for(12) + " now", 0), 0u)
      << r.err;
  EXPECT_NE(r.error_lines()[0].find("not skipped for an older checkpoint"), std::string::npos) << r.err;
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(8), cd.path_for(12)}));
  // Readable again, it is the one the run continues from.
  r = run_cnnscale(args(kConvNet, ckpt, "16", {"--checkpoint-every", "4", "--resume", "auto"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["start_iteration"], 12);
}

// Resumed by path from the older of two checkpoints, the run's first checkpoint removes the newer
// one (the future of the branch it left): --resume auto then continues this run, not that one.
TEST(CheckpointCli, ResumingFromAnOlderCheckpointByPathAbandonsTheNewerOnes) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_cnnscale(args(kConvNet, ckpt, "12", {"--checkpoint-every", "4"})).exit_code, 0);
  CheckpointDir cd(ckpt);
  ASSERT_EQ(cd.list(), std::vector<std::string>({cd.path_for(8), cd.path_for(12)}));
  CliResult r = run_cnnscale(args(kConvNet, ckpt, "10", {"--resume", cd.path_for(8)}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: removing checkpoint " + cd.path_for(12) + ": newer than " + cd.path_for(10)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(8), cd.path_for(10)}));
  r = run_cnnscale(args(kConvNet, ckpt, "12", {"--resume", "auto"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["start_iteration"], 10);
}

}  // namespace
}  // namespace cnnscale::testing
