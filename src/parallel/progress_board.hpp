// ProgressBoard: every rank's count of collectives started (core/watchdog.hpp's
// note_collective_arrival), published where the other ranks can read it without that rank's help:
// each rank writes its count into a slot of every peer's MPI window (one-sided puts, made while it
// is alive and well), so a rank whose watchdog expires reads its own memory and names the ranks
// whose count is behind its own, i.e. those that never arrived at the collective it waits in.
// <mpi.h> stays out of this header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace cnnscale {

class ProgressBoard {
 public:
  // Collective over all ranks of MpiEnv::current() (a window on a duplicate of MPI_COMM_WORLD);
  // installs itself as the process's arrival publisher. Nothing is made without a distributed MPI job.
  ProgressBoard();
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // "rank 1 did not arrive (its collectives started: 312, this rank's: 313)" naming every rank
  // behind `mine`, "" when none is (the hang is then inside a collective every rank entered). Any
  // thread; reads local memory only.
  std::string behind(int64_t mine) const;

  struct Impl;  // opaque (progress_board.cpp); public for the arrival publisher there

 private:
  std::unique_ptr<Impl> impl_;
};

// The report for counts already read: `counts[r]` is rank r's, `self` this rank. Exposed for tests.
std::string describe_ranks_behind(const int64_t* counts, int ranks, int self, int64_t mine);

}  // namespace cnnscale
