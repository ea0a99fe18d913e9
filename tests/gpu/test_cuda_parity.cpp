// CUDA vs CPU parity for every Backend op but convolution, forward and backward, on the same seeded
// random inputs: memory, GEMM, fully connected, BLAS-like ops and the SGD update, pooling,
// activations, dropout and LRN. Tolerances are normalized errors justified in parity_util.hpp; each
// case names its shape so a failure report says which one. Convolutions: test_cuda_parity_conv.cpp
// and test_cuda_parity_conv_forms.cpp; layer-level parity lives in test_cuda_parity_layers.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing {
namespace {

std::string shape_name(const Shape& s) { return s.to_string(); }

// ---- memory ----------------------------------------------------------------------------------------

TEST(CudaParityMemory, AllocZeroFillsAndUploadCopyFillRoundTrip) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Tensor a = g.alloc(Shape{3, 5, 7}), b = g.alloc(Shape{3, 5, 7});
  EXPECT_EQ(to_host(g, a), std::vector<float>(105, 0.0f));
  Tensor ia = g.alloc(Shape{9}, DType::I32);
  std::vector<int32_t> iv(9, -1);
  g.download(ia, iv.data());
  EXPECT_EQ(iv, std::vector<int32_t>(9, 0));

  std::vector<float> v(105);
  std::mt19937 rng(3);
  for (auto& x : v) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  from_host(g, a, v);
  g.copy(a, b);
  EXPECT_EQ(to_host(g, b), v);

  g.fill(b, 2.5f);
  EXPECT_EQ(to_host(g, b), std::vector<float>(105, 2.5f));
  g.fill(b.view(10, Shape{5}), 0.0f);  // a view: only its elements change
  std::vector<float> expect(105, 2.5f);
  for (int i = 10; i < 15; ++i) expect[i] = 0.0f;
  EXPECT_EQ(to_host(g, b), expect);
  g.fill(ia, 7.0f);
  g.download(ia, iv.data());
  EXPECT_EQ(iv, std::vector<int32_t>(9, 7));

  // Upload from backend-provided host memory (pinned on CUDA).
  auto host = g.alloc_host(105 * sizeof(float));
  std::copy(v.begin(), v.end(), static_cast<float*>(host->ptr()));
  g.upload(host->ptr(), b);
  EXPECT_EQ(to_host(g, b), v);
}

// ---- GEMM: all four transpose combinations, alpha and beta both non-trivial -------------------------

TEST(CudaParityGemm, AllTransposeCombinations) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const int64_t m = 37, n = 53, k = 301;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a " << ta << " trans_b " << tb);
      Twin a = twin_uniform(ta ? Shape{k, m} : Shape{m, k}, 11);
      Twin b = twin_uniform(tb ? Shape{n, k} : Shape{k, n}, 12);
      Twin c = twin_uniform(Shape{m, n}, 13);
      cpu_backend().gemm(ta, tb, m, n, k, 0.7f, a.cpu.f32(), b.cpu.f32(), 0.3f, c.cpu.f32());
      gpu_backend().gemm(ta, tb, m, n, k, 0.7f, a.gpu.f32(), b.gpu.f32(), 0.3f, c.gpu.f32());
      expect_twin(fmt::format("gemm ta={} tb={} ({}x{}x{})", ta, tb, m, n, k), c, kTolDot);
    }
}

TEST(CudaParityGemm, BetaZeroIgnoresOldContents) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Twin a = twin_uniform(Shape{8, 16}, 1), b = twin_uniform(Shape{16, 4}, 2);
  Twin c = twin_output(Shape{8, 4});
  cpu_backend().gemm(false, false, 8, 4, 16, 1.0f, a.cpu.f32(), b.cpu.f32(), 0.0f, c.cpu.f32());
  gpu_backend().gemm(false, false, 8, 4, 16, 1.0f, a.gpu.f32(), b.gpu.f32(), 0.0f, c.gpu.f32());
  expect_twin("gemm beta=0", c, kTolDot);
}

// ---- batch-1 fully connected forward: cuBLAS GEMV and the cuBLASLt matmul ---------------------------
// Each --fc-gemv mode (GEMV forced, the matmul forced, the measured choice) gives the CPU's
// max(0, x w^T + bias) at batch 1 in every precision; the 16-bit operands are the CPU's values
// rounded once (widening is exact), so only the summation and the output's rounding differ
// (kTolDot, tol_16bit). A GEMV over the wrong dimension (w not transposed) errs by O(1).
TEST(CudaParityLinear, BatchOneEveryGemvModeMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const int64_t k = 96, d = 600;
  Backend& cpu = cpu_backend();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (FcGemv mode : {FcGemv::On, FcGemv::Off, FcGemv::Auto}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " mode " << static_cast<int>(mode));
      CudaBackendOptions options;
      options.fc_gemv = mode;
      CudaBackend g(0, options);
      Tensor x = g.alloc(Shape{1, d}, dtype), w = g.alloc(Shape{k, d}, dtype), bias = g.alloc(Shape{k}, dtype);
      Tensor y = g.alloc(Shape{1, k}, dtype);
      fill_uniform(g, x, 61, -1.0f, 1.0f);
      fill_uniform(g, w, 62, -0.1f, 0.1f);
      fill_uniform(g, bias, 63, -0.5f, 0.5f);
      Tensor xc = cpu.alloc(Shape{1, d}), wc = cpu.alloc(Shape{k, d}), bc = cpu.alloc(Shape{k}),
             yc = cpu.alloc(Shape{1, k});
      from_host(cpu, xc, to_host(g, x));
      from_host(cpu, wc, to_host(g, w));
      from_host(cpu, bc, to_host(g, bias));
      cpu.linear_forward(xc, wc, bc, true, yc);
      for (int round = 0; round < 2; ++round) {  // the measuring call, then the chosen path
        g.fill(y, 9.0f);
        g.linear_forward(x, w, bias, true, y);
        expect_parity("batch-1 linear", to_host(g, y), to_host(cpu, yc),
                      dtype == DType::F32 ? kTolDot : tol_16bit(dtype));
      }
    }
  }
#endif
}

// ---- element-wise BLAS-like ops, bias, solver ---------------------------------------------------------

TEST(CudaParityBlas, Axpby) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  for (float beta : {0.0f, 0.5f, -1.25f}) {
    Twin x = twin_uniform(Shape{3, 7, 11}, 21), y = twin_uniform(Shape{3, 7, 11}, 22, -3, 3);
    cpu_backend().axpby(-0.75f, x.cpu, beta, y.cpu);
    gpu_backend().axpby(-0.75f, x.gpu, beta, y.gpu);
    expect_twin(fmt::format("axpby beta={}", beta), y, kTolElementwise);
  }
}

TEST(CudaParityBlas, BiasAddAndBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  for (Shape s : {Shape{4, 16, 5, 7}, Shape{6, 10}}) {
    Twin bias = twin_uniform(Shape{s.c()}, 31), y = twin_uniform(s, 32);
    cpu_backend().bias_add(bias.cpu, y.cpu);
    gpu_backend().bias_add(bias.gpu, y.gpu);
    expect_twin("bias_add y " + shape_name(s), y, kTolElementwise);

    Twin dy = twin_uniform(s, 33), dbias = twin_output(Shape{s.c()});
    cpu_backend().bias_backward(dy.cpu, dbias.cpu);
    gpu_backend().bias_backward(dy.gpu, dbias.gpu);
    expect_twin("bias_backward dbias for dy " + shape_name(s), dbias, kTolReduction);
  }
}

