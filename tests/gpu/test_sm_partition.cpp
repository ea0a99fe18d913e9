// A CUDA backend confined to part of its GPU's SMs (a green context, --sm-counts): the count granted
// against the driver's partition rules, kernels on its stream landing on no more SMs than granted
// (while the whole GPU's stream uses more, so the check can fail), its stream and its cuBLAS and
// cuDNN handles' streams in the green context, a GEMM and a convolution on it matching the CPU, and
// its context outliving the backend for tensors still alive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device_context.hpp"
#include "sm_probe.hpp"
#endif

namespace cnnscale::testing {
namespace {

#if CNNSCALE_HAVE_CUDA

// The partition every test uses: 16 SMs, or the device's smallest partition if that is larger.
struct Plan {
  cuda::SmPartitionRules rules;
  int request = 0;
  int step = 1;  // the documented granularity: partitions grow in steps of the co-scheduled alignment
  std::string skip;
};

Plan plan() {
  Plan p;
  if (cuda_device_count() == 0) {
    p.skip = "no usable GPU";
    return p;
  }
  try {
    p.rules = cuda::sm_partition_rules(0);
  } catch (const RuntimeError& e) {
    p.skip = e.what();  // a driver without green contexts
    return p;
  }
  p.request = std::max(16, p.rules.min_sms);
  p.step = std::max({1, p.rules.alignment, p.rules.min_sms});
  if (p.rules.device_sms <= p.request + p.step) p.skip = "GPU too small for a partition of 16 SMs and a remainder";
  return p;
}

CudaBackendOptions with_sms(int sm_count) {
  CudaBackendOptions o;
  o.sm_count = sm_count;
  return o;
}

// The green context a stream belongs to (cuStreamGetGreenCtx; nullptr for an ordinary stream),
// reached through the runtime's entry points as the backend does.
CUgreenCtx green_context_of(cudaStream_t stream) {
  static const PFN_cuStreamGetGreenCtx_v12040 get = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    cudaGetDriverEntryPointByVersion("cuStreamGetGreenCtx", &p, 12040, cudaEnableDefault, &found);
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuStreamGetGreenCtx_v12040>(p) : nullptr;
  }();
  if (!get) {
    ADD_FAILURE() << "cuStreamGetGreenCtx is not available from the driver";
    return nullptr;
  }
  CUgreenCtx green = nullptr;
  EXPECT_EQ(get(stream, &green), CUDA_SUCCESS);
  return green;
}

TEST(SmPartition, GrantedCountIsTheRequestRoundedUpByAtMostOneStep) {
  const Plan p = plan();
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  CudaBackend part(0, with_sms(p.request));
  EXPECT_GE(part.granted_sms(), p.request);
  EXPECT_LT(part.granted_sms(), p.request + p.step);
  EXPECT_LE(part.granted_sms(), p.rules.device_sms);
  EXPECT_NE(part.description().find(std::to_string(part.granted_sms()) + " of"), std::string::npos)
      << part.description();

  // A count between two steps is rounded up to the next one.
  if (p.rules.alignment > 1) {
    const int odd = (p.request + p.rules.alignment - 1) / p.rules.alignment * p.rules.alignment + 1;
    if (odd + p.step <= p.rules.device_sms) {
      auto rounded = make_backend("gpu:0", odd);  // the factory's route, as `train --sm-counts` takes it
      EXPECT_GT(rounded->granted_sms(), odd) << "a request of " << odd << " SMs was not rounded up";
      EXPECT_LT(rounded->granted_sms(), odd + p.step);
    }
  }
  std::printf("[sm-partition] gpu:0 has %d SMs, partitions of >= %d in groups of %d; %d requested, %d granted\n",
              p.rules.device_sms, p.rules.min_sms, p.rules.alignment, p.request, part.granted_sms());
}

TEST(SmPartition, CountsTheGpuCannotGiveAreConfigErrors) {
  const Plan p = plan();
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  EXPECT_THROW(make_backend("gpu:0", p.rules.device_sms + 1), ConfigError);
  if (p.rules.min_sms > 1) {
    EXPECT_THROW(make_backend("gpu:0", p.rules.min_sms - 1), ConfigError);
  }
  auto whole = make_backend("gpu:0", p.rules.device_sms);  // every SM: the whole GPU, no partition
  EXPECT_EQ(whole->granted_sms(), 0);
  EXPECT_EQ(gpu_backend().granted_sms(), 0);
}

TEST(SmPartition, KernelsOnItsStreamRunOnNoMoreSmsThanGranted) {
  const Plan p = plan();
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  CudaBackend part(0, with_sms(p.request));
  const int blocks = 32 * p.rules.device_sms;  // far more blocks than SMs, each resident for a while

  part.context()->make_current();
  SmProbeResult in_partition = probe_sm_ids(part.stream(), blocks);
  ASSERT_EQ(in_partition.error, cudaSuccess) << cudaGetErrorString(in_partition.error);
  EXPECT_LE(static_cast<int>(in_partition.sm_ids.size()), part.granted_sms());
  EXPECT_GE(in_partition.sm_ids.size(), 1u);

  // The same probe on the whole GPU spreads wider, so the check above could fail.
  auto& whole = dynamic_cast<CudaBackend&>(gpu_backend());
  whole.context()->make_current();
  SmProbeResult everywhere = probe_sm_ids(whole.stream(), blocks);
  ASSERT_EQ(everywhere.error, cudaSuccess) << cudaGetErrorString(everywhere.error);
  EXPECT_GT(static_cast<int>(everywhere.sm_ids.size()), part.granted_sms());
  std::printf("[sm-partition] probe: %zu SMs used in a partition of %d, %zu on the whole GPU\n",
              in_partition.sm_ids.size(), part.granted_sms(), everywhere.sm_ids.size());
}

TEST(SmPartition, StreamsOfTheBackendAndItsLibraryHandlesBelongToTheGreenContext) {
  const Plan p = plan();
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  CudaBackend part(0, with_sms(p.request));
  const CUgreenCtx green = part.context()->green_context();
  ASSERT_NE(green, nullptr);
  EXPECT_EQ(green_context_of(part.stream()), green);

  cudaStream_t blas_stream = nullptr;
  cudaStream_t dnn_stream = nullptr;
  ASSERT_EQ(cublasGetStream(part.cublas_handle(), &blas_stream), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudnnGetStream(part.cudnn_handle(), &dnn_stream), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(blas_stream, part.stream());
  EXPECT_EQ(dnn_stream, part.stream());
  EXPECT_EQ(green_context_of(blas_stream), green);
  EXPECT_EQ(green_context_of(dnn_stream), green);

  // The whole-GPU backend's stream is an ordinary one.
  auto& whole = dynamic_cast<CudaBackend&>(gpu_backend());
  EXPECT_EQ(green_context_of(whole.stream()), nullptr);
}

TEST(SmPartition, GemmAndConvolutionOnThePartitionMatchTheCpu) {
  const Plan p = plan();
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  CudaBackend part(0, with_sms(p.request));
  Backend& cpu = cpu_backend();
  auto pair = [&](const Shape& s, uint64_t seed) {
    std::pair<Tensor, Tensor> t{cpu.alloc(s), part.alloc(s)};
    fill_uniform(cpu, t.first, seed, -1.0f, 1.0f);
    fill_uniform(part, t.second, seed, -1.0f, 1.0f);
    return t;
  };

  const int64_t m = 96, n = 80, k = 301;
  auto a = pair(Shape{m, k}, 31), b = pair(Shape{k, n}, 32), c = pair(Shape{m, n}, 33);
  cpu.gemm(false, false, m, n, k, 1.0f, a.first.f32(), b.first.f32(), 0.0f, c.first.f32());
  part.gemm(false, false, m, n, k, 1.0f, a.second.f32(), b.second.f32(), 0.0f, c.second.f32());
  expect_parity("gemm on a partition", to_host(part, c.second), to_host(cpu, c.first), kTolDot);

  ConvParams cp;
  cp.kernel_h = cp.kernel_w = 3;
  cp.pad_h = cp.pad_w = 1;
  auto x = pair(Shape{4, 16, 20, 20}, 34), w = pair(Shape{32, 16, 3, 3}, 35), y = pair(Shape{4, 32, 20, 20}, 36);
  cpu.conv_forward(cp, x.first, w.first, y.first);
  part.conv_forward(cp, x.second, w.second, y.second);
  expect_parity("conv_forward on a partition", to_host(part, y.second), to_host(cpu, y.first), kTolConv);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(SmPartition, TensorsOutliveTheBackendAndTheWholeGpuWorksAfterwards) {
  const Plan p = plan();
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  Tensor kept;
  {
    auto part = make_backend("gpu:0", p.request);
    kept = part->alloc(Shape{1 << 16});
    part->fill(kept, 2.0f);
  }
  kept = Tensor();  // freed through the stream, then the green context goes
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Backend& whole = gpu_backend();
  Tensor t = whole.alloc(Shape{256});
  whole.fill(t, 3.0f);
  std::vector<float> host = to_host(whole, t);
  EXPECT_EQ(host.front(), 3.0f);
  EXPECT_EQ(host.back(), 3.0f);
}

#else

TEST(SmPartition, NeedsTheCudaBackend) {
  GTEST_SKIP() << "built without the CUDA backend";
}

#endif

}  // namespace
}  // namespace cnnscale::testing
