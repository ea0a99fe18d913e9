// The two sides `bench allreduce` (allreduce_bench.cpp) times: one rank's buffer and its allreduces,
// over MPI on the CPU or through the NCCL communicator on a GPU, and the process's MPI helpers both
// use. Internal to parallel/.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.hpp"
#include "core/dtype.hpp"
#include "parallel/device_binding.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale::allreduce_bench {

// Without an MPI launcher MpiEnv describes one process and MPI is never initialised: then every
// collective of the bench is the identity and is skipped.
const MpiEnv& mpi_env();
void barrier();
double seconds_since(std::chrono::steady_clock::time_point t0);

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

// MPI_Allreduce between two steady-clock readings.
std::unique_ptr<BenchTarget> make_cpu_target(int64_t max_count, int rank, DType dtype);
// NCCL allreduces through `comm` (the job's, with its algorithm and tuning) on `backend`'s GPU,
// `device`, issued from the host or replayed as a CUDA graph. Both outlive the target.
std::unique_ptr<BenchTarget> make_gpu_target(Backend& backend, DeviceCommunicator& comm, const RankDevice& device,
                                             int64_t max_count, int rank, double timeout_seconds, DType dtype,
                                             bool graph);

}  // namespace cnnscale::allreduce_bench
