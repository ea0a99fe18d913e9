// The backend's account of the memory it holds (Backend::memory_stats): the CPU backend counts every
// tensor from alloc() until its storage is freed, on whichever thread frees it, and the Trainer
// reports the peak as TrainResult::peak_memory_bytes.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "data/synthetic_dataset.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {
namespace {

TEST(MemoryStats, PeakGrowsWithAnAllocationAndCurrentReturnsAfterRelease) {
  auto backend = make_backend("cpu");
  const MemoryStats before = backend->memory_stats();
  EXPECT_EQ(before.current_bytes, 0);
  EXPECT_EQ(before.peak_bytes, 0);
  {
    Tensor a = backend->alloc(Shape{1000});                 // 4000 bytes of f32
    Tensor b = backend->alloc(Shape{10, 10}, DType::I32);  // 400 bytes
    const MemoryStats held = backend->memory_stats();
    EXPECT_EQ(held.current_bytes, 4400);
    EXPECT_EQ(held.peak_bytes, 4400);
    Tensor view = a;  // another view of the same storage holds no further bytes
    EXPECT_EQ(backend->memory_stats().current_bytes, 4400);
  }
  const MemoryStats after = backend->memory_stats();
  EXPECT_EQ(after.current_bytes, 0) << "every tensor released";
  EXPECT_EQ(after.peak_bytes, 4400) << "the peak stays until reset";

  Tensor small = backend->alloc(Shape{25});  // 100 bytes
  EXPECT_EQ(backend->memory_stats().peak_bytes, 4400) << "below the peak: unchanged";
  backend->reset_peak_memory();
  EXPECT_EQ(backend->memory_stats().peak_bytes, 100) << "reset: the peak restarts at what is held";
  Tensor more = backend->alloc(Shape{50});  // 200 bytes
  EXPECT_EQ(backend->memory_stats().peak_bytes, 300);
  // Pinned/host staging buffers are not device memory of the backend's tensors.
  auto host = backend->alloc_host(1 << 20);
  EXPECT_EQ(backend->memory_stats().current_bytes, 300);
}

TEST(MemoryStats, TensorsFreedOnOtherThreadsAndAfterTheBackendAreCounted) {
  auto backend = make_backend("cpu");
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::vector<Tensor>> batches(kThreads);
  for (auto& batch : batches)
    for (int i = 0; i < kEach; ++i) batch.push_back(backend->alloc(Shape{16}));  // 64 bytes each
  EXPECT_EQ(backend->memory_stats().current_bytes, int64_t{kThreads} * kEach * 64);
  // Each thread drops its own tensors: the counts must come back to zero exactly.
  std::vector<std::thread> threads;
  for (auto& batch : batches) threads.emplace_back([&batch] { batch.clear(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(backend->memory_stats().current_bytes, 0);
  EXPECT_EQ(backend->memory_stats().peak_bytes, int64_t{kThreads} * kEach * 64);

  // A tensor that outlives its backend gives its bytes back to a counter that is still alive.
  Tensor survivor = backend->alloc(Shape{8});
  backend.reset();
  survivor = Tensor();
  SUCCEED();
}

TEST(MemoryStats, TrainerReportsThePeakOfItsRun) {
  auto backend = make_backend("cpu");
  const NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml");
  auto data = std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 16, SyntheticFill::Gaussian, 3);
  TrainOptions o;
  o.batch = 8;
  o.iterations = 2;
  o.display = 1;
  o.timing_warmup = 0;
  TrainResult r;
  {
    Trainer trainer(spec, *backend, data, nullptr, SolverConfig{}, o);
    r = trainer.run({});
  }
  // At least the weights (parameters and their gradients, f32) were held at once during the run.
  EXPECT_GE(r.peak_memory_bytes, 2 * spec.total_params() * 4);
  EXPECT_EQ(r.peak_memory_bytes, backend->memory_stats().peak_bytes);
  EXPECT_EQ(backend->memory_stats().current_bytes, 0) << "the trainer and its net released everything";
}

}  // namespace
}  // namespace cnnscale
