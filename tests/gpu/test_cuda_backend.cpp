// The CUDA backend itself: construction on a missing device, description, argument errors that
// name the op and backend, pinned host memory, and label errors surfacing as NaN (no host sync).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing {
namespace {

// Runs the statement and returns the RuntimeError's message ("" and a test failure if none).
template <typename F>
std::string runtime_error_of(F&& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected cnnscale::RuntimeError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected cnnscale::RuntimeError, nothing was thrown";
  return "";
}

TEST(CudaBackend, MissingDeviceIndexThrowsRuntimeError) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  gpu_backend();  // a first backend exists; the second asks for a device past the last one
  const int n = cuda_device_count();
  const std::string spec = "gpu:" + std::to_string(n);
  std::string msg = runtime_error_of([&] { make_backend(spec); });
  EXPECT_NE(msg.find(spec), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such CUDA device"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(n) + " visible"), std::string::npos) << msg;
}

TEST(CudaBackend, DescriptionNamesTheGpuAndLibraries) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto b = make_backend("gpu:0");
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_EQ(b->device(), (Device{Device::Kind::CUDA, 0}));
  const std::string d = b->description();
#if CNNSCALE_HAVE_CUDA
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_NE(d.find(prop.name), std::string::npos) << d;
#endif
  for (const char* part : {"cuDNN", "cuBLAS", "CUDA runtime", "no TF32"})
    EXPECT_NE(d.find(part), std::string::npos) << "'" << part << "' missing from: " << d;
}

TEST(CudaBackend, UnsupportedArgumentsNameTheOpAndBackend) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Tensor i32 = g.alloc(Shape{2, 3, 4, 4}, DType::I32), f32 = g.alloc(Shape{2, 3, 4, 4});
  std::string msg = runtime_error_of([&] { g.relu_forward(i32, f32); });
  EXPECT_NE(msg.find("relu_forward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;

  Tensor host = cpu_backend().alloc(Shape{2, 3, 4, 4});  // a CPU tensor handed to a GPU op
  msg = runtime_error_of([&] { g.axpby(1.0f, host, 0.0f, f32); });
  EXPECT_NE(msg.find("axpby"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;

  Tensor half = g.alloc(Shape{4}, DType::F16);
  msg = runtime_error_of([&] { g.fill(half, 1.0f); });
  EXPECT_NE(msg.find("fill"), std::string::npos) << msg;

  LrnParams wide{17, 1e-4f, 0.75f, 1.0f};  // cuDNN's window is at most 16 channels
  Tensor y = g.alloc(Shape{2, 3, 4, 4});
  msg = runtime_error_of([&] { g.lrn_forward(wide, f32, y); });
  EXPECT_NE(msg.find("lrn_forward"), std::string::npos) << msg;
}

#if CNNSCALE_HAVE_CUDA
TEST(CudaBackend, HostAllocationsArePinned) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto host = gpu_backend().alloc_host(1 << 20);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, host->ptr()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  EXPECT_TRUE(host->device().is_cpu());
}

// The study's fp32 runs must not use TF32. A backend with allow_tf32 shows both that TF32 is
// what the option switches and that kTolDot would catch it: its 512-term dot products differ
// from the CPU by far more than kTolDot, while the default backend stays inside it.
TEST(CudaBackend, Tf32IsOffByDefaultAndTheParityToleranceWouldCatchIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  CudaBackendOptions options;
  options.allow_tf32 = true;
  CudaBackend tf32(0, options);
  EXPECT_NE(tf32.description().find("TF32 allowed"), std::string::npos) << tf32.description();
  const int64_t m = 512, n = 512, k = 512;
  Twin a = twin_uniform(Shape{m, k}, 151), b = twin_uniform(Shape{k, n}, 152), c = twin(Shape{m, n});
  Tensor c_tf32 = tf32.alloc(Shape{m, n});
  cpu_backend().gemm(false, false, m, n, k, 1.0f, a.cpu.f32(), b.cpu.f32(), 0.0f, c.cpu.f32());
  gpu_backend().gemm(false, false, m, n, k, 1.0f, a.gpu.f32(), b.gpu.f32(), 0.0f, c.gpu.f32());
  tf32.gemm(false, false, m, n, k, 1.0f, a.gpu.f32(), b.gpu.f32(), 0.0f, c_tf32.f32());
  std::vector<float> ref = to_host(cpu_backend(), c.cpu);
  ParityError fp32 = parity_error(to_host(gpu_backend(), c.gpu), ref);
  ParityError with_tf32 = parity_error(to_host(tf32, c_tf32), ref);
  EXPECT_LE(fp32.normalized, kTolDot) << "default backend: fp32 GEMM differs like TF32 would";
  EXPECT_GT(with_tf32.normalized, kTolDot) << "allow_tf32 backend: expected TF32-sized errors, got "
                                           << with_tf32.normalized;
  if (parity_verbose())
    std::printf("[parity] gemm 512^3 normalized error: fp32 %.3e, TF32 allowed %.3e\n", fp32.normalized,
                with_tf32.normalized);
}

TEST(CudaBackend, DeviceTensorsAreOnTheBackendsDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Tensor t = gpu_backend().alloc(Shape{16});
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, t.raw()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  auto& cuda = dynamic_cast<CudaBackend&>(gpu_backend());
  EXPECT_EQ(cuda.device_index(), 0);
  EXPECT_NE(cuda.stream(), nullptr);
  EXPECT_NE(cuda.cudnn_handle(), nullptr);
  EXPECT_NE(cuda.cublas_handle(), nullptr);
  EXPECT_FALSE(cuda.options().allow_tf32);
}
#endif

// The CPU backend throws on a bad label; the CUDA ops cannot without a host sync, so they poison
// their outputs with NaN instead, which the loss check of any caller sees.
TEST(CudaBackend, LabelOutOfRangeGivesNaN) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Tensor prob = g.alloc(Shape{3, 4}), labels = g.alloc(Shape{3}, DType::I32);
  Tensor loss = g.alloc(Shape{1}), dx = g.alloc(Shape{3, 4}), acc = g.alloc(Shape{1});
  g.fill(prob, 0.25f);
  set_labels(g, labels, {0, 4, 1});  // 4 is outside [0, 4)
  g.cross_entropy_loss(prob, labels, loss);
  g.softmax_cross_entropy_backward(prob, labels, 1.0f, dx);
  g.accuracy_topk(prob, labels, {1}, acc);
  EXPECT_TRUE(std::isnan(to_host(g, loss)[0]));
  EXPECT_TRUE(std::isnan(to_host(g, acc)[0]));
  std::vector<float> d = to_host(g, dx);
  EXPECT_FALSE(std::isnan(d[0]));  // row 0 has a valid label
  EXPECT_TRUE(std::isnan(d[4]));   // row 1 does not
}

}  // namespace
}  // namespace cnnscale::testing
