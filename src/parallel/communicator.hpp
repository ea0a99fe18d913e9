// Communicator: how ranks of one data-parallel job exchange gradients. Two implementations:
// MPI (CPU tensors; src/parallel/mpi_communicator.*) and NCCL (device tensors, bootstrapped over MPI;
// src/backend/cuda/nccl_communicator.*, built only with CUDA). No CUDA header here.
//
// Ordering contract, the same for both: an *_async call acts on the tensor as it will be after all
// work already queued on the backend's compute stream (on CPU: immediately); wait() makes the
// compute stream (not the host) wait for every outstanding operation, so the solver update queued
// after it sees reduced gradients. The host blocks only in synchronize_host().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace cnnscale {

enum class AllreduceAlgo { Ring, Tree, Auto };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum across ranks of `t` (f32), in stream order after the queued compute work.
  virtual void allreduce_sum_async(const Tensor& t) = 0;
  // Compute stream waits for every outstanding async operation (no host block on GPU).
  virtual void wait() = 0;
  // Host blocks until every outstanding operation is complete; throws PeerError-kind errors when
  // a collective failed (NCCL async error) and honours the watchdog.
  virtual void synchronize_host() = 0;
  // Blocking in-place sum (used outside the step: metrics, sync batch norm statistics, tests).
  virtual void allreduce_sum(const Tensor& t) {
    allreduce_sum_async(t);
    wait();
  }
  // Abort outstanding collectives so that no rank is left hanging (fault path).
  virtual void abort() = 0;
};

}  // namespace cnnscale
