// What a GPU ran, kernel by kernel, while the work above it said whose work it was: the feed of the
// kernel-level view (`time --kernels`, `bench conv --kernels`; Li et al.'s Fig. 4 and Table II).
// The CUDA backend fills it from CUPTI's activity records (backend/cuda/cupti_trace.cpp): the work
// pushes an external id before each part it owns (a layer's forward, the update, a convolution
// algorithm's trial) and pops it after; CUPTI links every launch made meanwhile to that id. The
// arithmetic on the feed (attribution, roll-up, occupancy) is in measure/, tested on recorded feeds.
// This header includes no CUDA header, so the CPU build compiles it.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cnnscale {

// How a kernel was launched: what a record carries and a summary row is told apart by, since two
// launches of one kernel that differ in it differ in occupancy.
struct KernelLaunch {
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  // Thread-block cluster (Hopper): 0 0 0 for a launch without clusters.
  std::array<int64_t, 3> cluster{0, 0, 0};
  int64_t registers_per_thread = 0;
  int64_t static_shared_memory = 0;   // bytes per block
  int64_t dynamic_shared_memory = 0;  // bytes per block
  // The shared memory the driver configured the SM with for this kernel (its carveout), bytes; 0
  // where the feed does not say. Occupancy reads it as the SM's shared memory.
  int64_t shared_memory_carveout = 0;
  auto operator<=>(const KernelLaunch&) const = default;
};

// One kernel execution.
struct TracedKernel {
  std::string name;  // demangled
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  KernelLaunch launch;
  uint64_t correlation_id = 0;  // of the launching API call (a graph launch for a graph's kernels)
  uint32_t stream = 0;
  bool in_graph = false;  // launched as a node of a CUDA graph
};

// One CUPTI EXTERNAL_CORRELATION record: the API call `correlation_id` was made while `external_id`
// was on top of the pushed external-correlation stack.
struct ExternalCorrelation {
  uint64_t correlation_id = 0;
  uint64_t external_id = 0;
};

struct KernelTrace {
  std::vector<TracedKernel> kernels;  // in launch order (correlation id), then start
  std::vector<ExternalCorrelation> links;
  int64_t dropped_records = 0;  // records CUPTI could not keep (a full buffer): the trace is incomplete
  std::string sm_arch;          // "sm_90": whose occupancy limits apply
  std::string device;           // the GPU's name
};

// A tracing session on one backend: kernels launched between its creation and finish() are traced.
// Push and pop nest (a stack, as CUPTI's); every push needs its pop before finish().
class KernelTracer {
 public:
  virtual ~KernelTracer() = default;
  virtual void push(uint64_t external_id) = 0;
  virtual void pop() = 0;
  // Waits for the device, flushes the records and stops tracing; called once.
  virtual KernelTrace finish() = 0;
};

// Hardware counters per kernel: CUPTI's range profiler with one range per kernel (auto ranges),
// over a window of launches. Values are in the order the kernels were launched.
struct KernelMetricRange {
  std::string name;  // the kernel's, as the profiler names its range
  std::map<std::string, double> values;
};

// How the passes a metric set needs are had (Nsight Compute's --replay-mode kernel|application):
// Kernel: the work runs once and each kernel is run once per pass, the memory it can reach saved
// before the first pass and restored before each next one, so the work sees no difference (each
// pass of a short kernel starts with what the restore left in L2, not what the kernel before it
// left). Work: the whole work runs once per pass, its launches one at a time as under kernel
// replay, and each kernel is measured after the kernels before it, with no restore between. The
// work must launch the same kernels in every run, which is not checked (CUPTI numbers the ranges
// by place), and bear being run again: time's step updates with learning rate 0 and the same
// iteration's seeds; a bench call overwrites its output.
enum class MetricReplay { Kernel, Work };
// "kernel" or "work", as --metric-replay names them; ConfigError for another name.
MetricReplay metric_replay_from_name(const std::string& name);
const char* metric_replay_name(MetricReplay replay);

struct KernelMetricResult {
  std::vector<std::string> metrics;  // as requested, in order
  std::vector<KernelMetricRange> ranges;
  int64_t passes = 0;                          // replay passes each kernel took (the metric set's cost)
  int64_t runs = 0;                            // times the work ran: 1 under kernel replay, `passes` under work replay
  MetricReplay replay = MetricReplay::Kernel;  // how the passes were had
  std::string chip;                            // the profiler's chip name ("GH100")
};

// The kernels one profile() call holds unless told otherwise: CUPTI's counter data is sized for a
// number of ranges before the work runs.
inline constexpr int64_t kDefaultMaxProfiledKernels = 2048;

class KernelMetricProfiler {
 public:
  virtual ~KernelMetricProfiler() = default;
  // Profiles the kernels `work` launches (each measured in as many passes as the metric set needs,
  // had as `replay` says), at most `max_kernels` of them: work that launches more is an error
  // saying so, never a shorter result.
  virtual KernelMetricResult profile(const std::vector<std::string>& metrics, const std::function<void()>& work,
                                     MetricReplay replay = MetricReplay::Kernel,
                                     int64_t max_kernels = kDefaultMaxProfiledKernels) = 0;
};

}  // namespace cnnscale
