// ProgressBoard over an MPI window (see progress_board.hpp). The puts go through a passive-target
// epoch opened once (lock_all) and are flushed at each arrival, so a count is in every peer's
// memory before this rank can block in the collective it announces. On shared memory (one node)
// the put is a store into the peer's window; across nodes an RDMA write, or applied by the peer's
// MPI progress, which a rank waiting in an MPI collective makes (one stuck outside MPI never does:
// the flush is marked on the watchdog).
#include "parallel/progress_board.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "core/watchdog.hpp"
#include "parallel/mpi_check.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {

struct ProgressBoard::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Win win = MPI_WIN_NULL;
  int64_t* slots = nullptr;  // the window: slots[r] is rank r's latest count
  int rank = 0, size = 1;
  int64_t posted = 0;  // the origin buffer of the puts, valid until their flush
  // Test hook (tests/mpi/test_faults.cpp), not a user option: CNNSCALE_INJECT_BOARD_STALL_AT=R:I
  // makes rank R's first publication at iteration I never return, as the flush does where puts
  // need the target's MPI progress and a peer is stuck outside MPI (CNNSCALE_INJECT_HANG_AT).
  int stall_rank = -1;
  int64_t stall_iteration = -1;
};

namespace {
std::atomic<ProgressBoard::Impl*> g_board{nullptr};

void publish(int64_t arrivals) {
  ProgressBoard::Impl* b = g_board.load(std::memory_order_acquire);
  if (!b) return;
  // Marked: where the window is not true RMA (Open MPI's pt2pt over TCP) the flush waits until each
  // peer's MPI applies the put, which a peer stuck outside MPI never does; the mark lets this
  // rank's watchdog end the job and, since this rank's count is already raised, name that peer.
  // A mark costs a lock and a clock read, little beside the puts.
  BlockingOp mark("progress board");
  if (b->rank == b->stall_rank && watchdog_iteration() == b->stall_iteration) {
    std::fprintf(stderr, "cnnscale: rank %d: CNNSCALE_INJECT_BOARD_STALL_AT: publishing stalls at iteration %lld\n",
                 b->rank, static_cast<long long>(b->stall_iteration));
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  b->posted = arrivals;
  __atomic_store_n(&b->slots[b->rank], arrivals, __ATOMIC_RELAXED);
  for (int r = 0; r < b->size; ++r)
    if (r != b->rank) MPI_CHECK(MPI_Put(&b->posted, 1, MPI_INT64_T, r, b->rank, 1, MPI_INT64_T, b->win));
  MPI_CHECK(MPI_Win_flush_all(b->win));
}
}  // namespace

std::string describe_ranks_behind(const int64_t* counts, int ranks, int self, int64_t mine) {
  std::string out;
  for (int r = 0; r < ranks; ++r) {
    if (r == self || counts[r] >= mine) continue;
    out += fmt::format("{}rank {} did not arrive (collectives it started: {}, this rank: {})", out.empty() ? "" : "; ",
                       r, counts[r], mine);
  }
  return out;
}

ProgressBoard::ProgressBoard() : impl_(std::make_unique<Impl>()) {
  const MpiEnv* mpi = MpiEnv::current();
  if (!mpi || !mpi->initialized() || mpi->size() < 2) return;
  BlockingOp mark("progress board set up");  // collective: a peer missing it must not hang us
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm));
  MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(impl_->comm, &impl_->rank));
  MPI_CHECK(MPI_Comm_size(impl_->comm, &impl_->size));
  void* base = nullptr;
  MPI_CHECK(MPI_Win_allocate(static_cast<MPI_Aint>(impl_->size * sizeof(int64_t)), sizeof(int64_t), MPI_INFO_NULL,
                             impl_->comm, &base, &impl_->win));
  MPI_CHECK(MPI_Win_set_errhandler(impl_->win, MPI_ERRORS_RETURN));
  impl_->slots = static_cast<int64_t*>(base);
  for (int r = 0; r < impl_->size; ++r) impl_->slots[r] = 0;
  // Every rank's slots are zero before any put can reach them.
  MPI_CHECK(MPI_Barrier(impl_->comm));
  MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, impl_->win));
  if (const char* v = std::getenv("CNNSCALE_INJECT_BOARD_STALL_AT"); v && *v) {
    long long r = -1, i = -1;
    if (std::sscanf(v, "%lld:%lld", &r, &i) == 2) {
      impl_->stall_rank = static_cast<int>(r);
      impl_->stall_iteration = i;
    }
  }
  g_board.store(impl_.get(), std::memory_order_release);
  set_arrival_publisher(&publish);
}

ProgressBoard::~ProgressBoard() {
  if (impl_->win == MPI_WIN_NULL) return;
  set_arrival_publisher(nullptr);
  g_board.store(nullptr, std::memory_order_release);
  // Freeing the window is collective: a rank unwinding an error alone would wait for peers that are
  // about to be aborted, so it leaves the window to the end of the job. Unmarked on the watchdog:
  // ranks other than 0 wait here while rank 0 writes the results, as they would in MPI_Finalize.
  if (std::uncaught_exceptions() > 0) return;
  MPI_Win_unlock_all(impl_->win);
  MPI_Win_free(&impl_->win);
  MPI_Comm_free(&impl_->comm);
}

std::string ProgressBoard::behind(int64_t mine) const {
  if (impl_->win == MPI_WIN_NULL) return "";
  std::vector<int64_t> counts(static_cast<size_t>(impl_->size));
  for (int r = 0; r < impl_->size; ++r)
    counts[static_cast<size_t>(r)] = __atomic_load_n(&impl_->slots[r], __ATOMIC_RELAXED);
  return describe_ranks_behind(counts.data(), impl_->size, impl_->rank, mine);
}

}  // namespace cnnscale
