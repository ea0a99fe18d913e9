// The kernels `cnnscale bench gemm|conv` times, as a backend offers them: for one problem, every
// library variant the device has (cuBLAS, cuBLASLt's heuristic choice and each algorithm it returns;
// each cuDNN convolution algorithm), runnable one at a time on the backend's stream. The timing,
// energy and checking harness above (measure/kernel_bench_run) knows no library.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace cnnscale {

// The number formats a kernel benchmark runs in: the training precisions, and int8 (int8 operands,
// int32 sums and output) for GEMMs, as DeepBench's inference sets.
enum class KernelPrecision { FP32, TF32, BF16, FP16, INT8 };
std::string kernel_precision_name(KernelPrecision p);
KernelPrecision parse_kernel_precision(const std::string& s, const std::string& what = "--precision");
// The storage type of operands (int8: I8 inputs; the output is I32) and of the output.
DType kernel_input_dtype(KernelPrecision p);
DType kernel_output_dtype(KernelPrecision p);

// C (m x n) = op(A) op(B), column-major as cuBLAS and DeepBench write it: A is (m x k) or, with
// trans_a, stored (k x m); B is (k x n) or, with trans_b, stored (n x k).
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool operator==(const GemmProblem&) const = default;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// x (n, c, h, w) convolved with k filters (c, r, s): r rows (height) by s columns (width).
struct ConvProblem {
  int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
  bool operator==(const ConvProblem&) const = default;
  int64_t out_h() const { return (h + 2 * pad_h - r) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad_w - s) / stride_w + 1; }
  // Multiply-adds of one pass (the same for forward, backward-data and backward-filter), times 2.
  double flops() const;
  Shape x_shape() const { return Shape({n, c, h, w}); }
  Shape w_shape() const { return Shape({k, c, r, s}); }
  Shape y_shape() const { return Shape({n, k, out_h(), out_w()}); }
};

// C (m x n) = A B with A (m x k) sparse, `sparsity` the fraction of its elements that are zero, in
// CSR; B (k x n) and C dense, column-major. DeepBench's sparse sets (fp32, no transposes).
struct SparseProblem {
  int64_t m = 0, n = 0, k = 0;
  double sparsity = 0.9;
};

// A in CSR (row_ptr: m + 1 offsets; col_idx and values: its non-zeros, row by row) and B dense.
struct SparseInputs {
  std::vector<int32_t> row_ptr, col_idx;
  std::vector<float> values, b;
  int64_t nnz() const { return static_cast<int64_t>(values.size()); }
};

// One recurrent layer as DeepBench runs it: input size = hidden size, unidirectional, x for every time
// step of every sequence (all of length time_steps), zero initial states. vanilla is cuDNN's
// ReLU cell (DeepBench's); lstm and gru cuDNN's cells (gates: 1, 4, 3).
enum class RnnCell { Vanilla, Lstm, Gru };
std::string rnn_cell_name(RnnCell c);  // "vanilla", "lstm", "gru"
RnnCell parse_rnn_cell(const std::string& s, const std::string& what);
struct RnnProblem {
  RnnCell cell = RnnCell::Lstm;
  int64_t hidden = 0, batch = 0, time_steps = 0;
  bool operator==(const RnnProblem&) const = default;
  int64_t gates() const { return cell == RnnCell::Vanilla ? 1 : cell == RnnCell::Lstm ? 4 : 3; }
  // Forward: per step and gate an (hidden x input) and an (hidden x hidden) GEMM over the batch,
  // 2 * gates * hidden * (input + hidden) * batch * steps; training adds backward-data and
  // backward-weights GEMMs of the same size, three times the forward (DeepBench's count).
  double flops(bool training) const;
};
// Inference: the forward in inference mode; training: forward in training mode (keeping what the
// backward needs), backward-data and backward-weights, one call.
enum class RnnPass { Inference, Training };
std::string rnn_pass_name(RnnPass p);  // "inference", "training"
RnnPass parse_rnn_pass(const std::string& s, const std::string& what = "--pass");

// x as (time_steps, batch, hidden) and, per gate g in cuDNN's order (lstm: input, forget, cell,
// output; gru: reset, update, new), the input matrix w[g] and recurrent matrix r[g] (hidden x hidden,
// row i = output unit i) and their biases bw[g], br[g].
struct RnnInputs {
  std::vector<float> x;
  std::vector<std::vector<float>> w, r, bw, br;
};

