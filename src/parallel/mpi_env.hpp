// MpiEnv: the MPI lifetime of one cnnscale process. MPI is initialised only when an MPI launcher
// started us (mpirun, srun --mpi=pmix, ...), so a plain `cnnscale train` and the tests need no
// mpirun. Knows world rank/size, the node-local rank (ranks sharing memory with us) and the host,
// and offers the few host-side collectives the app needs; <mpi.h> stays out of this header.
#pragma once
#include <string>
#include <vector>

namespace cnnscale {

class MpiEnv {
 public:
  // Initialises MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) if launched_by_mpi(), else
  // describes a single process without touching MPI. One per process (main owns it).
  MpiEnv(int* argc, char*** argv);
  ~MpiEnv();  // MPI_Finalize, when MPI was initialised
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  static MpiEnv* current();  // the process's MpiEnv, or null before main made it
  // True when the environment carries an MPI launcher's rank variables: OMPI_COMM_WORLD_SIZE,
  // PMIX_RANK, PMI_RANK/PMI_SIZE (MPICH, Intel MPI), or SLURM_PROCID with SLURM_NTASKS > 1.
  static bool launched_by_mpi();

  bool initialized() const { return initialized_; }
  bool distributed() const { return size_ > 1; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks of this node
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  // MPI_THREAD_MULTIPLE was granted: another thread (the watchdog) may call MPI_Abort.
  bool thread_multiple() const { return thread_multiple_; }
  std::string library_version() const;  // "Open MPI v4.1.4, ..." or "none"

  // Host-side collectives over all ranks (marked on the watchdog; MPI errors become PeerError).
  std::vector<std::string> allgather(const std::string& value) const;
  std::vector<double> allgather(double value) const;
  void broadcast(std::vector<char>& bytes, int root) const;  // resizes non-root buffers

  // Ends the whole job with `code`: MPI_Abort on MPI_COMM_WORLD when initialised, else _exit.
  [[noreturn]] void abort_job(int code) const;

 private:
  bool initialized_ = false;
  bool thread_multiple_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
};

}  // namespace cnnscale