// Channels-last bias gradients over 25,752 rows (every block makes several passes, four rows at a
// time where they last), for channel counts that fill whole 16-byte packs (96 in every dtype, 20
// in f32) and counts that do not (20 in 16 bits, 3). Both sides sum the same values (dy rounded to
// the GPU's dtype); the CPU in double, the GPU in float in three stages of at most a few hundred
// terms each (kTolReduction's case); a 16-bit dbias is then rounded once more, by at most half an
// ulp of itself, which tol_16bit covers.
TEST(CudaParityBlas, ChannelsLastBiasBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend &cpu = cpu_backend(), &gpu = gpu_backend();
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (int64_t c : {96, 20, 3}) {
      const Shape s{24, c, 37, 29};
      Twin dy = twin_uniform(s, 71 + c);
      Tensor rounded = cpu.alloc(s, t), dy_gpu = gpu.alloc(s, t).as_layout(Layout::NHWC);
      cpu.convert(dy.cpu, rounded);
      cpu.convert(rounded, dy.cpu);
      gpu.convert(dy.gpu, dy_gpu);
      Twin dbias = twin(Shape{c});
      Tensor dbias_gpu = gpu.alloc(Shape{c}, t);
      cpu.bias_backward(dy.cpu, dbias.cpu);
      gpu.bias_backward(dy_gpu, dbias_gpu);
      gpu.convert(dbias_gpu, dbias.gpu);
      expect_twin(fmt::format("channels-last bias_backward {} c={}", dtype_name(t), c), dbias,
                  t == DType::F32 ? kTolReduction : tol_16bit(t));
    }
}

TEST(CudaParityBlas, SgdUpdateThreeSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Twin w = twin_uniform(Shape{1000}, 41), history = twin_uniform(Shape{1000}, 42, -0.1f, 0.1f);
  for (int step = 0; step < 3; ++step) {
    Twin dw = twin_uniform(Shape{1000}, 43 + step);
    cpu_backend().sgd_update(w.cpu, dw.cpu, history.cpu, 0.01f, 0.9f, 5e-4f);
    gpu_backend().sgd_update(w.gpu, dw.gpu, history.gpu, 0.01f, 0.9f, 5e-4f);
  }
  expect_twin("sgd_update w after 3 steps", w, kTolElementwise);
  expect_twin("sgd_update history after 3 steps", history, kTolElementwise);
}

// The one-launch update: segments with their own multipliers, a gap and a frozen tail left alone,
// the per-parameter rule as sgd_update's own parity holds it (the CPU default runs sgd_update).
TEST(CudaParityBlas, SgdUpdateSegmentsMatchesPerParameterUpdates) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Twin w = twin_uniform(Shape{1000}, 51), history = twin_uniform(Shape{1000}, 52, -0.1f, 0.1f);
  const std::vector<int32_t> ranges{0, 300, 320, 700, 704, 900};  // gaps [300, 320) and [700, 704), tail 900..
  const std::vector<float> mults{1.0f, 1.0f, 2.0f, 0.0f, 0.5f, 3.0f};
  Twin r = twin(Shape{6}, DType::I32), m = twin(Shape{6});
  for (Backend* b : {&cpu_backend(), &gpu_backend()}) {
    const Tensor& rt = b == &cpu_backend() ? r.cpu : r.gpu;
    b->upload(ranges.data(), rt);
    from_host(*b, b == &cpu_backend() ? m.cpu : m.gpu, mults);
  }
  const std::vector<float> w0 = to_host(cpu_backend(), w.cpu);
  for (int step = 0; step < 3; ++step) {
    Twin dw = twin_uniform(Shape{1000}, 53 + step);
    cpu_backend().sgd_update_segments(w.cpu, dw.cpu, history.cpu, r.cpu, m.cpu, 0.01f, 0.9f, 5e-4f);
    gpu_backend().sgd_update_segments(w.gpu, dw.gpu, history.gpu, r.gpu, m.gpu, 0.01f, 0.9f, 5e-4f);
  }
  expect_twin("sgd_update_segments w", w, kTolElementwise);
  expect_twin("sgd_update_segments history", history, kTolElementwise);
  const std::vector<float> w3 = to_host(gpu_backend(), w.gpu);
  for (int i : {300, 319, 700, 703, 900, 999}) EXPECT_EQ(w3[i], w0[i]) << "element " << i << " is in no segment";
  EXPECT_NE(w3[0], w0[0]);
}

