// StopVote over MPI (see stop_vote.hpp). A communicator of its own keeps the votes apart from the
// gradient collectives and the host-side metric exchanges.
#include "parallel/stop_vote.hpp"

#include "parallel/mpi_check.hpp"
#include "parallel/mpi_env.hpp"
#include "core/watchdog.hpp"

namespace cnnscale {

struct StopVote::Impl {
  bool distributed = false;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  int send = 0, recv = 0;
};

StopVote::StopVote() : impl_(std::make_unique<Impl>()) {
  const MpiEnv* mpi = MpiEnv::current();
  impl_->distributed = mpi && mpi->initialized() && mpi->size() > 1;
  if (!impl_->distributed) return;
  // Collective: a peer that died or hung before reaching it leaves the others here, so the
  // watchdog must know (without the mark they would wait forever).
  BlockingOp mark("stop vote set up");
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm));
  MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
}

StopVote::~StopVote() {
  if (!impl_->distributed) return;
  // Normally finished; on an error path the peers are being aborted anyway: free what is ours.
  if (impl_->request != MPI_REQUEST_NULL) MPI_Request_free(&impl_->request);
  MPI_Comm_free(&impl_->comm);
}

bool StopVote::exchange(bool stop_here) {
  if (!impl_->distributed) return stop_here;
  bool agreed = false;
  if (impl_->request != MPI_REQUEST_NULL) {
    BlockingOp mark("stop vote");
    MPI_CHECK(MPI_Wait(&impl_->request, MPI_STATUS_IGNORE));
    agreed = impl_->recv != 0;
  }
  impl_->send = stop_here ? 1 : 0;
  note_collective_arrival();  // what the peers' watchdogs compare (progress_board.hpp)
  MPI_CHECK(MPI_Iallreduce(&impl_->send, &impl_->recv, 1, MPI_INT, MPI_MAX, impl_->comm, &impl_->request));
  return agreed;
}

void StopVote::finish() {
  if (!impl_->distributed || impl_->request == MPI_REQUEST_NULL) return;
  BlockingOp mark("stop vote");
  MPI_CHECK(MPI_Wait(&impl_->request, MPI_STATUS_IGNORE));
}

}  // namespace cnnscale
