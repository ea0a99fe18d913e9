// Problem lists of the kernel benchmarks: DeepBench's sets as CSV files under data/bench/ (one per
// kind and set, a header row naming the columns), and one problem written on the command line.
#pragma once
#include <string>
#include <vector>

#include "backend/kernel_bench.hpp"

namespace cnnscale::measure {

// The sets DeepBench defines, as data/bench/<kind>-<set>.csv names them.
inline const std::vector<std::string>& bench_set_names() {
  static const std::vector<std::string> names{"training", "inference-server", "inference-device"};
  return names;
}

// The conv sets: DeepBench's and Li et al.'s Table I (data/bench/conv-li-table1.csv: their five
// profiled configurations Conv1-Conv5, convnet-benchmarks' layers L1, L3-L5 and their own Conv2).
inline const std::vector<std::string>& conv_bench_set_names() {
  static const std::vector<std::string> names{"training", "inference-server", "inference-device", "li-table1"};
  return names;
}

// Where a set's problems come from, for tables: "DeepBench training set", "Li et al. Table I".
inline std::string bench_set_source(const std::string& set) {
  return set == "li-table1" ? "Li et al. Table I (set li-table1)" : "DeepBench " + set + " set";
}

// data/bench/<kind>-<set>.csv under the working directory, else the source tree; ConfigError
// naming the places tried when neither has it.
std::string bench_shape_file(const std::string& kind, const std::string& set);

// Each throws ConfigError naming the file and line of a malformed row.
// gemm columns: m,n,k,trans_a,trans_b (1/0).
std::vector<GemmProblem> read_gemm_shapes(const std::string& path);
// conv columns, DeepBench's order: w,h,c,n,k,s,r,pad_w,pad_h,stride_w,stride_h (s: filter width).
std::vector<ConvProblem> read_conv_shapes(const std::string& path);

// sparse columns: m,n,k,trans_a,trans_b,sparsity (DeepBench's lists have no transposes; one is refused).
std::vector<SparseProblem> read_sparse_shapes(const std::string& path);

// rnn columns, as the file: hidden,batch,time_steps,cell (vanilla, lstm, gru); input size = hidden.
std::vector<RnnProblem> read_rnn_shapes(const std::string& path);
RnnProblem parse_rnn_shape(const std::string& text, const std::string& what = "--shape");
std::string rnn_label(const RnnProblem& p);  // "lstm h=512 n=16 t=25"

// --shape: "m,n,k[,trans_a,trans_b]" and the conv file's row; ConfigError naming `what`.
GemmProblem parse_gemm_shape(const std::string& text, const std::string& what = "--shape");
ConvProblem parse_conv_shape(const std::string& text, const std::string& what = "--shape");
// "m,n,k,sparsity"
SparseProblem parse_sparse_shape(const std::string& text, const std::string& what = "--shape");

// Li et al.'s one-axis sweeps around a base 5-tuple (batch b, square input i, filters f, square
// kernel k, stride s), unpadded, over c input channels: the axis is one of "b", "i", "f", "k", "s".
struct ConvSweepBase {
  int64_t b = 64, i = 128, f = 64, k = 11, s = 1, c = 3;
};
ConvSweepBase parse_sweep_base(const std::string& text, const std::string& what = "--sweep-base");
// The default values of each axis: batch 32..512, input 32..256, filters 32..512 (as Li et al.'s
// ranges, coarser steps), kernel 1..15 odd, stride 1..11.
std::vector<int64_t> default_sweep_values(const std::string& axis);
// One problem per value; ConfigError naming `what` for an unknown axis or a kernel larger than the input.
std::vector<ConvProblem> conv_sweep(const std::string& axis, const std::vector<int64_t>& values,
                                    const ConvSweepBase& base, const std::string& what = "--sweep");
int64_t sweep_value(const std::string& axis, const ConvProblem& p);

// "m=1760 n=16 k=1760 NT" and "n=16 c=3 224x224 k=64 7x7/2 pad 3" for tables.
std::string gemm_label(const GemmProblem& p);
std::string conv_label(const ConvProblem& p);
std::string sparse_label(const SparseProblem& p);  // "m=7680 n=1 k=2560 90% zeros"

}  // namespace cnnscale::measure