// The same update writing the compute copies (SgdMirrors) in each copy dtype: a reordered filter
// (K, C, P) -> (K, P, C), a plain copy, and a segment with none, against the CPU's default (the
// update, then convert()). The masters agree to kTolElementwise; rounding each to the copy's
// format then moves a copy by at most half an ulp of its own, which tol_16bit covers for 16-bit
// copies (kTolElementwise for f32 ones). Copy elements no segment maps keep their sentinel.
TEST(CudaParityBlas, SgdUpdateSegmentsWriteTheComputeCopies) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  constexpr int32_t kK = 4, kC = 5, kP = 9;  // a 4 x 5 x 3 x 3 filter, 180 elements
  const std::vector<int32_t> ranges{0, kK * kC * kP, 192, 200, 256, 400};
  const std::vector<float> mults{1.0f, 1.0f, 2.0f, 0.0f, 1.0f, 1.0f};
  const std::vector<int32_t> map{8, kC, kP, 1, 190, 1, 1, 0, -1, 1, 1, 0};  // copies at [8, 188), [190, 198)
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(t));
    Twin w = twin_uniform(Shape{400}, 61), history = twin_uniform(Shape{400}, 62, -0.1f, 0.1f);
    Twin r = twin(Shape{6}, DType::I32), m = twin(Shape{6}), mp = twin(Shape{12}, DType::I32);
    Twin copies = twin_values(Shape{200}, std::vector<float>(200, 7.0f)), copies_t = twin(Shape{200}, t);
    for (Backend* b : {&cpu_backend(), &gpu_backend()}) {
      const bool cpu = b == &cpu_backend();
      b->upload(ranges.data(), cpu ? r.cpu : r.gpu);
      b->upload(map.data(), cpu ? mp.cpu : mp.gpu);
      from_host(*b, cpu ? m.cpu : m.gpu, mults);
      b->convert(cpu ? copies.cpu : copies.gpu, cpu ? copies_t.cpu : copies_t.gpu);
    }
    for (int step = 0; step < 2; ++step) {
      Twin dw = twin_uniform(Shape{400}, 63 + step);
      cpu_backend().sgd_update_segments(w.cpu, dw.cpu, history.cpu, r.cpu, m.cpu, 0.01f, 0.9f, 5e-4f,
                                        {copies_t.cpu, mp.cpu, Tensor()});
      gpu_backend().sgd_update_segments(w.gpu, dw.gpu, history.gpu, r.gpu, m.gpu, 0.01f, 0.9f, 5e-4f,
                                        {copies_t.gpu, mp.gpu, Tensor()});
    }
    expect_twin("sgd_update_segments w", w, kTolElementwise);
    for (Backend* b : {&cpu_backend(), &gpu_backend()})
      b->convert(b == &cpu_backend() ? copies_t.cpu : copies_t.gpu, b == &cpu_backend() ? copies.cpu : copies.gpu);
    expect_twin("sgd_update_segments compute copies", copies, t == DType::F32 ? kTolElementwise : tol_16bit(t));
    const std::vector<float> c = to_host(gpu_backend(), copies.gpu);
    for (int i : {0, 7, 188, 189, 198, 199}) EXPECT_EQ(c[i], 7.0f) << "copy element " << i << " is in no segment";
    // A reordered element: filter k = 1, channel c = 2, pixel p = 4 sits at (k * P + p) * C + c.
    const std::vector<float> w2 = to_host(gpu_backend(), w.gpu);
    const float moved = w2[(1 * kC + 2) * kP + 4];
    EXPECT_NEAR(c[8 + (1 * kP + 4) * kC + 2], moved, std::fabs(moved) * tol_16bit(DType::BF16));
  }
}

TEST(CudaParityBlas, CopyChannelsLeavesOtherChannelsAlone) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Twin src = twin_uniform(Shape{3, 5, 4, 6}, 51), dst = twin_uniform(Shape{3, 9, 4, 6}, 52);
  cpu_backend().copy_channels(src.cpu, 1, dst.cpu, 5, 3);
  gpu_backend().copy_channels(src.gpu, 1, dst.gpu, 5, 3);
  expect_twin("copy_channels [1,4) -> [5,8)", dst, kTolExact);
  Twin fsrc = twin_uniform(Shape{4, 3}, 53), fdst = twin_uniform(Shape{4, 7}, 54);  // (N, C): Concat of FC outputs
  cpu_backend().copy_channels(fsrc.cpu, 0, fdst.cpu, 4, 3);
  gpu_backend().copy_channels(fsrc.gpu, 0, fdst.gpu, 4, 3);
  expect_twin("copy_channels (N, C)", fdst, kTolExact);
}

// ---- pooling ------------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  Shape x;
  PoolParams p;
  bool expect_cudnn;  // which CUDA path the shape must take (so both paths are really covered)
};

