// MpiCommunicator: the Communicator of CPU ranks. Gradients are summed in place with
// MPI_Iallreduce on a private duplicate of MPI_COMM_WORLD (errors returned, not fatal); wait()
// polls the requests with MPI_Testall under a watchdog mark, so a dead or hung peer ends the job
// (watchdog) and an MPI error becomes a PeerError naming the operation.
#pragma once
#include <memory>

#include "backend/communicator.hpp"

namespace cnnscale {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD (MpiEnv must have initialised MPI).
  MpiCommunicator();
  ~MpiCommunicator() override;

  std::string name() const override { return "mpi"; }
  int rank() const override;
  int size() const override;
  // `t` must be a host (CPU backend) f32 tensor; it must not be touched until wait() returns.
  void allreduce_sum_async(const Tensor& t) override;
  // MPI_Iallgather of the bytes; `mine` and `all` must not be touched until wait() returns.
  void allgather_async(const Tensor& mine, const Tensor& all) override;
  // On CPU the "compute stream" is the host: both block until every request has completed, then
  // run the work after_collectives() queued, in the order it was queued.
  void wait() override;
  // Queued until wait(): the requests then complete together, as they would without it, so the
  // bucketed exchange keeps its overlap with backward (MPI progresses in MPI calls only).
  void after_collectives(const std::function<void()>& work) override;
  // The requests only; the queued work waits for the next wait().
  void wait_collectives() override { complete_requests(); }
  void synchronize_host() override { wait(); }
  // MPI cannot cancel a started collective: the caller ends the job (MPI_Abort), which frees every
  // rank. This only stops further collectives from being started.
  void abort() override;

 private:
  void complete_requests();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnnscale
