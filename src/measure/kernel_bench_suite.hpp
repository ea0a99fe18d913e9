// A kernel benchmark over a problem list: every variant of every problem timed (and its power
// read, and its output checked, when asked), the fastest and the lowest-energy variant of each
// problem marked, and TFLOP/s set against a peak measured first on the same device and format.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_bench.hpp"
#include "measure/kernel_bench_run.hpp"

namespace cnnscale::measure {

struct KernelBenchRow;

struct KernelBenchOptions {
  KernelPrecision precision = KernelPrecision::FP32;
  Layout layout = Layout::NCHW;  // convolutions
  std::vector<ConvPass> passes{ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardFilter};
  std::vector<RnnPass> rnn_passes{RnnPass::Inference, RnnPass::Training};
  uint64_t seed = 1;
  TimingOptions timing;
  double energy_window_seconds = 0;  // 0: no power windows
  double energy_settle_seconds = 0;  // back-to-back calls before each window
  // > 0: power read only for variants at most this many times slower than their problem's fastest
  // (a variant x times slower spends fewer joules only below 1/x of the fastest's power).
  double energy_within = 0;
  std::function<std::optional<double>()> counter_joules;  // the device's cumulative energy counter
  std::string counter_name;
  bool check = false;
  double check_max_macs = 2e8;  // larger problems are not checked: the host reference would take minutes
  int64_t peak_n = 0;           // square GEMM of the peak (0: none measured)
  std::function<void(const std::string&)> progress;
  std::string sweep_axis;                  // conv problems from a sweep: rows record the axis and its value
  std::vector<std::string> problem_names;  // one per problem, prefixed to its label (e.g. the layer)
  int64_t first_problem = 0;               // the list's index of the first problem given (--from)
  // Polled before each problem and each variant: true stops the run there (a stop signal), dropping
  // the problem in hand; the result says where to resume.
  std::function<bool()> stop_requested;
  // The kernel-level view (bench conv --kernels): after a supported variant's timing, one more call
  // handed to this with its row (its kernels traced, or profiled, outside every timed repeat).
  std::function<void(const KernelBenchRow& row, const std::function<void()>& call)> profile_call;
};

struct KernelBenchRow {
  int64_t problem = 0;                     // index in the list
  std::string label;                       // the problem as tables show it
  std::string pass;                        // conv: fwd, bwd_data, bwd_filter; rnn: inference, training; gemm: ""
  int64_t sweep_value = 0;                 // the swept axis' value (a sweep's rows only)
  GemmProblem gemm;                        // as computed (int8: padded)
  std::string padded_from;                 // int8 GEMM: the listed shape when padding changed it
  SparseProblem sparse;                    // spmm
  int64_t nnz = 0;                         // spmm: A's non-zeros as drawn
  std::optional<double> speedup_vs_dense;  // spmm: the dense GEMM's median time over this variant's
  ConvProblem conv;
  RnnProblem rnn;
  std::string library, algorithm;
  bool supported = true;
  std::string status;
  int64_t workspace_bytes = 0;
  std::optional<double> setup_ms;  // host time preparing the variant, where the backend measures it
  int64_t memory_bytes = 0;        // operands + workspace: the call's device memory
  double flops = 0;
  TimingStats timing;
  double tflops = 0, peak_fraction = 0;
  std::optional<double> watts, joules_per_call;
  double energy_seconds = 0;  // the window's length between its two counter updates
  std::string energy_note;    // why no power was read for a supported variant ("" otherwise)
  std::optional<double> check_error;
  double check_tolerance = 0;
  std::string check;  // "ok", "MISMATCH", "not checked (...)", "" without --check
  bool fastest = false, lowest_energy = false;
};

struct KernelBenchResult {
  std::string kind;    // "gemm" or "conv"
  std::string device;  // the backend's description
  std::string precision, layout;
  double peak_tflops = 0;  // 0: not measured
  std::string peak_method;
  std::string energy_method;
  double energy_window_seconds = 0, energy_settle_seconds = 0, energy_within = 0;
  std::optional<double> power_limit_watts;  // the device's enforced limit, beside its power figures
  bool checked = false;
  std::string sweep_axis;  // "" unless the problems are a sweep
  std::string source;      // where the problems came from, for tables
  // Stopped early (stop_requested): the list index of the first problem not run, for --from.
  std::optional<int64_t> stopped_before;
  std::vector<KernelBenchRow> rows;
};

// DeepBench's int8 rule: every dimension rounded up to a multiple of 4.
GemmProblem pad_for_int8(const GemmProblem& p);

KernelBenchResult run_gemm_bench(Backend& backend, KernelBench& bench, const std::vector<GemmProblem>& problems,
                                 const KernelBenchOptions& o);
// Every variant counts the useful work, 2 nnz n FLOPs, so the dense baseline's TFLOP/s are effective.
KernelBenchResult run_spmm_bench(Backend& backend, KernelBench& bench, const std::vector<SparseProblem>& problems,
                                 const KernelBenchOptions& o);
// One recurrent layer per problem, per pass (inference; training: forward, backward-data and
// backward-weights in one call), every cuDNN RNN algorithm a variant.
KernelBenchResult run_rnn_bench(Backend& backend, KernelBench& bench, const std::vector<RnnProblem>& problems,
                                const KernelBenchOptions& o);
KernelBenchResult run_conv_bench(Backend& backend, KernelBench& bench, const std::vector<ConvProblem>& problems,
                                 const KernelBenchOptions& o);

// Marks, among the supported rows of each (problem, pass), the fastest and the lowest-energy one.
void mark_best(std::vector<KernelBenchRow>& rows);

}  // namespace cnnscale::measure