std::ostream& operator<<(std::ostream& os, const PoolCase& c) { return os << c.name; }

class CudaParityPool : public ::testing::TestWithParam<PoolCase> {};

TEST_P(CudaParityPool, ForwardAndBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const PoolCase& c = GetParam();
  const PoolParams& p = c.p;
#if CNNSCALE_HAVE_CUDA
  EXPECT_EQ(CudaBackend::cudnn_can_pool(p, c.x), c.expect_cudnn)
      << c.name << ": expected the " << (c.expect_cudnn ? "cuDNN" : "own-kernel") << " path";
#endif
  Shape ys{c.x.n(), c.x.c(), pool_output_dim(c.x.h(), p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
           pool_output_dim(c.x.w(), p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode)};
  // U(-1, 1) floats: ties inside a window have probability ~1e-7 per pair, so the first-maximum
  // rule (where the backends could legitimately differ) is not exercised by chance.
  Twin x = twin_uniform(c.x, 71), y = twin_output(ys), dy = twin_uniform(ys, 72), dx = twin_output(c.x);
  cpu_backend().pool_forward(p, x.cpu, y.cpu);
  gpu_backend().pool_forward(p, x.gpu, y.gpu);
  expect_twin(c.name + " pool_forward y " + shape_name(ys), y, p.mode == PoolMode::Max ? kTolExact : kTolElementwise);
  cpu_backend().pool_backward(p, x.cpu, y.cpu, dy.cpu, dx.cpu);
  gpu_backend().pool_backward(p, x.gpu, y.gpu, dy.gpu, dx.gpu);
  // Max: each dx sums the dy of the (<= 4 here) windows it wins, order may differ; average: sums
  // of dy / pool_size over the covering windows.
  expect_twin(c.name + " pool_backward dx", dx, kTolElementwise);
}

PoolParams pool(PoolMode mode, int k, int s, int pad, bool ceil_mode = true) {
  PoolParams p;
  p.mode = mode;
  p.kernel_h = p.kernel_w = k;
  p.stride_h = p.stride_w = s;
  p.pad_h = p.pad_w = pad;
  p.ceil_mode = ceil_mode;
  return p;
}

constexpr PoolMode kMax = PoolMode::Max;
constexpr PoolMode kAve = PoolMode::Average;

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaParityPool,
    ::testing::Values(
        // CaffeNet's three max pools (ceil output equals floor output: cuDNN).
        PoolCase{"caffenet_pool1_55to27", {2, 4, 55, 55}, pool(kMax, 3, 2, 0), true},
        PoolCase{"caffenet_pool2_27to13", {2, 8, 27, 27}, pool(kMax, 3, 2, 0), true},
        PoolCase{"caffenet_pool5_13to6", {2, 16, 13, 13}, pool(kMax, 3, 2, 0), true},
        // Ceil mode adds a row/column: own kernels (GoogLeNet's 112 -> 56, padded shapes).
        PoolCase{"ceil_max_112to56", {2, 3, 112, 112}, pool(kMax, 3, 2, 0), false},
        PoolCase{"ceil_max_pad1_14to8", {2, 5, 14, 14}, pool(kMax, 3, 2, 1), false},
        PoolCase{"ceil_ave_pad1_14to8", {2, 5, 14, 14}, pool(kAve, 3, 2, 1), false},
        PoolCase{"ceil_ave_k2s2_7to4", {2, 3, 7, 7}, pool(kAve, 2, 2, 0), false},
        // Floor-equal average shapes and explicit floor mode: cuDNN.
        PoolCase{"ave_k3s1p1_14to14", {2, 6, 14, 14}, pool(kAve, 3, 1, 1), true},
        PoolCase{"ave_k5s3_14to4_inception_aux", {2, 6, 14, 14}, pool(kAve, 5, 3, 0), true},
        PoolCase{"floor_max_k2s2p1_7to4", {2, 3, 7, 7}, pool(kMax, 2, 2, 1, false), true},
        PoolCase{"floor_max_k3s2_112to55", {2, 3, 112, 112}, pool(kMax, 3, 2, 0, false), true},
        PoolCase{"global_ave_7x7", {4, 16, 7, 7}, pool(kAve, 7, 1, 0), true}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

// A training forward that saves each window's argmax and the backward that gathers through it
// route dy exactly as a backward that finds the argmax again from x: ResNet's 3x3 stride-2 pool
// with padding 1 and Caffe's ceil rounding (at most two windows per axis cover a pixel: the
// unrolled gather) and a 3x3 stride-1 pool (three: the general one), channels-last, in bf16 and
// f32, on x drawn from four values so that most windows hold ties (the first maximum must win, as
// on the CPU). The saved bytes exist only where the backward gathers.
TEST(CudaPoolSaved, TheForwardsArgmaxRoutesDyAsTheRecomputedOne) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Backend& cpu = cpu_backend();
  const Shape xs{3, 16, 15, 15};
  std::vector<float> values(static_cast<size_t>(xs.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i * 7919 % 4) * 0.5f - 1.0f;
  for (const PoolParams& p : {pool(kMax, 3, 2, 1), pool(kMax, 3, 1, 1)}) {
    const Shape ys{3, 16, pool_output_dim(15, 3, p.stride_h, 1, true), pool_output_dim(15, 3, p.stride_w, 1, true)};
    for (DType t : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(fmt::format("{}, stride {}", dtype_name(t), p.stride_h));
      const int64_t bytes = g.pool_saved_bytes(p, xs, t, Layout::NHWC);
      ASSERT_EQ(bytes, ys.numel());
      EXPECT_EQ(g.pool_saved_bytes(p, xs, t, Layout::NCHW), 0);
      EXPECT_EQ(g.pool_saved_bytes(pool(kMax, 2, 2, 0), xs, t, Layout::NHWC), 0);  // no overlap: no gather
      EXPECT_EQ(g.pool_saved_bytes(pool(kAve, 3, 2, 1), xs, t, Layout::NHWC), 0);
      auto nhwc = [&](const Shape& s) { return g.alloc(s, t).as_layout(Layout::NHWC); };
      const Tensor x = nhwc(xs), y_saving = nhwc(ys), y_plain = nhwc(ys), dy = nhwc(ys), dx_saved = nhwc(xs),
                   dx_recomputed = nhwc(xs), saved = g.alloc(Shape{(bytes + 3) / 4}, DType::I32);
      from_host(g, x, values);
      fill_uniform(g, dy, 5, -1.0f, 1.0f);
      g.pool_forward(p, x, y_saving, saved);
      g.pool_forward(p, x, y_plain);
      EXPECT_EQ(to_host(g, y_saving), to_host(g, y_plain));
      g.pool_backward(p, x, y_saving, dy, dx_saved, saved);
      g.pool_backward(p, x, y_plain, dy, dx_recomputed);
      const std::vector<float> got = to_host(g, dx_saved);
      EXPECT_EQ(got, to_host(g, dx_recomputed));
      Tensor xc = cpu.alloc(xs), yc = cpu.alloc(ys), dyc = cpu.alloc(ys), dxc = cpu.alloc(xs);
      from_host(cpu, xc, values);
      from_host(cpu, dyc, to_host(g, dy));
      cpu.pool_forward(p, xc, yc);
      cpu.pool_backward(p, xc, yc, dyc, dxc);
      // Each dx sums the dy of the (at most 9) windows it wins in fp32, rounded once to t; the CPU
      // sums the same values, maybe in another order (a few fp32 ulp).
      expect_parity("saved-argmax pool_backward dx", got, to_host(cpu, dxc),
                    t == DType::F32 ? kTolElementwise : tol_16bit(t));
    }
  }
}

// ---- activations, dropout, LRN -----------------------------------------------------------------------

TEST(CudaParityActivation, ReluForwardBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Shape s{4, 6, 9, 9};
  Twin x = twin_uniform(s, 81), y = twin_output(s), dy = twin_uniform(s, 82), dx = twin_output(s);
  cpu_backend().relu_forward(x.cpu, y.cpu);
  gpu_backend().relu_forward(x.gpu, y.gpu);
  expect_twin("relu_forward", y, kTolExact);
  cpu_backend().relu_backward(y.cpu, dy.cpu, dx.cpu);
  gpu_backend().relu_backward(y.gpu, dy.gpu, dx.gpu);
  expect_twin("relu_backward", dx, kTolExact);
  // In place, as the net runs ReLU.
  cpu_backend().relu_forward(x.cpu, x.cpu);
  gpu_backend().relu_forward(x.gpu, x.gpu);
  expect_twin("relu_forward in place", x, kTolExact);
}

TEST(CudaParityActivation, DropoutDrawsTheSameMask) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Shape s{8, 50, 5, 5};  // 10000 elements
  for (float ratio : {0.5f, 0.3f}) {
    SCOPED_TRACE(::testing::Message() << "ratio " << ratio);
    Twin x = twin_uniform(s, 91, 0.5f, 1.5f);  // never zero: y == 0 exactly where dropped
    Twin y = twin_output(s), dy = twin_uniform(s, 92, 0.5f, 1.5f), dx = twin_output(s);
    cpu_backend().dropout_forward(ratio, 1234, 77, x.cpu, y.cpu);
    gpu_backend().dropout_forward(ratio, 1234, 77, x.gpu, y.gpu);
    cpu_backend().dropout_backward(ratio, 1234, 77, dy.cpu, dx.cpu);
    gpu_backend().dropout_backward(ratio, 1234, 77, dy.gpu, dx.gpu);
    std::vector<float> yc = to_host(cpu_backend(), y.cpu), yg = to_host(gpu_backend(), y.gpu);
    std::vector<float> dxc = to_host(cpu_backend(), dx.cpu), dxg = to_host(gpu_backend(), dx.gpu);
    int64_t mask_mismatch = 0, dropped = 0, backward_mask_mismatch = 0;
    for (size_t i = 0; i < yc.size(); ++i) {
      mask_mismatch += (yc[i] == 0.0f) != (yg[i] == 0.0f);
      backward_mask_mismatch += (yc[i] == 0.0f) != (dxg[i] == 0.0f);
      dropped += yc[i] == 0.0f;
    }
    EXPECT_EQ(mask_mismatch, 0) << "forward masks differ";
    EXPECT_EQ(backward_mask_mismatch, 0) << "the backward mask differs from the forward one";
    // 10000 Bernoulli(ratio) draws: 5 sigma is < 0.025.
    EXPECT_NEAR(static_cast<double>(dropped) / yc.size(), ratio, 0.025);
    expect_parity("dropout_forward y", yg, yc, kTolElementwise);
    expect_parity("dropout_backward dx", dxg, dxc, kTolElementwise);
  }
}

TEST(CudaParityLrn, CaffeNetAndStrongNormalisation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  struct Case {
    std::string name;
    LrnParams p;
    Shape x;
    float range;
  };
  // CaffeNet's norm1/norm2 parameters, and alpha = 1, k = 2 with larger inputs, where the
  // cross-channel term dominates (a wrong window, alpha/n or backward sum then shows).
  for (const Case& c : {Case{"caffenet_lrn", LrnParams{5, 1e-4f, 0.75f, 1.0f}, Shape{2, 16, 7, 7}, 1.0f},
                        Case{"strong_lrn", LrnParams{3, 1.0f, 0.75f, 2.0f}, Shape{2, 7, 5, 6}, 2.0f},
                        Case{"strong_lrn_window5", LrnParams{5, 0.5f, 0.75f, 1.0f}, Shape{2, 9, 4, 3}, 2.0f}}) {
    Twin x = twin_uniform(c.x, 101, -c.range, c.range), y = twin_output(c.x);
    Twin dy = twin_uniform(c.x, 102), dx = twin_output(c.x);
    cpu_backend().lrn_forward(c.p, x.cpu, y.cpu);
    gpu_backend().lrn_forward(c.p, x.gpu, y.gpu);
    expect_twin(c.name + " lrn_forward y", y, kTolLrn);
    cpu_backend().lrn_backward(c.p, x.cpu, y.cpu, dy.cpu, dx.cpu);
    gpu_backend().lrn_backward(c.p, x.gpu, y.gpu, dy.gpu, dx.gpu);
    expect_twin(c.name + " lrn_backward dx", dx, kTolLrnBackward);
  }
}

}  // namespace
}  // namespace cnnscale::testing
