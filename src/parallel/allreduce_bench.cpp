// `bench allreduce`: sizes, nccl-tests' bandwidth definitions and the timed sweep. GPU: n
// back-to-back NCCL allreduces captured into a CUDA graph and replayed between its two timing
// points (--issue graph), or issued from the host between two events on the communication stream
// (--issue host); CPU: MPI_Allreduce between two steady-clock readings. Both: warm-up first, ranks start together after
// a barrier; each of --repeats timings takes its slowest rank, and the reported time is the median per allreduce over
// the repeats (with min and max), the statistics every cnnscale benchmark reports. Energy, where the caller gives
// counters: further back-to-back allreduces per size, the same count on every rank, while each rank's counter is read
// at its own updates (core/bench_timing's power_while), summed over ranks, and an idle window before the sweep.
#include "parallel/allreduce_bench.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "core/bench_timing.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/precision.hpp"
#include "parallel/allreduce_bench_target.hpp"
#include "parallel/mpi_check.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
namespace {

using allreduce_bench::barrier;
using allreduce_bench::BenchTarget;
using allreduce_bench::mpi_env;
using allreduce_bench::seconds_since;

double max_over_ranks(double value) {
  if (mpi_env().initialized()) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return value;
}

// Element-wise: each repeat's slowest rank (a collective ends when its last rank does).
std::vector<double> max_over_ranks(std::vector<double> values) {
  if (mpi_env().initialized())
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_MAX,
                            MPI_COMM_WORLD));
  return values;
}

long long sum_over_ranks(long long value) {
  if (mpi_env().initialized())
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  return value;
}

double sum_over_ranks(double value) {
  if (mpi_env().initialized()) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  return value;
}

}  // namespace

void validate_allreduce_bench(const AllreduceBenchConfig& cfg, int ranks) {
  const auto element = static_cast<int64_t>(dtype_size(cfg.dtype));
  const std::string name = float_type_name(cfg.dtype);
  if (cfg.min_bytes < element)
    throw_config("bench allreduce: -b {} is smaller than one {} element ({} bytes)", cfg.min_bytes, name, element);
  if (cfg.max_bytes < cfg.min_bytes)
    throw_config("bench allreduce: -e {} is smaller than -b {}", cfg.max_bytes, cfg.min_bytes);
  if (cfg.step_factor < 2) throw_config("bench allreduce: -f {} must be at least 2", cfg.step_factor);
  if (cfg.warmup_iters < 0) throw_config("bench allreduce: -w {} must not be negative", cfg.warmup_iters);
  if (cfg.iters < 1) throw_config("bench allreduce: -n {} must be at least 1", cfg.iters);
  if (cfg.repeats < 1) throw_config("bench allreduce: --repeats {} must be at least 1", cfg.repeats);
  if (!(cfg.energy_settle_seconds >= 0) || cfg.energy_settle_seconds > 60)
    throw_config("bench allreduce: --energy-settle {} must be between 0 and 60 seconds", cfg.energy_settle_seconds);
  if (!(cfg.energy_window_seconds >= 0) || cfg.energy_window_seconds > 600)
    throw_config("bench allreduce: --energy-window {} must be between 0 (no energy) and 600 seconds",
                 cfg.energy_window_seconds);
  if (!cfg.gpu && cfg.max_bytes / element > INT_MAX)
    throw_config("bench allreduce: -e {} exceeds what one MPI_Allreduce can count ({} elements)", cfg.max_bytes,
                 INT_MAX);
  // --check compares with exact sums: every partial sum of the pattern (31 at most per rank) must
  // be an integer the format holds exactly, 256 in bf16 (8 significant bits), 2048 in fp16.
  const int exact = cfg.dtype == DType::BF16 ? 256 : cfg.dtype == DType::F16 ? 2048 : 1 << 24;
  if (cfg.check && 31 * ranks > exact)
    throw_config("bench allreduce --check --dtype {}: sums over {} ranks can reach {}, past the {} integers {} holds "
                 "exactly; check with fewer ranks or another dtype",
                 name, ranks, 31 * ranks, exact, name);
}

