// MpiCommunicator implementation. Open MPI progresses non-blocking collectives only inside MPI
// calls (no progress thread for shared memory/TCP), so each allreduce_sum_async also tests the
// requests already in flight: earlier buckets advance while backward computes the next ones.
#include "parallel/mpi_communicator.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "parallel/mpi_check.hpp"
#include "core/watchdog.hpp"

namespace cnnscale {

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<MPI_Request> requests;
  std::atomic<bool> aborted{false};  // set by the watchdog thread

  void progress() {
    if (requests.empty()) return;
    int done = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    if (done) requests.clear();
  }
};

MpiCommunicator::MpiCommunicator() : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  CNNSCALE_CHECK(initialized, "MpiCommunicator without MPI (not launched by mpirun/srun?)");
  BlockingOp op("MPI_Comm_dup");
  // A private communicator: our collectives can never match another library's on COMM_WORLD.
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm));
  MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(impl_->comm, &impl_->rank));
  MPI_CHECK(MPI_Comm_size(impl_->comm, &impl_->size));
}

MpiCommunicator::~MpiCommunicator() {
  // Outstanding requests after an error cannot be completed; freeing the communicator would
  // block, so it is left to MPI_Finalize/MPI_Abort.
  if (impl_->requests.empty() && !impl_->aborted && impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

int MpiCommunicator::rank() const {
  return impl_->rank;
}
int MpiCommunicator::size() const {
  return impl_->size;
}

void MpiCommunicator::allreduce_sum_async(const Tensor& t) {
  if (impl_->aborted) throw PeerError("MPI communicator was aborted: no further allreduce");
  if (!t.device().is_cpu() || t.dtype() != DType::F32)
    throw_runtime("mpi allreduce_sum_async: needs a CPU f32 tensor, got {} on {}", dtype_name(t.dtype()),
                  t.device().to_string());
  float* data = t.f32();
  // MPI counts are int: reduce larger tensors in pieces (each an independent in-place sum).
  for (int64_t done = 0; done < t.numel();) {
    const int count = static_cast<int>(std::min<int64_t>(t.numel() - done, INT_MAX));
    MPI_Request request;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + done, count, MPI_FLOAT, MPI_SUM, impl_->comm, &request));
    impl_->requests.push_back(request);
    done += count;
  }
  impl_->progress();
}

void MpiCommunicator::wait() {
  if (impl_->requests.empty()) return;
  BlockingOp op("allreduce wait");
  // Poll instead of MPI_Waitall: a spinning MPI_Waitall on oversubscribed cores (CI, several CPU
  // ranks per core) starves the ranks that still compute; yielding, then napping, does not, and
  // costs a few microseconds of latency once the data is there.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  while (!impl_->requests.empty()) {
    impl_->progress();
    if (impl_->requests.empty()) break;
    if (Clock::now() - start < std::chrono::milliseconds(2))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void MpiCommunicator::abort() {
  impl_->aborted = true;
}

}  // namespace cnnscale
