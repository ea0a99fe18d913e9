// The NCCL communicator across ranks (label multigpu): run as `mpirun -np 2 test_multigpu`, one
// rank per GPU. Sums of rank-dependent patterns (sizes and offsets like gradient buckets), stream
// ordering, wait() without a host block, the deadline/abort path, busy timing. Exits 77 (CTest:
// skipped) when not under MPI or when a node has fewer usable GPUs than ranks.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_entry.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale::testing {
namespace {

std::unique_ptr<Backend> g_backend;  // this rank's GPU, made in main

const MpiEnv& env() {
  return *MpiEnv::current();
}
Backend& backend() {
  return *g_backend;
}
cudaStream_t compute_stream() {
  return dynamic_cast<CudaBackend&>(*g_backend).stream();
}
void barrier() {
  env().allgather(0.0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A fresh communicator for each test (rank 0's id over MPI), as the trainer makes one per run.
std::unique_ptr<DeviceCommunicator> make_comm(AllreduceAlgo algo = AllreduceAlgo::Ring, double timeout_s = 120) {
  std::vector<char> id;
  if (env().rank() == 0) id = nccl_unique_id();
  env().broadcast(id, 0);
  return make_nccl_communicator(backend(), env().rank(), env().size(), id, algo, timeout_s);
}

// (rank + 1) * small integer: sums over ranks are exact in float, and each rank's share differs.
float pattern(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * (i % 97 + 1));
}
float pattern_sum(int ranks, int64_t i) {
  return static_cast<float>(ranks * (ranks + 1) / 2 * (i % 97 + 1));
}

std::vector<float> download(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend().download(t, out.data());  // waits for the compute stream, which wait() ordered after the comm
  return out;
}

class NcclAllreduce : public ::testing::TestWithParam<AllreduceAlgo> {};

TEST_P(NcclAllreduce, SumsRankPatternsOfManySizesAndOffsets) {
  auto comm = make_comm(GetParam());
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_EQ(comm->rank(), env().rank());
  EXPECT_EQ(comm->size(), env().size());
  // Odd counts, a count just past 1 Mi and one past a 25 MB bucket; views start at odd offsets
  // like buckets inside the flat gradient buffer.
  const std::vector<int64_t> counts = {1, 7, 1000, (int64_t{1} << 20) + 3, (int64_t{25} << 20) / 4 + 5};
  for (int64_t offset : {int64_t{0}, int64_t{3}}) {
    for (int64_t count : counts) {
      Tensor flat = backend().alloc(Shape{offset + count});
      Tensor t = flat.view(offset, Shape{count});
      std::vector<float> host(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) host[static_cast<size_t>(i)] = pattern(env().rank(), i);
      backend().upload(host.data(), t);
      comm->allreduce_sum_async(t);
      comm->wait();
      const std::vector<float> got = download(t);
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < count; ++i)
        if (got[static_cast<size_t>(i)] != pattern_sum(env().size(), i) && wrong++ == 0) first = i;
      EXPECT_EQ(wrong, 0) << count << " floats at offset " << offset << ": first wrong element " << first << " = "
                          << (first >= 0 ? got[static_cast<size_t>(first)] : 0.0f) << ", expected "
                          << (first >= 0 ? pattern_sum(env().size(), first) : 0.0f);
    }
  }
  comm->synchronize_host();
}

INSTANTIATE_TEST_SUITE_P(Algorithms, NcclAllreduce,
                         ::testing::Values(AllreduceAlgo::Ring, AllreduceAlgo::Tree, AllreduceAlgo::Auto),
                         [](const auto& info) {
                           return info.param == AllreduceAlgo::Ring   ? "Ring"
                                  : info.param == AllreduceAlgo::Tree ? "Tree"
                                                                      : "Auto";
                         });

// The contract: the collective sees what the compute stream queued before it, and work queued on
// the compute stream after wait() sees the sum. Nothing in between syncs the host.
TEST(NcclCommunicator, OrderedAfterQueuedComputeAndBeforeLaterCompute) {
  auto comm = make_comm();
  const int64_t n = int64_t{1} << 24;
  Tensor t = backend().alloc(Shape{n});
  Tensor after = backend().alloc(Shape{n});
  backend().fill(t, static_cast<float>(env().rank() + 1));
  comm->allreduce_sum_async(t);
  comm->wait();
  backend().copy(t, after);
  const std::vector<float> got = download(after);
  const float want = static_cast<float>(env().size() * (env().size() + 1) / 2);
  int64_t wrong = 0;
  for (float v : got) wrong += v != want;
  EXPECT_EQ(wrong, 0) << "of " << n << " elements (expected every one = " << want << ")";
}

// Rank 1 joins 1.5 s late: rank 0's allreduce_sum_async + wait() must return at once with the
// compute stream (not the host) waiting; synchronize_host() then blocks until the sum is done.
TEST(NcclCommunicator, WaitBlocksTheComputeStreamNotTheHost) {
  auto comm = make_comm();
  Tensor t = backend().alloc(Shape{int64_t{1} << 20});
  backend().fill(t, 1.0f);
  comm->allreduce_sum(t);  // connections are made lazily by the first collective: not timed
  comm->synchronize_host();
  backend().fill(t, static_cast<float>(env().rank() + 1));
  backend().synchronize();
  barrier();
  if (env().rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto t0 = std::chrono::steady_clock::now();
  comm->allreduce_sum_async(t);
  comm->wait();
  const double returned_after = seconds_since(t0);
  const cudaError_t compute_state = cudaStreamQuery(compute_stream());
  comm->synchronize_host();
  const double synced_after = seconds_since(t0);
  if (env().rank() == 0) {
    EXPECT_LT(returned_after, 0.5) << "allreduce_sum_async + wait blocked the host";
    EXPECT_EQ(compute_state, cudaErrorNotReady) << "the compute stream did not wait for the collective";
    EXPECT_GT(synced_after, 1.0) << "synchronize_host returned before the late peer joined";
  }
  const std::vector<float> got = download(t);
  EXPECT_EQ(got.front(), static_cast<float>(env().size() * (env().size() + 1) / 2));
  EXPECT_EQ(got.back(), got.front());
}

// Rank 1 never joins rank 0's collective: rank 0 gets PeerError at the deadline (not a hang),
// naming the operation and itself, and the aborted communicator refuses further work.
TEST(NcclCommunicator, MissingPeerEndsInPeerErrorAtTheDeadline) {
  const double timeout_s = 2.0;
  auto comm = make_comm(AllreduceAlgo::Ring, timeout_s);
  Tensor t = backend().alloc(Shape{int64_t{1} << 16});
  backend().fill(t, 1.0f);
  comm->allreduce_sum(t);
  comm->synchronize_host();
  barrier();
  if (env().rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string message;
    try {
      comm->allreduce_sum_async(t);
      comm->synchronize_host();
    } catch (const PeerError& e) {
      message = e.what();
    }
    const double elapsed = seconds_since(t0);
    // EXPECT, not ASSERT, in rank-dependent branches: every rank must reach the barrier below.
    EXPECT_FALSE(message.empty()) << "no PeerError after " << elapsed << " s";
    EXPECT_GE(elapsed, timeout_s * 0.9);
    EXPECT_LT(elapsed, timeout_s + 10.0) << "abort took too long";
    for (const char* part : {"allreduce", "rank 0 of", "aborted", "2 s"})
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
    EXPECT_THROW(comm->allreduce_sum_async(t), PeerError);
    EXPECT_THROW(comm->synchronize_host(), PeerError);
  }
  barrier();
  if (env().rank() != 0) comm->abort();  // its peer is gone: nothing of this communicator is usable
}

// Only rank 0 creates a communicator: initialisation must give up at the deadline, not hang.
TEST(NcclCommunicator, InitialisationWithoutPeersEndsInPeerError) {
  if (env().rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string message;
    try {
      make_nccl_communicator(backend(), 0, env().size(), nccl_unique_id(), AllreduceAlgo::Ring, 2.0);
    } catch (const PeerError& e) {
      message = e.what();
    }
    const double elapsed = seconds_since(t0);
    EXPECT_FALSE(message.empty()) << "no PeerError after " << elapsed << " s";
    EXPECT_NE(message.find("initialisation"), std::string::npos) << message;
    EXPECT_LT(elapsed, 12.0);
  }
  barrier();
}

TEST(NcclCommunicator, BusyTimingAndTimestampsMeasureTheCommunicationStream) {
  auto comm = make_comm();
  Tensor t = backend().alloc(Shape{int64_t{1} << 24});  // 64 MiB
  backend().fill(t, 1.0f);
  comm->allreduce_sum(t);
  comm->synchronize_host();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    comm->set_busy_tag(i < 2 ? 7 : 8);  // two collectives of "iteration" 7, one of 8
    comm->allreduce_sum_async(t);
  }
  comm->set_busy_tag(-1);
  comm->allreduce_sum_async(t);  // not bracketed
  comm->synchronize_host();
  const double host_ms = seconds_since(t0) * 1e3;
  const auto busy = comm->take_busy_ms();
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_EQ(busy[0].first, 7);
  EXPECT_EQ(busy[1].first, 8);
  EXPECT_GT(busy[1].second, 0.0);
  // Same size, same stream: two collectives take about twice as long as one.
  EXPECT_GT(busy[0].second, 1.3 * busy[1].second);
  EXPECT_LT(busy[0].second + busy[1].second, host_ms + 0.5);
  EXPECT_TRUE(comm->take_busy_ms().empty()) << "brackets are consumed by take_busy_ms";
  const int a = comm->record_timestamp();
  comm->allreduce_sum_async(t);
  const int b = comm->record_timestamp();
  const double ms = comm->elapsed_ms(a, b);
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, host_ms + 1000.0);
  comm->clear_timestamps();
  comm->wait();
}

TEST(NcclCommunicator, RefusesHostAndNonFloatTensors) {
  auto comm = make_comm();
  EXPECT_THROW(comm->allreduce_sum_async(host_tensor(Shape{4})), RuntimeError);
  EXPECT_THROW(comm->allreduce_sum_async(backend().alloc(Shape{4}, DType::I32)), RuntimeError);
  comm->synchronize_host();  // the refusals issued nothing, so the communicator is still whole
}

}  // namespace
}  // namespace cnnscale::testing

int main(int argc, char** argv) {
  using cnnscale::MpiEnv;
  MpiEnv mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Every rank takes the same decision, or the job would hang in the first collective.
  const int gpus = cnnscale::cuda_device_count();
  const std::vector<double> usable = mpi.allgather(mpi.local_rank() < gpus ? 1.0 : 0.0);
  bool all_usable = mpi.size() >= 2;
  for (double u : usable) all_usable = all_usable && u > 0;
  if (!all_usable) {
    if (mpi.rank() == 0)
      std::printf("SKIPPED: needs >= 2 MPI ranks with one usable GPU each (%d rank(s), %d GPU(s) on rank 0's node)\n",
                  mpi.size(), gpus);
    return 77;
  }
  cnnscale::testing::g_backend = cnnscale::make_backend("gpu:" + std::to_string(mpi.local_rank()));
  const int rc = RUN_ALL_TESTS();
  cnnscale::testing::g_backend.reset();
  // The job fails when any rank's tests failed.
  bool all_passed = true;
  for (double r : mpi.allgather(static_cast<double>(rc))) all_passed = all_passed && r == 0;
  return all_passed ? 0 : 1;
}
