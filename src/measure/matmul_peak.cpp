// measure_matmul_peak: windows of back-to-back square matmuls timed by the backend's own timing
// points (CUDA events on a GPU, the host clock on the CPU).
#include "measure/matmul_peak.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"

namespace cnnscale {

int64_t matmul_peak_size(const Device& device) { return device.is_cpu() ? 1024 : 8192; }

namespace {
// Uniform values in [-1, 1) in `dtype`: never zeros, whose multiplications would idle the units.
Tensor random_matrix(Backend& backend, int64_t n, DType dtype, uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(n * n));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : host) v = u(rng);
  Tensor wide = backend.alloc(Shape{n, n});
  backend.upload(host.data(), wide);
  if (dtype == DType::F32) return wide;
  Tensor t = backend.alloc(Shape{n, n}, dtype);
  backend.convert(wide, t);
  return t;
}
}  // namespace

MatmulPeak measure_matmul_peak(Backend& backend, DType dtype, int64_t n, double min_seconds, int windows,
                               const std::function<bool()>& stop) {
  CNNSCALE_CHECK(n >= 1 && windows >= 1 && min_seconds > 0, "matmul peak: n {}, windows {}, {} s", n, windows,
                 min_seconds);
  const Tensor a = random_matrix(backend, n, dtype, 1), b = random_matrix(backend, n, dtype, 2);
  const Tensor c = backend.alloc(Shape{n, n}, dtype);
  MatmulPeak p;
  p.n = n;
  p.dtype = dtype;
  p.windows = windows;
  auto call = [&] { backend.matmul(false, false, n, n, n, 1.0f, a, b, 0.0f, c); };
  auto timed = [&](int64_t calls) {
    backend.synchronize();
    auto begin = backend.record_timing_event();
    for (int64_t i = 0; i < calls && !p.stopped; ++i) {
      p.stopped = stop && stop();
      if (!p.stopped) call();
    }
    auto end = backend.record_timing_event();
    backend.synchronize();
    return backend.elapsed_ms(*begin, *end) / 1e3;
  };
  timed(2);  // warm-up: library handles, algorithm heuristics, clocks
  const double per_call = std::max(timed(2) / 2, 1e-9);
  p.calls_per_window = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(min_seconds / per_call)));
  std::vector<double> tflops;
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  for (int w = 0; w < windows && !p.stopped; ++w)
    tflops.push_back(flops * static_cast<double>(p.calls_per_window) / timed(p.calls_per_window) / 1e12);
  if (p.stopped) return p;
  std::sort(tflops.begin(), tflops.end());
  p.tflops = tflops[tflops.size() / 2];
  return p;
}

}  // namespace cnnscale
