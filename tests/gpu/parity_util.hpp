// Helpers for the CUDA-vs-CPU parity tests: the two backends, "twin" tensors holding the same
// values on both, and a comparison by normalized error, max|gpu - cpu| / max(1e-6, max|cpu|),
// that reports where the worst element is, its two values and the NMSE when it fails.
// Set CNNSCALE_PARITY_VERBOSE=1 to print every comparison (to re-derive tolerances).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "common/layer_harness.hpp"

namespace cnnscale::testing {

// ---- tolerances (normalized error; fp32 machine epsilon is 1.2e-7, one ulp ~6e-8 relative) -------
// Selection and copies (ReLU, max-pool forward, channel copies, accuracy counts): no arithmetic
// differs, so results must be bit-identical.
constexpr double kTolExact = 0.0;
// One to three roundings per element (axpby, SGD, dropout scaling, bias add, softmax-CE gradient,
// average-pool divisions): the only legitimate difference is a fused multiply-add on one side
// (cuDNN's kernels; a CPU build with -march=native), <= 1-2 ulp. 1e-6 (~16 ulp of the largest
// value) allows that; a wrong formula or index is off by O(1e-2) or more.
constexpr double kTolElementwise = 1e-6;
// Reductions summed in different orders and precisions: the CPU accumulates in double, cuDNN and
// cuBLAS in float with tree/blocked orders. For n terms of comparable size the float error grows
// like sqrt(n) ulp in practice; n <= a few thousand here gives <= ~5e-6 normalized.
// Measured on an H100 (cuDNN 9.19): <= 2.2e-7 for softmax, batch norm, LRN, bias and pooling sums.
constexpr double kTolReduction = 1e-5;
// GEMM and convolution: dot products of K <= ~3000 U(-1, 1) terms in blocked fp32 orders.
// Measured on an H100: <= 7.6e-7 (GEMM K = 301; conv 11x11x3; FFT_TILING picked for the
// 256-channel 3x3 case gave 4e-7). cuDNN's search may pick its fused Winograd (3x3) on other
// machines, which rounds in a transformed domain and loses up to ~10x more, hence 2e-5 for
// convolution. The non-fused Winograd algorithms lose far more (1.8e-3 on a 5x5 case): strict fp32
// refuses them (cuda_conv_search.cpp), and this tolerance catches them if they come back.
// TF32 (10 mantissa bits) errs by ~1e-4..1e-3 here, so these tolerances also catch TF32
// sneaking in (test_cuda_backend.cpp shows it for GEMM); a wrong index, stride or pad is O(1).
constexpr double kTolDot = 1e-5;
constexpr double kTolConv = 2e-5;
// Batch-norm backward: dx = scale * inv_std / M * (M dy - sum dy - xhat sum dy xhat) cancels
// terms of size M |dy| down to size |dy|, so reduction error is amplified ~10x.
constexpr double kTolBnBackward = 1e-4;
// LRN: cuDNN evaluates scale^-beta in float (powf, ~1-2 ulp, scaled by beta and the window sum)
// while the CPU uses double; backward adds a window sum of dy*y/scale that partly cancels.
constexpr double kTolLrn = 1e-5;
constexpr double kTolLrnBackward = 5e-5;

// 16-bit results against the f32 CPU reference fed exactly the GPU's 16-bit inputs (widened, which
// is exact), so the only differences are the GPU's 16-bit stores and the usual fp32 ones. As a
// normalized error (max |gpu - cpu| / max |cpu|): every 16-bit store rounds with relative error
// <= u (u = 2^-8 for bf16's 8 significant bits, 2^-11 for fp16's 11). Along any output's path the
// layers tested make at most three stores (Eltwise with three bottoms: one per accumulation; conv
// with bias: two), each of a value no larger than 1.3x the largest output for these inputs and
// coefficients, so the rounding part is below 3 x 1.3 u < 4u. Everything else is computed in fp32
// from identical inputs and stays under the loosest f32 tolerance above (1e-4). Accumulating in 16
// bits, or a wrong dtype anywhere, gives errors of order 1 instead.
inline double tol_16bit(DType t) {
  return 4.0 * (t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) + 1e-4;
}

// TF32 dot products (convolution, GEMM) against the f32 CPU reference. TF32 keeps 11 significant
// bits of each operand (u = 2^-11). Whether a kernel rounds to nearest or truncates, each operand
// errs by at most 2u of itself, so a product x_i w_i by at most 4u of itself, with a mean part of at
// most 2u (truncation always shrinks) and a zero-mean part of random sign. Fp32 accumulation of the
// K terms adds well under u. For an output y = sum x_i w_i the mean part is at most 2u |y|, so at
// most 2u once normalised by the largest output. The zero-mean part has a standard deviation of at
// most 2u s, s = sqrt(sum (x_i w_i)^2), which for independent zero-mean operands is also the
// standard deviation of y itself. Over the J outputs of a test (J >= 40 here: the smallest is a
// 4 x 10 fully-connected output) the largest error and the largest |y| are maxima of J draws on
// the same scale, so their ratio stays near 1: even with the error's maximum at its top (5 standard
// deviations) and y's at the bottom of its range for J = 40 (1.9), the zero-mean part stays below
// 2u x 5 / 1.9 < 5.3u. The total stays below 7.3u < 8u on any machine, whatever the kernel. A wrong
// index, stride or pad errs by O(1).
constexpr double kTolTf32Dot = 8.0 / 2048.0;

// Convolution and GEMM tests over the tensor-core precisions, where an f32 operand means TF32: the
// tolerance of each, and its name in test names ("tf32", "bf16", "f16").
inline double tol_tensor_core_dot(DType t) { return t == DType::F32 ? kTolTf32Dot : tol_16bit(t); }
inline std::string tensor_core_name(DType t) { return t == DType::F32 ? std::string("tf32") : dtype_name(t); }

// ---- backends (created once, never destroyed: tearing CUDA objects down during static
// destruction races the runtime's own shutdown) ----------------------------------------------------
inline Backend& cpu_backend() {
  static Backend* b = make_backend("cpu").release();
  return *b;
}
inline Backend& gpu_backend() {
  static Backend* b = make_backend("gpu:0").release();
  return *b;
}
// TF32 allowed: the backend of a --precision tf32 run (channels-last f32 activations).
inline Backend& gpu_tf32_backend() {
  static Backend* b = make_backend("gpu:0", 0, Precision::TF32).release();
  return *b;
}

// ---- comparison ------------------------------------------------------------------------------------
struct ParityError {
  double max_abs_diff = 0.0, max_abs_ref = 0.0, normalized = 0.0, nmse = 0.0;
  size_t worst = 0;
  float gpu_at_worst = 0.0f, cpu_at_worst = 0.0f;
};

inline ParityError parity_error(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  ParityError e;
  double sq_diff = 0.0, sq_ref = 0.0;
  for (size_t i = 0; i < cpu.size() && i < gpu.size(); ++i) {
    double ref = cpu[i], got = gpu[i];
    double d = std::fabs(got - ref);
    if (std::isnan(got) != std::isnan(ref) || (std::isnan(d) && !std::isnan(ref))) d = INFINITY;
    if (std::isnan(d)) d = 0.0;  // NaN on both sides: the same answer
    if (i == 0 || d > e.max_abs_diff) {
      e.max_abs_diff = d;
      e.worst = i;
      e.gpu_at_worst = gpu[i];
      e.cpu_at_worst = cpu[i];
    }
    if (std::isfinite(ref)) e.max_abs_ref = std::max(e.max_abs_ref, std::fabs(ref));
    sq_diff += d * d;
    sq_ref += ref * ref;
  }
  e.normalized = e.max_abs_diff / std::max(1e-6, e.max_abs_ref);
  e.nmse = sq_diff / std::max(1e-30, sq_ref);
  return e;
}

inline bool parity_verbose() {
  const char* v = std::getenv("CNNSCALE_PARITY_VERBOSE");
  return v && *v && *v != '0';
}

// Non-fatal, so that one test reports every output that disagrees.
inline void expect_parity(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                          double tol) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  ParityError e = parity_error(gpu, cpu);
  if (parity_verbose())
    std::printf("[parity] %-60s normalized %.3e (tol %.1e)  NMSE %.3e  max|ref| %.3e  n=%zu\n", what.c_str(),
                e.normalized, tol, e.nmse, e.max_abs_ref, cpu.size());
  EXPECT_TRUE(e.normalized <= tol) << what << ": max|gpu - cpu| / max|cpu| = " << e.normalized << " > tol " << tol
                                   << " (max|diff| " << e.max_abs_diff << ", max|cpu| " << e.max_abs_ref
                                   << ", NMSE " << e.nmse << "); worst at flat index " << e.worst << ": gpu "
                                   << e.gpu_at_worst << " vs cpu " << e.cpu_at_worst << " of " << cpu.size();
}

// ---- twins: one tensor per backend with identical contents -----------------------------------------
struct Twin {
  Tensor cpu, gpu;
  const Shape& shape() const { return cpu.shape(); }
};

inline Twin twin(const Shape& s, DType dtype = DType::F32) {
  return Twin{cpu_backend().alloc(s, dtype), gpu_backend().alloc(s, dtype)};
}

inline void fill_twin(const Twin& t, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  fill_uniform(cpu_backend(), t.cpu, seed, lo, hi);
  fill_uniform(gpu_backend(), t.gpu, seed, lo, hi);
}

inline Twin twin_uniform(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Twin t = twin(s);
  fill_twin(t, seed, lo, hi);
  return t;
}

inline Twin twin_values(const Shape& s, const std::vector<float>& values) {
  Twin t = twin(s);
  from_host(cpu_backend(), t.cpu, values);
  from_host(gpu_backend(), t.gpu, values);
  return t;
}

inline Twin twin_labels(const std::vector<int32_t>& labels) {
  Twin t = twin(Shape{static_cast<int64_t>(labels.size())}, DType::I32);
  set_labels(cpu_backend(), t.cpu, labels);
  set_labels(gpu_backend(), t.gpu, labels);
  return t;
}

// Output tensors start as garbage on both sides so that an op that forgets to overwrite shows.
inline Twin twin_output(const Shape& s, uint64_t seed = 999) { return twin_uniform(s, seed, -9.0f, 9.0f); }

inline void expect_twin(const std::string& what, const Twin& t, double tol) {
  expect_parity(what, to_host(gpu_backend(), t.gpu), to_host(cpu_backend(), t.cpu), tol);
}

}  // namespace cnnscale::testing
