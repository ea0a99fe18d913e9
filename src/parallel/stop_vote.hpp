// StopVote: the ranks of a job agree to stop at one step boundary, without a host stall inside the
// step. Each boundary starts a non-blocking MPI max-reduction of this rank's "stop requested" and
// completes the one started at the previous boundary, so every rank learns the same answer at the
// same boundary, one step after the first rank saw its signal. <mpi.h> stays out of this header.
#pragma once
#include <memory>

namespace cnnscale {

class StopVote {
 public:
  // Collective over all ranks of MpiEnv::current() (duplicates MPI_COMM_WORLD); in a process that
  // was not started by an MPI launcher the vote is this process's own flag.
  StopVote();
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // Call at every step boundary on every rank. Returns true when some rank asked at the previous
  // boundary (or, alone, when this process asks now).
  bool exchange(bool stop_here);
  // Completes the outstanding vote; every rank calls it once after its last exchange().
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnnscale
