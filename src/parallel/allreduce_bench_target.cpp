// `bench allreduce`'s two targets (allreduce_bench_target.hpp): the CPU's MPI_Allreduce and the GPU's
// NCCL allreduces, host-issued or captured into a CUDA graph and replayed.
#include "parallel/allreduce_bench_target.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <thread>
#include <utility>

#include "backend/backend.hpp"
#include "backend/devices.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "parallel/allreduce_bench.hpp"
#include "parallel/device_binding.hpp"
#include "parallel/mpi_check.hpp"

namespace cnnscale::allreduce_bench {

const MpiEnv& mpi_env() {
  const MpiEnv* env = MpiEnv::current();
  CNNSCALE_CHECK(env != nullptr, "bench allreduce needs the process's MpiEnv (made by main)");
  return *env;
}

void barrier() {
  if (mpi_env().initialized()) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

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
  GpuTarget(Backend& backend, DeviceCommunicator& comm, const RankDevice& device, int64_t max_count, int rank,
            double timeout_seconds, DType dtype, bool graph)
      : rank_(rank), dtype_(dtype), graph_(graph), timeout_seconds_(timeout_seconds), backend_(&backend),
        comm_(&comm), uuid_(device.uuid) {
    const std::string desc = backend_->description();
    device_line_ = fmt::format("{} {} {} {}", device.host, device.device, desc.substr(0, desc.find(" (")), device.uuid);
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
      comm_->wait();
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
  Backend* backend_;     // the job's
  DeviceCommunicator* comm_;  // the job's
  Tensor buf_;  // (max_count); sizes use its prefix
  // The last size's graph (after the communicator and backend it uses, so destroyed before them).
  std::unique_ptr<CapturedWork> work_;
  int64_t work_count_ = 0, work_iters_ = 0;
  std::vector<float> host_;
  std::string uuid_, device_line_, library_, algo_;
};

}  // namespace

std::unique_ptr<BenchTarget> make_cpu_target(int64_t max_count, int rank, DType dtype) {
  return std::make_unique<CpuTarget>(max_count, rank, dtype);
}

std::unique_ptr<BenchTarget> make_gpu_target(Backend& backend, DeviceCommunicator& comm, const RankDevice& device,
                                             int64_t max_count, int rank, double timeout_seconds, DType dtype,
                                             bool graph) {
  return std::make_unique<GpuTarget>(backend, comm, device, max_count, rank, timeout_seconds, dtype, graph);
}

}  // namespace cnnscale::allreduce_bench
