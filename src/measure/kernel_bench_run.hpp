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
};

struct TimingStats {
  double median_ms = 0, min_ms = 0, max_ms = 0;  // per call
  int repeats = 0;
  int64_t calls_per_repeat = 0;
};

// Per-call statistics of repeats that each timed `calls` calls.
TimingStats timing_stats(std::vector<double> repeat_ms, int64_t calls);
// Calls per repeat so that one lasts `min_repeat_ms` at `first_call_ms` per call (1..max).
int64_t calls_per_repeat(double first_call_ms, const TimingOptions& o);

// Times `call` (which enqueues one call on the backend's stream) with the backend's timing events.
TimingStats time_calls(Backend& backend, const std::function<void()>& call, const TimingOptions& o);

// Mean power of a device kept busy by a kernel, over a window between two updates of its cumulative
// energy counter (NVML refreshes it about every 100 ms: a window cut at arbitrary instants carries up
// to one refresh period of error at each end; cut at the updates, only the polling interval).
struct PowerWindow {
  std::optional<double> watts;
  double seconds = 0;  // between the two counter updates
  double joules = 0;   // counter difference over them
  int64_t calls = 0;   // calls enqueued while the window was measured
  std::string method;  // how the figure was obtained (or why there is none)
};

struct PowerWindowHooks {
  std::function<std::optional<double>()> counter_joules;  // cumulative; nullopt: unreadable
  std::function<void(int64_t)> enqueue;                   // enqueue n calls, returns at once
  std::function<double()> now_seconds;                    // a steady clock
  std::function<void(double)> sleep_seconds;
  std::function<void()> drain;  // wait for the enqueued calls
};

// Keeps about `lead_seconds` of calls (at `seconds_per_call`) enqueued ahead of the clock; after
// `settle_seconds` of that (a GPU's power controller lets a burst after idle draw more than its limit
// for a few hundred milliseconds: a window there reads the transient, not the kernel's steady power),
// waits for one counter update, then for the first update at least `window_seconds` later. No update
// within `update_timeout_seconds`: no figure (the counter is frozen or absent).
PowerWindow measure_power_window(const PowerWindowHooks& hooks, double seconds_per_call, double window_seconds,
                                 double settle_seconds = 0.0, double lead_seconds = 0.05,
                                 double update_timeout_seconds = 0.5, double poll_seconds = 0.0005);

}  // namespace cnnscale::measure
