// The kernel benchmarks' problems of a shipped network (`bench gemm|conv --net`): its layers as
// DeepBench writes convolutions and GEMMs. Here, beside the network's internals, so the benchmark
// needs none of them.
#pragma once
#include <string>
#include <vector>

#include "backend/kernel_bench.hpp"

namespace cnnscale {

// The problems of a shipped network at `batch` samples: its ungrouped convolutions (grouped ones
// are listed in `skipped`) and its fully connected layers as DeepBench writes them (m outputs,
// n = batch, k inputs, the weights stored transposed: "TN"), each distinct problem once, named by
// the layers that have it ("res2_1_conv2 (x3)").
struct NetProblems {
  std::vector<ConvProblem> convs;
  std::vector<std::string> conv_names;
  std::vector<GemmProblem> gemms;
  std::vector<std::string> gemm_names;
  std::vector<std::string> skipped;
};
NetProblems net_problems(const std::string& net, int64_t batch);

}  // namespace cnnscale
