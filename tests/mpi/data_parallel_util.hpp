// What the data-parallel tests share: the tolerance of the weight comparison (argued below), a
// work folder, the training command lines, one process and an mpirun job, and the comparison of
// their final checkpoints and test sets.
#pragma once

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

namespace cnnscale::data_parallel_test {

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

inline std::vector<std::string> train_args(const std::string& net, const std::string& ckpt_dir, int batch = 64,
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

inline std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& extra) {
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// One thread of OpenBLAS, as the mpi runner gives every rank: OpenBLAS may pick another kernel
// path (another summation order) for another thread count, and the 1-rank job must be bit for bit
// the one-process run.
inline nlohmann::json single_process(const std::vector<std::string>& args) {
  auto r = testing::run_cnnscale(args, {"OPENBLAS_NUM_THREADS=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

inline nlohmann::json mpi_job(int ranks, const std::vector<std::string>& args) {
  auto r = testing::run_mpi(ranks, args);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0 || r.out.empty()) return nlohmann::json();
  // Only rank 0 prints the JSON line: exactly one line on stdout.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  return nlohmann::json::parse(r.out);
}

inline CheckpointContents final_checkpoint(const std::string& dir, int iteration = 12) {
  return read_checkpoint(CheckpointDir(dir).path_for(iteration));
}

// Largest |a - b| / max|a| over every array of weights and momentum history.
inline double max_rel_diff(const CheckpointContents& a, const CheckpointContents& b, std::string* where = nullptr) {
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

inline void expect_matches_reference(const CheckpointContents& ref, const std::string& dir, const char* what) {
  std::string where;
  const double d = max_rel_diff(ref, final_checkpoint(dir), &where);
  std::printf("%s: max relative difference to one process %.3g (%s)\n", what, d, where.c_str());
  EXPECT_LE(d, kRelTolerance) << what << ": " << where;
}

// The job's accuracy is over the whole test set although each rank evaluated a shard.
inline void expect_whole_test_set(const nlohmann::json& ref, const nlohmann::json& job) {
  EXPECT_EQ(job["test_samples"], 300);
  EXPECT_NEAR(job["test_top1"].get<double>(), ref["test_top1"].get<double>(), 1.5 / 300);
  EXPECT_NEAR(job["final_loss"].get<double>(), ref["final_loss"].get<double>(), 1e-4);
}
}  // namespace cnnscale::data_parallel_test
