// The harness of `cnnscale bench gemm|conv`: seeded inputs in each problem's format, the
// independent double-precision reference its outputs are checked against, timing of one variant
// (warm-up, repeats of back-to-back calls between two timing events, median/min/max per call) and
// its power over a window aligned to the energy counter's own updates.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_bench.hpp"
#include "core/bench_timing.hpp"

namespace cnnscale::measure {

// Inputs drawn from a fixed seed, already representable in the precision's input type: floats
// uniform in [-1, 1) rounded to it; int8 integers uniform in [-8, 8] (their int32 sums are exact).
KernelInputs gemm_inputs(const GemmProblem& p, KernelPrecision precision, uint64_t seed);
KernelInputs conv_inputs(const ConvProblem& p, ConvPass pass, KernelPrecision precision, uint64_t seed);

// x uniform in [-1, 1), weights uniform in +-0.5/hidden, biases in +-0.25, rounded to the format.
RnnInputs rnn_inputs(const RnnProblem& p, KernelPrecision precision, uint64_t seed);

// A with each element non-zero with probability 1 - sparsity (positions and values from the seed,
// values uniform in [-1, 1)), in CSR; B uniform in [-1, 1). fp32, as DeepBench's sparse sets.
SparseInputs sparse_inputs(const SparseProblem& p, uint64_t seed);

// The exact result in double and, per element, the sum of |terms| it adds up (the scale its
// rounding errors are measured against): GEMM column-major, convolution outputs NCHW / KCRS.
struct Reference {
  std::vector<double> value, magnitude;
};
Reference gemm_reference(const GemmProblem& p, const KernelInputs& in);
Reference conv_reference(const ConvProblem& p, ConvPass pass, const KernelInputs& in);
Reference sparse_reference(const SparseProblem& p, const SparseInputs& in);
// y, every step's hidden state (time_steps, batch, hidden), from zero initial states; magnitudes 1
// (the recurrence is not a sum of terms: its error is bounded in absolute terms, rnn_check_tolerance).
Reference rnn_reference(const RnnProblem& p, const RnnInputs& in);

// max_i |out_i - ref_i| / max(magnitude_i, tiny): the error relative to the terms summed.
double normalized_error(const std::vector<float>& out, const Reference& ref);
// The largest normalized error a correct kernel of this format can show; see the .cpp for the
// argument. `terms` is the number of products per output element.
double check_tolerance(KernelPrecision precision, int64_t terms);
// The largest absolute error of y a correct RNN of this format can show (argument in the .cpp).
double rnn_check_tolerance(KernelPrecision precision, const RnnProblem& p);

struct TimingOptions {
  int warmup_calls = 3;
  int repeats = 10;
  double min_repeat_ms = 2.0;  // calls per repeat: enough for one repeat to last this long
  int64_t max_calls_per_repeat = 1000;
  // Seconds the timed repeats of one variant may last: a variant whose calls take seconds (an fp32
  // GRU of 1500 steps) gets fewer repeats, never under min_repeats, and warm-up calls only while they
  // fit half of it; its row records the repeats it ran. 0: always `repeats`.
  double max_seconds = 2.0;
  int min_repeats = 3;
};

// Calls per repeat so that one lasts `min_repeat_ms` at `first_call_ms` per call (1..max).
int64_t calls_per_repeat(double first_call_ms, const TimingOptions& o);

// Times `call` (which enqueues one call on the backend's stream) with the backend's timing events.
TimingStats time_calls(Backend& backend, const std::function<void()>& call, const TimingOptions& o);

// The harness pieces every benchmark shares (timing statistics, the counter-aligned power window)
// live in core/bench_timing.hpp, below parallel/ where bench allreduce uses them too.
using cnnscale::measure_power_window;
using cnnscale::PowerWindow;
using cnnscale::PowerWindowHooks;
using cnnscale::timing_stats;
using cnnscale::TimingStats;

}  // namespace cnnscale::measure