enum class ConvPass { Forward, BackwardData, BackwardFilter };
std::string conv_pass_name(ConvPass p);  // "fwd", "bwd_data", "bwd_filter"
ConvPass parse_conv_pass(const std::string& s, const std::string& what = "--pass");

// One way the device can compute a problem. A variant the library refuses for this shape stays in
// the list, unsupported, with the library's status: a benchmark reports it rather than hides it.
struct KernelVariant {
  std::string library;    // "cuBLAS", "cuBLASLt", "cuDNN", "OpenBLAS"
  std::string algorithm;  // "default", "heuristic", "algo 3 (tile 15, stages 8)", "IMPLICIT_PRECOMP_GEMM"
  bool supported = true;
  std::string status;  // why not, when unsupported
  int64_t workspace_bytes = 0;
  // Host time spent preparing it where that can be long (cuDNN RNNs: descriptor, PERSIST_DYNAMIC's
  // runtime-compiled kernel, weight layout, one trial call); none elsewhere.
  std::optional<double> setup_ms;
};

// Thrown when a stop is asked for in the middle of a problem (while its variants are prepared or
// timed): the problem in hand is dropped whole, its rows would be a partial comparison, and the run
// resumes at it. Not an Error.
struct BenchStopped {};

// One problem prepared on a device: its operands allocated, filled from the host values given, and
// its variants listed. run() enqueues one call; output() runs one call and returns the result.
class KernelCase {
 public:
  virtual ~KernelCase() = default;
  virtual const std::vector<KernelVariant>& variants() const = 0;
  virtual void run(size_t variant) = 0;
  // The result of one call of `variant`, as floats in the problem's logical order (C column-major;
  // a convolution's output tensor in NCHW order, whatever its memory order on the device).
  virtual std::vector<float> output(size_t variant) = 0;
  // Bytes of the operands on the device (inputs and output), without any workspace.
  virtual int64_t operand_bytes() const = 0;
};

// The inputs a case is made from, as floats already representable in the input type (rounded by
// the caller), in logical order: GEMM a and b as stored (column-major, after any transposition);
// a convolution's two inputs of its pass (forward: x, w; backward-data: dy, w; backward-filter: x, dy),
// NCHW / KCRS order.
struct KernelInputs {
  std::vector<float> first, second;
};

class KernelBench {
 public:
  virtual ~KernelBench() = default;
  // Polled while a case with a long preparation is built (between RNN algorithms); true throws
  // BenchStopped.
  std::function<bool()> stop_requested;
  // The variants offered, how this backend names them, and what it cannot do, as ConfigError
  // naming the problem (e.g. an int8 convolution, a precision the CPU backend lacks).
  virtual std::unique_ptr<KernelCase> gemm(const GemmProblem& p, KernelPrecision precision,
                                           const KernelInputs& inputs) = 0;
  virtual std::unique_ptr<KernelCase> conv(const ConvProblem& p, ConvPass pass, KernelPrecision precision,
                                           Layout layout, const KernelInputs& inputs) = 0;
  // Sparse times dense (SpMM; SpMV when n is 1) and, as the last variant, the dense GEMM of the same
  // shape with A densified: the baseline a sparse kernel has to beat. Refused (ConfigError) where the
  // backend has no sparse library, as the CPU's.
  virtual std::unique_ptr<KernelCase> spmm(const SparseProblem& p, const SparseInputs& inputs);
  // One recurrent layer through cuDNN's RNN API, each algorithm a variant; output() is y, every
  // step's hidden state, (time_steps, batch, hidden). Refused (ConfigError) where the backend has
  // no RNN library, as the CPU's.
  virtual std::unique_ptr<KernelCase> rnn(const RnnProblem& p, RnnPass pass, KernelPrecision precision,
                                          const RnnInputs& inputs);
};

// The benchmark view of `backend` (CPU: OpenBLAS and im2col; CUDA: cuBLAS, cuBLASLt, cuDNN). The
// backend must outlive it.
std::unique_ptr<KernelBench> make_kernel_bench(Backend& backend);

}  // namespace cnnscale
