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
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "core/bench_timing.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/log.hpp"
#include "core/precision.hpp"
#include "parallel/device_binding.hpp"
#include "parallel/mpi_check.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
namespace {

// Without an MPI launcher MpiEnv describes one process and MPI is never initialised: then every
// collective below is the identity and is skipped.
const MpiEnv& mpi_env() {
  const MpiEnv* env = MpiEnv::current();
  CNNSCALE_CHECK(env != nullptr, "bench allreduce needs the process's MpiEnv (made by main)");
  return *env;
}

void barrier() {
  if (mpi_env().initialized()) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One rank's side of the sweep: its buffer, and allreduces over the first `count` elements of it.
class BenchTarget {
 public:
  virtual ~BenchTarget() = default;
  virtual std::string library() const = 0;
  virtual std::string algo() const = 0;
  virtual std::string device_line() const = 0;
  // Writes allreduce_check_value(rank, i) into the first `count` elements.
  virtual void fill_pattern(int64_t count) = 0;
  // After `warmup` untimed allreduces of `count` elements, `repeats` timings of `iters` back-to-back
  // ones, each begun after a barrier: seconds per repeat.
  virtual std::vector<double> timed_seconds(int64_t count, int warmup, int iters, int repeats) = 0;
  // `iters` back-to-back allreduces of `count` elements, returning when all of them completed.
  virtual void run(int64_t count, int64_t iters) = 0;
  // One allreduce of the freshly filled pattern; the reduced values, read back to the host.
  virtual const std::vector<float>& reduce_once(int64_t count) = 0;
  // The UUID of the GPU this rank bound to, "" on the CPU: what the energy counter is opened by.
  virtual std::string gpu_uuid() const = 0;
};

class CpuTarget final : public BenchTarget {
 public:
  CpuTarget(int64_t max_count, int rank, DType dtype)
      : rank_(rank),
        dtype_(dtype),
        buf_(static_cast<size_t>(max_count) * dtype_size(dtype)),
        host_(static_cast<size_t>(max_count)) {}
  std::string library() const override {
    const std::string v = mpi_env().library_version();  // "Open MPI v4.1.4, package: ..., repo rev: ..."
    return "MPI_Allreduce, " + v.substr(0, v.find(','));
  }
  std::string algo() const override { return "mpi"; }  // Open MPI picks its own per call
  std::string device_line() const override { return mpi_env().host() + " cpu"; }
  void fill_pattern(int64_t count) override {
    for (int64_t i = 0; i < count; ++i) store_float(dtype_, allreduce_check_value(rank_, i), buf_.data(), i);
  }
  std::vector<double> timed_seconds(int64_t count, int warmup, int iters, int repeats) override {
    run(count, warmup);
    std::vector<double> seconds;
    for (int r = 0; r < repeats; ++r) {
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      run(count, iters);
      seconds.push_back(seconds_since(t0));
    }
    return seconds;
  }
  void run(int64_t count, int64_t iters) override {
    for (int64_t i = 0; i < iters; ++i) reduce(count);
  }
  std::string gpu_uuid() const override { return ""; }
  const std::vector<float>& reduce_once(int64_t count) override {
    reduce(count);
    for (int64_t i = 0; i < count; ++i) host_[static_cast<size_t>(i)] = load_float(dtype_, buf_.data(), i);
    return host_;
  }

 private:
  // 16-bit elements are summed by our MPI operation (mpi_check.hpp), as the training exchange does.
  void reduce(int64_t count) {
    if (mpi_env().initialized())
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf_.data(), static_cast<int>(count), mpi_sum_type(dtype_),
                              mpi_sum_op(dtype_), MPI_COMM_WORLD));
  }
  int rank_;
  DType dtype_;
  std::vector<std::byte> buf_;
  std::vector<float> host_;  // the reduced values, widened
};

class GpuTarget final : public BenchTarget {
 public:
  GpuTarget(int64_t max_count, int rank, int ranks, AllreduceAlgo algo, double timeout_seconds, DType dtype,
            const NcclTuning& nccl, bool graph)
      : rank_(rank), dtype_(dtype), graph_(graph), timeout_seconds_(timeout_seconds) {
    if (!cuda_backend_built())
      throw_runtime("bench allreduce --device gpu: this build of cnnscale has no CUDA backend (NCCL)");
    // Bound like `train`: the GPU of the node-local rank, and no two ranks on one physical GPU.
    const MpiEnv& env = mpi_env();
    const int gpu = gpu_for_local_rank(env.local_rank(), env.local_size(), {});
    check_gpu_visible(rank, env.local_rank(), env.host(), gpu, cuda_device_count());
    const RankDevice me{env.host(), fmt::format("gpu:{}", gpu), cnnscale::gpu_uuid(gpu)};
    uuid_ = me.uuid;
    std::vector<RankDevice> all;
    for (const std::string& text : env.allgather(encode_rank_device(me))) all.push_back(decode_rank_device(text));
    check_distinct_devices(all);
    backend_ = make_backend(me.device);
    const std::string desc = backend_->description();
    device_line_ = fmt::format("{} {} {} {}", me.host, me.device, desc.substr(0, desc.find(" (")), me.uuid);
    // NCCL's bootstrap: rank 0's id (it listens on a socket for the others) goes to every rank.
    std::vector<char> id;
    if (rank == 0) id = device_communicator_id();
    env.broadcast(id, 0);
    comm_ = make_device_communicator(*backend_, rank, ranks, id, algo, timeout_seconds, nccl);
    buf_ = backend_->alloc(Shape{max_count}, dtype);
    host_.resize(static_cast<size_t>(max_count));
    staging_.resize(static_cast<size_t>(max_count) * dtype_size(dtype));
    const char* env_algo = std::getenv("NCCL_ALGO");
    library_ = fmt::format("NCCL {}, NCCL_ALGO={}", gpu_library_versions().nccl,
                           env_algo ? env_algo : "(NCCL's choice)");
    // What NCCL was told, not what was asked for: a user's NCCL_ALGO wins over --algo.
    algo_ = env_algo && *env_algo ? env_algo : "auto";
    for (char& c : algo_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  ~GpuTarget() override {
    // The buffer is freed in compute-stream order: make that stream wait for the last collective.
    // After a failure the communicator is aborted (wait() throws): its kernels have exited then.
    try {
      if (comm_) comm_->wait();
    } catch (const PeerError&) {
    }
  }
  std::string library() const override { return library_; }
  std::string algo() const override { return algo_; }
  std::string device_line() const override { return device_line_; }
  void fill_pattern(int64_t count) override {
    for (int64_t i = 0; i < count; ++i) store_float(dtype_, allreduce_check_value(rank_, i), staging_.data(), i);
    comm_->wait();  // the upload (compute stream) must not overwrite a collective still running
    backend_->upload(staging_.data(), view(count));
  }
  // Through the Communicator exactly as training uses it, so each allreduce also pays for its
  // ordering after the compute stream (an event record and a stream wait); issued from the host,
  // each also pays for its enqueue, which a graph replay does not.
  std::vector<double> timed_seconds(int64_t count, int warmup, int iters, int repeats) override {
    const Tensor t = view(count);
    // A graph takes at least one allreduce of its size uncaptured first (also with -w 0): NCCL
    // connects the algorithm and protocol a size uses on its first call, which must not happen
    // inside a capture.
    for (int i = 0; i < (graph_ ? std::max(warmup, 1) : warmup); ++i) comm_->allreduce_sum_async(t);
    comm_->synchronize_host();
    if (graph_) return graph_seconds(t, iters, repeats);
    std::vector<double> seconds;
    for (int r = 0; r < repeats; ++r) {
      barrier();
      comm_->clear_timestamps();
      const int start = comm_->record_timestamp();
      for (int i = 0; i < iters; ++i) comm_->allreduce_sum_async(t);
      const int stop = comm_->record_timestamp();
      const double ms = comm_->elapsed_ms(start, stop);
      comm_->wait();
      seconds.push_back(ms * 1e-3);
    }
    return seconds;
  }
  void run(int64_t count, int64_t iters) override {
    const Tensor t = view(count);
    int64_t left = iters;
    // The energy window issues its allreduces as the timed ones were: whole replays of the size's
    // graph, the remainder (fewer than one replay holds) from the host.
    if (graph_ && work_ && work_count_ == count && work_iters_ > 0) {
      // At most two replays queued: each waits for the one before the last, so a peer that stops
      // ends the window in PeerError after --timeout (a full launch queue would block the host in
      // cudaGraphLaunch instead), and no replay's deadline counts time it spent queued.
      std::shared_ptr<TimingEvent> previous;  // the end point of the replay queued before
      for (; left >= work_iters_; left -= work_iters_) {
        std::shared_ptr<TimingEvent> end = replay().back();
        if (previous) await(previous);
        previous = std::move(end);
      }
      if (previous) await(previous);
    }
    for (int64_t i = 0; i < left; ++i) comm_->allreduce_sum_async(t);
    comm_->synchronize_host();
  }
  std::string gpu_uuid() const override { return uuid_; }
  const std::vector<float>& reduce_once(int64_t count) override {
    const Tensor t = view(count);
    comm_->allreduce_sum_async(t);
    comm_->synchronize_host();
    comm_->wait();
    backend_->download(t, staging_.data());
    for (int64_t i = 0; i < count; ++i) host_[static_cast<size_t>(i)] = load_float(dtype_, staging_.data(), i);
    return host_;
  }

 private:
  Tensor view(int64_t count) const { return buf_.view(0, Shape{count}); }

  // `iters` allreduces of `t` captured into one graph (the compute stream's timing point, the
  // allreduces on the communication stream, the join back, a second point), one untimed replay (a
  // graph's first launch also uploads it), then `repeats` replays, each after a barrier and timed
  // between its two points.
  std::vector<double> graph_seconds(const Tensor& t, int iters, int repeats) {
    comm_->wait();  // the capture begins on a compute stream already past the uncaptured collectives
    work_.reset();
    work_ = backend_->capture([&] {
      backend_->capture_timing_point();
      for (int i = 0; i < iters; ++i) comm_->allreduce_sum_async(t);
      comm_->wait();
      backend_->capture_timing_point();
    });
    work_count_ = t.numel();
    work_iters_ = iters;
    await(replay().back());
    std::vector<double> seconds;
    for (int r = 0; r < repeats; ++r) {
      barrier();
      const std::vector<std::shared_ptr<TimingEvent>> points = replay();
      await(points.back());
      seconds.push_back(backend_->elapsed_ms(*points.front(), *points.back()) * 1e-3);
    }
    return seconds;
  }
  std::vector<std::shared_ptr<TimingEvent>> replay() {
    std::vector<std::shared_ptr<TimingEvent>> points = work_->launch();
    CNNSCALE_CHECK(points.size() == 2, "bench allreduce: a replay recorded {} timing points, not 2", points.size());
    return points;
  }
  // Polls until the compute stream has passed `e`: a peer that never joins a replayed collective
  // ends in PeerError after --timeout, as it does for host-issued ones (the communicator is aborted,
  // which ends its kernels, so the stream drains).
  void await(const std::shared_ptr<TimingEvent>& e) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
    for (int polls = 0; !backend_->timing_event_done(*e); ++polls) {
      if (std::chrono::steady_clock::now() > deadline) {
        comm_->abort();
        throw PeerError(fmt::format("bench allreduce: a replayed allreduce did not finish within {} s (a peer "
                                    "stopped?)",
                                    timeout_seconds_));
      }
      // Yield while a replay is short; past a few thousand polls (milliseconds), sleep between them.
      if (polls < 4096)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  int rank_;
  DType dtype_;
  bool graph_;
  double timeout_seconds_;
  std::vector<std::byte> staging_;  // the buffer's bytes on the host
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DeviceCommunicator> comm_;
  Tensor buf_;  // (max_count); sizes use its prefix
  // The last size's graph (after the communicator and backend it uses, so destroyed before them).
  std::unique_ptr<CapturedWork> work_;
  int64_t work_count_ = 0, work_iters_ = 0;
  std::vector<float> host_;
  std::string device_line_, library_, algo_, uuid_;
};

void validate(const AllreduceBenchConfig& cfg, int ranks) {
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

AllreduceBenchResult run_allreduce_bench(const AllreduceBenchConfig& cfg) {
  validate(cfg, mpi_env().size());
  AllreduceBenchResult result;
  result.ranks = mpi_env().size();
  result.dtype = float_type_name(cfg.dtype);
  const int rank = mpi_env().rank();
  const auto element = static_cast<int64_t>(dtype_size(cfg.dtype));
  const std::vector<int64_t> sizes = allreduce_bench_sizes(cfg.min_bytes, cfg.max_bytes, cfg.step_factor, element);
  const int64_t max_count = sizes.back() / element;

  // One rank's in-place allreduce moves nothing and captures no work: a replayed graph would time an
  // empty interval (and fill the energy window with millions of empty replays), so one rank is
  // host-issued, as nccl-tests times it, and recorded as such.
  const bool graph = cfg.gpu && cfg.graph && result.ranks > 1;
  std::unique_ptr<BenchTarget> target;
  if (cfg.gpu) {
    target = std::make_unique<GpuTarget>(max_count, rank, result.ranks, cfg.algo, cfg.timeout_seconds, cfg.dtype,
                                         cfg.nccl, graph);
  } else {
    target = std::make_unique<CpuTarget>(max_count, rank, cfg.dtype);
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
