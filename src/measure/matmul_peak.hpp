// The device's matrix-multiply peak as measured here: square n x n x n matmuls (Backend::matmul,
// cuBLAS on a GPU, OpenBLAS on the CPU) in one dtype, back to back over windows long enough to
// time, on non-zero data. A run's model FLOPs utilisation (MFU) is its training GFLOP/s over this
// peak: a ceiling reached on the same device, in the same precision, in the same process, rather
// than a datasheet number the clocks and power limit of the machine at hand may never reach.
#pragma once
#include <cstdint>
#include <functional>

#include "backend/backend.hpp"

namespace cnnscale {

struct MatmulPeak {
  double tflops = 0;  // median over the windows, 2 n^3 per call
  int64_t n = 0;
  DType dtype = DType::F32;
  int64_t calls_per_window = 0;
  int windows = 0;
  bool stopped = false;  // `stop` said so before the last window ended: no figure (tflops 0)
};

// Times `windows` windows of at least `min_seconds` each after a warm-up. f32 matmuls use TF32
// tensor cores exactly when the backend was made to allow them (the run's precision decides).
// `stop`, when given, is asked before every call: a run stopped for requeue after training has
// little time left, and a window cut short would be no peak.
MatmulPeak measure_matmul_peak(Backend& backend, DType dtype, int64_t n, double min_seconds = 0.2, int windows = 3,
                               const std::function<bool()>& stop = {});

// The square size measured for a device: large enough to fill an H100 (8192 on GPUs), small enough
// to take well under a second on a CPU (1024).
int64_t matmul_peak_size(const Device& device);

}  // namespace cnnscale
