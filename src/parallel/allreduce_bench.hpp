// `bench allreduce`: nccl-tests-style sweep of in-place sum allreduces (f32, bf16 or f16) over MPI_COMM_WORLD,
// on GPUs through the NCCL communicator (CUDA events on its stream) or on host buffers through
// MPI_Allreduce (host clock). algbw and busbw as nccl-tests defines them.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backend/communicator.hpp"
#include "core/dtype.hpp"
#include "parallel/device_binding.hpp"

namespace cnnscale {

// A cumulative energy counter of the device one rank bound to, in joules (nullopt: unreadable now).
using EnergyCounter = std::function<std::optional<double>()>;
// Opens the counter of a rank's device from its GPU UUID ("GPU-...", "" for a CPU rank); a null
// EnergyCounter when it has none. The caller supplies it because the counters (NVML) live in
// measure/, beside parallel/ in the layer order, not below it.
using EnergyCounterOpener = std::function<EnergyCounter(const std::string& gpu_uuid)>;

struct AllreduceBenchConfig {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t step_factor = 2;
  int warmup_iters = 5;
  int iters = 20;   // allreduces per timed repeat
  int repeats = 5;  // timed repeats per size: median, min and max per allreduce over them
  bool gpu = true;  // false: MPI_Allreduce on host memory
  AllreduceAlgo algo = AllreduceAlgo::Ring;
  // NCCL_MAX_CTAS (0: NCCL's choice), CTA policy and stream priority, as train's --allreduce-max-ctas,
  // --allreduce-cta-policy and --allreduce-priority
  NcclTuning nccl;
  // GPU: the timed allreduces of a size captured once into a CUDA graph and replayed, as a graphed
  // training step issues its bucket allreduces; false: each issued from the host in turn, which adds
  // the host's enqueue of every collective (NCCL's non-blocking mode) to the time of small ones.
  bool graph = true;
  DType dtype = DType::F32;        // of the summed elements: F32, BF16 or F16 (the gradient exchange's)
  bool check = false;              // verify each size's sum against the known per-rank pattern
  double timeout_seconds = 300.0;  // NCCL host waits (a hung peer ends in PeerError)
  // Energy per size: after the timed allreduces, enough back-to-back allreduces (the same count on
  // every rank, from the timed median) for `energy_settle_seconds`, then a window of at least this
  // many seconds between two updates of each rank's counter (core/bench_timing's power_while), and
  // before the sweep an idle window of the same length. 0 or no opener: none.
  double energy_window_seconds = 2.0;
  double energy_settle_seconds = 0.5;
  EnergyCounterOpener open_energy_counter;
  std::string energy_counter_name;  // for the results, e.g. "NVML total energy counter (mJ)"
};

// Seconds of allreduces an energy window adds beyond settle + window: room for the counter's update
// period (about 0.1 s) at each end, so the window between updates holds at least the length asked.
inline constexpr double kAllreduceEnergyMarginSeconds = 0.25;

// An energy figure that was not measured.
inline constexpr double kNoEnergy = std::numeric_limits<double>::quiet_NaN();

struct AllreduceBenchRow {
  int64_t bytes = 0;   // count * the element's size
  int64_t count = 0;   // elements per rank
  double time_us = 0;  // one allreduce: the median over repeats of each repeat's slowest rank
  double min_us = 0, max_us = 0;  // the fastest and slowest repeat, per allreduce
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  int64_t wrong = -1;  // elements whose sum was wrong, summed over ranks; -1: not checked
  // The energy window (NaN / 0 when not measured, or a rank's counter was unreadable):
  int64_t energy_iters = 0;       // allreduces of the energy run (settle, window, margin), whole batches
  int64_t energy_batch = 0;       // the batch: the count that fills them at the timed median
  double energy_seconds = 0;      // its length, max over ranks
  double joules = kNoEnergy;      // per allreduce, summed over every rank's device
  double nj_per_byte = kNoEnergy;  // joules / bytes (the message size) * 1e9: all devices' energy per byte reduced
  double dynamic_nj_per_byte = kNoEnergy;  // the same above the idle power (idle_watts per device) over the window
  double watts = kNoEnergy;        // mean power per device over the window
};

struct AllreduceBenchResult {
  int ranks = 1;
  std::string device;                     // "gpu" or "cpu"
  std::string library;                    // "NCCL 2.28.9, NCCL_ALGO=Ring" or "MPI_Allreduce, Open MPI v4.1.4"
  std::string algo;                       // NCCL_ALGO in effect, lower case ("auto": unset), or "mpi" on CPU
  std::string dtype = "fp32";             // the elements summed: fp32, bf16 or fp16
  std::string issue = "host";             // how the timed allreduces were issued: "graph" or "host"
  NcclTuning nccl;  // asked for (--max-ctas, --cta-policy, --priority; the defaults on cpu and in older files)
  std::vector<std::string> rank_devices;  // per rank: host and device (GPU name and UUID, or "cpu")
  int warmup_iters = 0, iters = 0, repeats = 0;
  // Energy: the counter and how it was read ("" when not measured), and the mean power per device
  // over an idle window before the sweep (NaN when not measured).
  std::string energy_method;
  double energy_window_seconds = 0, energy_settle_seconds = 0;
  double idle_watts = kNoEnergy;
  std::vector<AllreduceBenchRow> rows;
};

// "8", "1K", "64M", "1G" (powers of 1024 as in nccl-tests; also KB/MB/GB/KiB/...). ConfigError
// naming `what` for anything else.
int64_t parse_byte_size(const std::string& text, const std::string& what);
// min, min*f, min*f^2, ... up to max, each rounded down to whole elements of `element_bytes`
// (nccl-tests' -b/-e/-f).
std::vector<int64_t> allreduce_bench_sizes(int64_t min_bytes, int64_t max_bytes, int64_t step_factor,
                                           int64_t element_bytes = 4);
// Allreduces in a size's energy window: enough at the timed median to fill `window_seconds`, at least 1.
int64_t allreduce_energy_iters(double window_seconds, double seconds_per_allreduce);
// nccl-tests' allreduce bus bandwidth: algbw * 2 (n - 1) / n.
double allreduce_busbw(double algbw, int ranks);
// The value rank `rank` puts at element `i` with --check: integers 1..31, so that sums over many
// ranks stay exact in float, and in bf16 (8 significant bits: every integer to 256) over up to 8.
float allreduce_check_value(int rank, int64_t i);

// The ranks the bench runs on, as the job (job/job.hpp) made them: their binding, device checks
// and NCCL bootstrap are the job's, as for every measuring command.
struct AllreduceBenchRanks {
  int rank = 0, size = 1;  // the job's: one rank without an MPI launch
  // GPU: this rank's backend and the job's NCCL communicator over it, and the device it bound to
  // (host, "gpu:N", UUID). CPU: null; the bench times MPI_Allreduce itself.
  Backend* backend = nullptr;
  DeviceCommunicator* comm = nullptr;
  RankDevice device;
};

// ConfigError for a bad cfg (sizes, counts, windows; --check's exact sums over `ranks`): checked
// before any rank opens a device.
void validate_allreduce_bench(const AllreduceBenchConfig& cfg, int ranks);

// Collective over the job's ranks (MPI_COMM_WORLD when MpiEnv initialised MPI, else one rank). Every
// rank returns the same rows. ConfigError for a bad cfg (or a GPU cfg without a backend and
// communicator); PeerError when a peer fails (NCCL deadline, MPI error).
// `ranks` left out: one rank, CPU only.
AllreduceBenchResult run_allreduce_bench(const AllreduceBenchConfig& cfg, const AllreduceBenchRanks& ranks = {});

}  // namespace cnnscale