namespace {

// One energy window, the same work on every rank: after a barrier, `work` runs while each rank's
// counter is read at its own updates (power_while, the harness the kernel benches share: the first
// update `settle` seconds into the work to the last before it ends); the ranks' mean powers summed
// (NaN unless every rank had a window), the longest window, and the longest time the work took.
struct Window {
  double watts = kNoEnergy;  // all ranks' devices together
  double seconds = 0;        // the counter-aligned window, longest rank
  double work_seconds = 0;   // the whole work, longest rank
};
Window energy_window(const EnergyCounter& counter, double settle, const std::function<void()>& work) {
  barrier();
  const auto t0 = std::chrono::steady_clock::now();
  const PowerWindow p = power_while(counter, work, settle);
  Window w;
  w.work_seconds = max_over_ranks(seconds_since(t0));
  w.seconds = max_over_ranks(p.seconds);
  const double watts = sum_over_ranks(p.watts ? *p.watts : 0.0);
  if (sum_over_ranks(p.watts ? 1.0 : 0.0) == static_cast<double>(mpi_env().size())) w.watts = watts;
  return w;
}

}  // namespace

int64_t allreduce_energy_iters(double window_seconds, double seconds_per_allreduce) {
  if (!(seconds_per_allreduce > 0)) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(window_seconds / seconds_per_allreduce)));
}

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  for (auto [suffix, s] : {std::pair{"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}})
    if (unit == suffix || unit == std::string(suffix) + "B" || unit == std::string(suffix) + "IB") shift = s;
  if (digits == 0 || digits > 15 || shift < 0)
    throw_config("{} '{}': expected a byte count with an optional K, M, G or T suffix (1024-based), e.g. 8, 1K, 1G",
                 what, text);
  return std::stoll(text.substr(0, digits)) << shift;
}

std::vector<int64_t> allreduce_bench_sizes(int64_t min_bytes, int64_t max_bytes, int64_t step_factor,
                                           int64_t element_bytes) {
  std::vector<int64_t> sizes;
  const int64_t word = element_bytes;
  for (int64_t b = min_bytes; b <= max_bytes; b *= step_factor) {
    sizes.push_back(b / word * word);
    if (b > max_bytes / step_factor) break;  // the next step would pass max (or overflow)
  }
  return sizes;
}

double allreduce_busbw(double algbw, int ranks) {
  return algbw * 2.0 * (ranks - 1) / ranks;
}

float allreduce_check_value(int rank, int64_t i) {
  return static_cast<float>((i * 7 + static_cast<int64_t>(rank) * 13) % 31 + 1);
}

AllreduceBenchResult run_allreduce_bench(const AllreduceBenchConfig& cfg, const AllreduceBenchRanks& ranks) {
  validate_allreduce_bench(cfg, ranks.size);
  // The figures' reductions over ranks below are MPI_COMM_WORLD's: the job's ranks must be all of them.
  CNNSCALE_CHECK(ranks.size == (mpi_env().initialized() ? mpi_env().size() : 1),
                 "bench allreduce: a job of {} rank(s) in a launch of {}", ranks.size, mpi_env().size());
  AllreduceBenchResult result;
  result.ranks = ranks.size;
  result.dtype = float_type_name(cfg.dtype);
  const int rank = ranks.rank;
  const auto element = static_cast<int64_t>(dtype_size(cfg.dtype));
  const std::vector<int64_t> sizes = allreduce_bench_sizes(cfg.min_bytes, cfg.max_bytes, cfg.step_factor, element);
  const int64_t max_count = sizes.back() / element;

  // One rank's in-place allreduce moves nothing and captures no work: a replayed graph would time an
  // empty interval (and fill the energy window with millions of empty replays), so one rank is
  // host-issued, as nccl-tests times it, and recorded as such.
  const bool graph = cfg.gpu && cfg.graph && result.ranks > 1;
  std::unique_ptr<BenchTarget> target;
  if (cfg.gpu) {
    CNNSCALE_CHECK(ranks.backend && ranks.comm, "bench allreduce on GPUs needs the job's backend and communicator");
    target = allreduce_bench::make_gpu_target(*ranks.backend, *ranks.comm, ranks.device, max_count, rank,
                                              cfg.timeout_seconds, cfg.dtype, graph);
  } else {
    target = allreduce_bench::make_cpu_target(max_count, rank, cfg.dtype);
  }
  result.device = cfg.gpu ? "gpu" : "cpu";
  result.issue = graph ? "graph" : "host";
  result.nccl = cfg.gpu ? cfg.nccl : NcclTuning{};
  result.library = target->library();
  result.algo = target->algo();
  result.rank_devices = mpi_env().allgather(target->device_line());
  result.warmup_iters = cfg.warmup_iters;
  result.iters = cfg.iters;
  result.repeats = cfg.repeats;

  // Every rank runs the energy windows (they hold collectives) whether or not its own counter opened.
  const bool energy = cfg.energy_window_seconds > 0 && cfg.open_energy_counter != nullptr;
  EnergyCounter counter;
  if (energy) {
    counter = cfg.open_energy_counter(target->gpu_uuid());
    result.energy_window_seconds = cfg.energy_window_seconds;
    result.energy_settle_seconds = cfg.energy_settle_seconds;
    result.energy_method = fmt::format(
        "{}; per size, back-to-back allreduces after the timed ones in whole batches of the count that fills {:g} "
        "s of settling, a {:g} s window and {:g} s for the counter's updates at the timed median (the same on every "
        "rank; another batch while the slowest rank has run for less); each rank's mean power between the first "
        "update of its counter {:g} s into them and the last before they end, summed over ranks; joules per "
        "allreduce = that power x the time per allreduce of the whole energy run; idle: the same window before the "
        "sweep with nothing running",
        cfg.energy_counter_name.empty() ? "device energy counter" : cfg.energy_counter_name, cfg.energy_settle_seconds,
        cfg.energy_window_seconds, kAllreduceEnergyMarginSeconds, cfg.energy_settle_seconds);
    const Window idle = energy_window(counter, 0.0, [&] {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(cfg.energy_window_seconds + kAllreduceEnergyMarginSeconds));
    });
    if (!std::isnan(idle.watts)) result.idle_watts = idle.watts / result.ranks;
  }

  // The sum of every rank's pattern at element i depends on i % 31 only (see allreduce_check_value).
  std::array<float, 31> expected{};
  for (int64_t i = 0; i < 31; ++i)
    for (int r = 0; r < result.ranks; ++r) expected[static_cast<size_t>(i)] += allreduce_check_value(r, i);

  for (int64_t bytes : sizes) {
    AllreduceBenchRow row;
    row.bytes = bytes;
    row.count = bytes / element;
    // Non-zero data; in-place sums grow it by a factor of `ranks` per allreduce, which does not
    // change the cost of the additions (it may reach inf on long runs, never denormals).
    target->fill_pattern(row.count);
    // Each repeat's slowest rank, then the per-allreduce median, min and max over the repeats.
    std::vector<double> repeat_ms =
        max_over_ranks(target->timed_seconds(row.count, cfg.warmup_iters, cfg.iters, cfg.repeats));
    for (double& v : repeat_ms) v *= 1e3;
    const TimingStats stats = timing_stats(std::move(repeat_ms), cfg.iters);
    const double seconds = stats.median_ms * 1e-3;
    row.time_us = seconds * 1e6;
    row.min_us = stats.min_ms * 1e3;
    row.max_us = stats.max_ms * 1e3;
    row.algbw_gbs = static_cast<double>(bytes) / 1e9 / seconds;
    row.busbw_gbs = allreduce_busbw(row.algbw_gbs, result.ranks);
    if (energy) {
      // The count from the timed median, the same on every rank; should the batch end early (a median
      // below the clock's resolution, a machine faster than when timed), every rank runs another, as
      // long as the slowest rank has not been at it for the whole time asked (a collective decision).
      const double needed = cfg.energy_settle_seconds + cfg.energy_window_seconds + kAllreduceEnergyMarginSeconds;
      const int64_t batch = allreduce_energy_iters(needed, seconds);
      row.energy_batch = batch;
      const Window w = energy_window(counter, cfg.energy_settle_seconds, [&] {
        const auto t0 = std::chrono::steady_clock::now();
        row.energy_iters = 0;
        do {
          target->run(row.count, batch);
          row.energy_iters += batch;
        } while (max_over_ranks(seconds_since(t0)) < needed);
      });
      row.energy_seconds = w.seconds;
      if (!std::isnan(w.watts)) {
        const double per_allreduce = w.work_seconds / static_cast<double>(row.energy_iters);
        row.joules = w.watts * per_allreduce;
        row.nj_per_byte = row.joules / static_cast<double>(bytes) * 1e9;
        row.watts = w.watts / result.ranks;
        if (!std::isnan(result.idle_watts))
          row.dynamic_nj_per_byte =
              (w.watts - result.idle_watts * result.ranks) * per_allreduce / static_cast<double>(bytes) * 1e9;
      }
    }
    if (cfg.check) {
      target->fill_pattern(row.count);
      const std::vector<float>& got = target->reduce_once(row.count);
      long long wrong = 0;
      for (int64_t i = 0; i < row.count; ++i)
        wrong += got[static_cast<size_t>(i)] != expected[static_cast<size_t>(i % 31)];
      row.wrong = sum_over_ranks(wrong);
    }
    result.rows.push_back(row);
    log::debug("bench allreduce: {} bytes done", bytes);
  }
  return result;
}

}  // namespace cnnscale
