// Fully-connected gradients from gathered rows (--gather-gradients) on two GPUs under mpirun
// (label gpu; skipped below 2 GPUs): ip1 of dist_convnet_smooth_wide.yaml gathers both ranks'
// rows through NCCL's allgather and forms the job's gradient itself; the run must land where the
// allreduce of the same gradients lands.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "mpi/mpi_runner.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

// 12 deterministic steps of `net` (tests/data) at global batch 64 on the GPUs of the job, the
// final checkpoint in `dir`; `extra` flags last.
std::vector<std::string> train(const std::string& net, const std::string& precision, const std::string& dtype,
                               const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--net",
                                std::string(CNNSCALE_TEST_DATA) + "/" + net,
                                "--data",
                                "synthetic",
                                "--batch",
                                "64",
                                "--iterations",
                                "12",
                                "--seed",
                                "5",
                                "--lr",
                                "0.05",
                                "--device",
                                "gpu",
                                "--precision",
                                precision,
                                "--allreduce-dtype",
                                dtype,
                                "--deterministic",
                                "--checkpoint-dir",
                                dir,
                                "--no-results",
                                "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Largest |a - b| / max|a| over every array of weights and momentum history.
double max_rel_diff(const CheckpointContents& a, const CheckpointContents& b) {
  double worst = 0;
  auto compare = [&](const std::vector<CheckpointArray>& x, const std::vector<CheckpointArray>& y) {
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      double scale = 0, diff = 0;
      for (size_t k = 0; k < std::min(x[i].values.size(), y[i].values.size()); ++k) {
        scale = std::max(scale, std::fabs(static_cast<double>(x[i].values[k])));
        diff = std::max(diff, std::fabs(static_cast<double>(x[i].values[k]) - y[i].values[k]));
      }
      worst = std::max(worst, scale > 0 ? diff / scale : diff);
    }
  };
  compare(a.weights, b.weights);
  compare(a.history, b.history);
  return worst;
}

// fp32 with deterministic algorithms: the two runs differ by the order of ip1's gradient sums alone
// (one matmul over both ranks' 64 rows, against two of 32 and the allreduce of their results), which
// tests/mpi/test_data_parallel.cpp bounds at 1e-4 of each array's largest magnitude over these 12
// steps (Higham's re-association bound, gamma_63 ~ 3.8e-6 a step). bf16 with the in-place exchange:
// the allreduced gradient is rounded to bf16 on each rank and after each addition (three roundings
// of u = 2^-9 relative), the gathered one once; as in that file's bf16-exchange test, 3u per step
// summed over the momentum's steps bounds the history and the weights at 2^-6.
TEST(GatherGpu, GatheredFullyConnectedGradientsLandWhereTheAllreduceLands) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const fs::path root = fs::temp_directory_path() / ("cnnscale_gather_gpu_" + std::to_string(::getpid()));
  fs::remove_all(root);
  struct Case {
    const char* precision;
    const char* dtype;
    double bound;
  };
  for (const Case c : {Case{"fp32", "fp32", 1e-4}, Case{"bf16", "compute", 1.0 / 64}}) {
    SCOPED_TRACE(c.precision);
    const std::string plain = (root / (std::string(c.precision) + "-allreduce")).string();
    const std::string gathered = (root / (std::string(c.precision) + "-gather")).string();
    const char* net = "dist_convnet_smooth_wide.yaml";
    testing::MpiResult a =
        testing::run_mpi(2, train(net, c.precision, c.dtype, plain, {"--gather-gradients", "false"}));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    testing::MpiResult g =
        testing::run_mpi(2, train(net, c.precision, c.dtype, gathered, {"--gather-gradients", "true"}));
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_EQ(nlohmann::json::parse(a.out)["gathering_layers"], 0);
    EXPECT_EQ(nlohmann::json::parse(g.out)["gathering_layers"], 1);
    const double d = max_rel_diff(read_checkpoint(CheckpointDir(plain).path_for(12)),
                                  read_checkpoint(CheckpointDir(gathered).path_for(12)));
    std::printf("%s: gathered against allreduced ip1 gradients, max relative difference %.3g\n", c.precision, d);
    EXPECT_LE(d, c.bound);
  }
  fs::remove_all(root);
}

// bf16 on 2 GPUs with batch norm: summing backward's bf16 gradients in place (batch norm's f32
// ones rounded into their slots per bucket, just before the bucket's allreduce) trains to the same
// bits as the bf16 exchange of the f32 gradients (every gradient rounded into a buffer of its own
// per bucket), with the exchange overlapped, after backward, or with gathered layers. Two ranks
// sum each element once (a + b either way round) and deterministic algorithms compute the same
// gradients, so any difference is the rounding's place: queued after a bucket's allreduce, a
// batch-norm gradient would be summed un-rounded or not at all. Small buckets put the batch-norm
// parameters in several of them.
TEST(InPlaceGpu, BatchNormGradientsSummedInPlaceTrainAsTheBf16ExchangeOnTwoGpus) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const fs::path root = fs::temp_directory_path() / ("cnnscale_in_place_gpu_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const char* net = "dist_convnet_bn.yaml";
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
      {"overlapped", {"--bucket-mb", "0.05"}},
      {"after backward", {"--bucket-mb", "0.05", "--no-overlap"}},
      {"gathered", {"--bucket-mb", "0.05", "--gather-gradients", "true"}}};
  for (const auto& [name, extra] : cases) {
    SCOPED_TRACE(name);
    const std::string ref = (root / (std::string(name) + "-bf16")).string();
    const std::string in_place = (root / (std::string(name) + "-compute")).string();
    testing::MpiResult a = testing::run_mpi(2, train(net, "bf16", "bf16", ref, extra));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    testing::MpiResult b = testing::run_mpi(2, train(net, "bf16", "compute", in_place, extra));
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(nlohmann::json::parse(b.out)["exchange_in_place"], true) << b.out;
    EXPECT_GE(nlohmann::json::parse(b.out)["gradient_buckets"].get<int>(), 2) << b.out;
    const double d = max_rel_diff(read_checkpoint(CheckpointDir(ref).path_for(12)),
                                  read_checkpoint(CheckpointDir(in_place).path_for(12)));
    EXPECT_EQ(d, 0.0) << "in place against the bf16 exchange, max relative difference " << d;
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace cnnscale
