// MpiCommunicator implementation. Open MPI progresses non-blocking collectives only inside MPI
// calls (no progress thread for shared memory/TCP), so each allreduce_sum_async also tests the
// requests already in flight: earlier buckets advance while backward computes the next ones.
#include "parallel/mpi_communicator.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/watchdog.hpp"
#include "parallel/mpi_check.hpp"

namespace cnnscale {

namespace {
// MPI_User_function bodies: inout[i] = round(in[i] + inout[i]) in the 16-bit format.
template <DType kType>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  for (int i = 0; i < *len; ++i) store_float(kType, load_float(kType, in, i) + load_float(kType, inout, i), inout, i);
}

MPI_Op created_op(MPI_User_function* fn) {
  MPI_Op op = MPI_OP_NULL;
  MPI_CHECK(MPI_Op_create(fn, /*commute=*/1, &op));
  return op;  // kept for the process's life (one per dtype): never freed, as MPI_SUM is not
}
}  // namespace

MPI_Datatype mpi_sum_type(DType dtype) {
  if (dtype == DType::F32) return MPI_FLOAT;
  if (dtype == DType::BF16 || dtype == DType::F16) return MPI_UINT16_T;
  throw_runtime("MPI sum over {}: only f32, bf16 and f16 are summed", dtype_name(dtype));
}

MPI_Op mpi_sum_op(DType dtype) {
  if (dtype == DType::F32) return MPI_SUM;
  // Created on first use (after MPI_Init, which every caller of a communicator has seen); C++
  // makes the one-time initialisation thread-safe.
  if (dtype == DType::BF16) {
    static const MPI_Op op = created_op(&sum_16bit<DType::BF16>);
    return op;
  }
  if (dtype == DType::F16) {
    static const MPI_Op op = created_op(&sum_16bit<DType::F16>);
    return op;
  }
  throw_runtime("MPI sum over {}: only f32, bf16 and f16 are summed", dtype_name(dtype));
}

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<MPI_Request> requests;
  std::vector<std::function<void()>> after;  // after_collectives() work, run by the next wait()
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
  if (!t.device().is_cpu())
    throw_runtime("mpi allreduce_sum_async: needs a CPU tensor, got one on {}", t.device().to_string());
  const MPI_Datatype type = mpi_sum_type(t.dtype());
  const MPI_Op sum = mpi_sum_op(t.dtype());
  note_collective_arrival();  // what the peers' watchdogs compare (progress_board.hpp)
  auto* data = static_cast<std::byte*>(t.raw());
  const auto element = static_cast<int64_t>(dtype_size(t.dtype()));
  // MPI counts are int: reduce larger tensors in pieces (each an independent in-place sum).
  for (int64_t done = 0; done < t.numel();) {
    const int count = static_cast<int>(std::min<int64_t>(t.numel() - done, INT_MAX));
    MPI_Request request;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + done * element, count, type, sum, impl_->comm, &request));
    impl_->requests.push_back(request);
    done += count;
  }
  impl_->progress();
}

void MpiCommunicator::allgather_async(const Tensor& mine, const Tensor& all) {
  if (impl_->aborted) throw PeerError("MPI communicator was aborted: no further allgather");
  if (!mine.device().is_cpu() || !all.device().is_cpu())
    throw_runtime("mpi allgather_async: needs CPU tensors, got them on {} and {}", mine.device().to_string(),
                  all.device().to_string());
  if (all.dtype() != mine.dtype() || all.numel() != mine.numel() * impl_->size)
    throw_runtime("mpi allgather_async: {} {} values gathered into {} {}, not {} ranks' worth", mine.numel(),
                  dtype_name(mine.dtype()), all.numel(), dtype_name(all.dtype()), impl_->size);
  if (mine.bytes() == 0) return;
  note_collective_arrival();
  if (mine.bytes() > static_cast<size_t>(INT_MAX))
    throw_runtime("mpi allgather_async: {} bytes per rank is more than one MPI count holds", mine.bytes());
  MPI_Request request;
  MPI_CHECK(MPI_Iallgather(mine.raw(), static_cast<int>(mine.bytes()), MPI_BYTE, all.raw(),
                           static_cast<int>(mine.bytes()), MPI_BYTE, impl_->comm, &request));
  impl_->requests.push_back(request);
  impl_->progress();
}

void MpiCommunicator::after_collectives(const std::function<void()>& work) {
  if (impl_->aborted) throw PeerError("MPI communicator was aborted: no further work after its collectives");
  if (impl_->requests.empty() && impl_->after.empty()) return work();
  impl_->after.push_back(work);
}

void MpiCommunicator::wait() {
  complete_requests();
  // Taken first: work that itself waits (it must not, but a blocking sum inside it would) finds
  // the queue empty instead of running itself again.
  std::vector<std::function<void()>> after = std::exchange(impl_->after, {});
  for (const auto& work : after) work();
}

void MpiCommunicator::complete_requests() {
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
