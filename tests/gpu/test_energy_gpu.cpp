// Energy on a real GPU: over a 5 s window of large GEMMs, NVML's energy counter difference and the
// trapezoid integral of the power sampler's readings must agree within 10% (the two are independent
// paths through the driver: a wrong unit, field or time base would show here).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_entry.hpp"  // cuda_device_uuid
#endif
#include "measure/energy_monitor.hpp"

namespace cnnscale {
namespace {

TEST(GpuEnergy, CounterAndSampledPowerAgreeOverAFiveSecondGemmWindow) {
#if !CNNSCALE_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu:0");
  auto reader = measure::open_gpu_power_reader(cuda_device_uuid(0), 0);
  if (!reader->available()) GTEST_SKIP() << "NVML unavailable: " << reader->description();
  measure::EnergyMonitor energy(std::move(reader), nullptr, 10.0);

  const int64_t n = 8192;
  std::vector<float> host(static_cast<size_t>(n * n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : host) v = u(rng);  // never time all-zero data
  Tensor a = backend->alloc(Shape{n, n}), b = backend->alloc(Shape{n, n}), c = backend->alloc(Shape{n, n});
  backend->upload(host.data(), a);
  backend->upload(host.data(), b);
  auto gemm = [&] { backend->gemm(false, false, n, n, n, 1.0f / n, a.f32(), b.f32(), 0.0f, c.f32()); };
  for (int i = 0; i < 5; ++i) gemm();  // clocks up, cuBLAS heuristics chosen
  backend->synchronize();

  energy.start_sampling();
  energy.begin("gemm window");
  int64_t launched = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    for (int i = 0; i < 10; ++i, ++launched) gemm();
    backend->synchronize();
  }
  measure::EnergyReading r = energy.end(launched);
  energy.stop_sampling();

  ASSERT_TRUE(r.gpu_joules) << r.gpu_method;
  ASSERT_TRUE(r.gpu_sampled_joules) << "sampler produced no power readings";
  const double counter = *r.gpu_joules, sampled = *r.gpu_sampled_joules;
  const double tflops = 2.0 * n * n * n * launched / r.seconds / 1e12;
  std::printf("gemm window: %.3f s, %lld GEMMs (%.1f TFLOP/s), counter %.1f J (%.1f W), sampled %.1f J (%.1f W), "
              "difference %.2f%%, %zu samples\n",
              r.seconds, static_cast<long long>(launched), tflops, counter, counter / r.seconds, sampled,
              sampled / r.seconds, 100.0 * measure::relative_difference(sampled, counter),
              energy.sampler()->samples(0).size());
  EXPECT_GE(r.seconds, 5.0);
  EXPECT_GT(counter / r.seconds, 100.0) << "a GPU busy with GEMMs draws well above idle power";
  EXPECT_LT(measure::relative_difference(sampled, counter), 0.10);
#endif
}

}  // namespace
}  // namespace cnnscale
