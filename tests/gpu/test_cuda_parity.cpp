// CUDA vs CPU parity for every Backend op, forward and backward, on the same seeded random inputs.
// Tolerances are normalized errors justified in parity_util.hpp; each case names its shape so a
// failure report says which one. Layer-level parity lives in test_cuda_parity_layers.cpp.
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

// ---- convolution --------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  Shape x;  // (N, C, H, W)
  int64_t filters;
  ConvParams p;
};

std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.name; }

class CudaParityConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CudaParityConv, ForwardBackwardDataBackwardFilter) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const ConvCase& c = GetParam();
  const ConvParams& p = c.p;
  Shape ws{c.filters, c.x.c() / p.groups, p.kernel_h, p.kernel_w};
  Shape ys{c.x.n(), c.filters, conv_output_dim(c.x.h(), p.kernel_h, p.stride_h, p.pad_h, p.dilation_h),
           conv_output_dim(c.x.w(), p.kernel_w, p.stride_w, p.pad_w, p.dilation_w)};
  Twin x = twin_uniform(c.x, 61), w = twin_uniform(ws, 62), dy = twin_uniform(ys, 63);
  Twin y = twin_output(ys), dx = twin_output(c.x), dw = twin_output(ws);
  // Twice: the first call measures algorithms (and writes y during the search), the second runs
  // the cached plan; both must give the right answer.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first call (algorithm search)" : "second call (cached plan)");
    cpu_backend().conv_forward(p, x.cpu, w.cpu, y.cpu);
    gpu_backend().conv_forward(p, x.gpu, w.gpu, y.gpu);
    expect_twin(c.name + " conv_forward y", y, kTolConv);
    cpu_backend().conv_backward_data(p, w.cpu, dy.cpu, dx.cpu);
    gpu_backend().conv_backward_data(p, w.gpu, dy.gpu, dx.gpu);
    expect_twin(c.name + " conv_backward_data dx", dx, kTolConv);
    cpu_backend().conv_backward_filter(p, x.cpu, dy.cpu, dw.cpu);
    gpu_backend().conv_backward_filter(p, x.gpu, dy.gpu, dw.gpu);
    expect_twin(c.name + " conv_backward_filter dw", dw, kTolConv);
  }
#if CNNSCALE_HAVE_CUDA
  // The plan exists, every direction was measured, and TF32 stayed off.
  auto* cuda = dynamic_cast<CudaBackend*>(&gpu_backend());
  ASSERT_NE(cuda, nullptr);
  const ConvPlan* plan = cuda->find_conv_plan(p, c.x, ws);
  ASSERT_NE(plan, nullptr);
  for (const ConvAlgoChoice* a : {&plan->fwd, &plan->bwd_data, &plan->bwd_filter}) {
    EXPECT_GE(a->algo, 0);
    EXPECT_EQ(a->math, CUDNN_FMA_MATH);
    EXPECT_LE(a->workspace_bytes, cuda->workspace_bytes());
  }
  if (parity_verbose())
    std::printf("[parity] %s algorithms: fwd %d (%zu B) bwd_data %d (%zu B) bwd_filter %d (%zu B)\n", c.name.c_str(),
                plan->fwd.algo, plan->fwd.workspace_bytes, plan->bwd_data.algo, plan->bwd_data.workspace_bytes,
                plan->bwd_filter.algo, plan->bwd_filter.workspace_bytes);
#endif
}

ConvParams conv(int kh, int kw, int sh, int sw, int ph, int pw, int dil, int groups) {
  return ConvParams{kh, kw, sh, sw, ph, pw, dil, dil, groups};
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaParityConv,
    ::testing::Values(ConvCase{"k3_pad1", {2, 8, 13, 13}, 16, conv(3, 3, 1, 1, 1, 1, 1, 1)},
                      ConvCase{"k3_stride2_pad1_odd", {2, 6, 15, 17}, 8, conv(3, 3, 2, 2, 1, 1, 1, 1)},
                      ConvCase{"k5_pad2_groups2_caffenet_conv2", {2, 8, 11, 11}, 12, conv(5, 5, 1, 1, 2, 2, 1, 2)},
                      ConvCase{"k3_depthwise", {2, 8, 9, 9}, 8, conv(3, 3, 1, 1, 1, 1, 1, 8)},
                      ConvCase{"k1_pointwise", {2, 16, 7, 7}, 24, conv(1, 1, 1, 1, 0, 0, 1, 1)},
                      ConvCase{"k1_stride2", {2, 16, 8, 8}, 8, conv(1, 1, 2, 2, 0, 0, 1, 1)},
                      ConvCase{"k7_stride2_pad3_resnet_stem", {2, 3, 32, 32}, 16, conv(7, 7, 2, 2, 3, 3, 1, 1)},
                      ConvCase{"k11_stride4_caffenet_conv1", {2, 3, 67, 67}, 16, conv(11, 11, 4, 4, 0, 0, 1, 1)},
                      ConvCase{"k3_dilation2", {2, 4, 12, 12}, 6, conv(3, 3, 1, 1, 2, 2, 2, 1)},
                      ConvCase{"k5x3_stride2x1_pad2x1", {2, 4, 11, 9}, 6, conv(5, 3, 2, 1, 2, 1, 1, 1)},
                      ConvCase{"k3_caffenet_conv3_channels", {1, 256, 13, 13}, 32, conv(3, 3, 1, 1, 1, 1, 1, 1)}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// ---- channel padding of 16-bit channels-last convolutions ----------------------------------------
// x and w whose C is not a multiple of 8 run on zero-padded copies (always, never, or as the search
// measures): every mode and direction must give the CPU's answer on the same 16-bit values, and
// the padded copies must really be used when asked for.

struct PadCase {
  std::string name;
  Shape x;
  int64_t filters;
  ConvParams p;
};

// A (case, precision) test's name: "<case>_<precision>".
std::string pad_case_name(const ::testing::TestParamInfo<std::tuple<PadCase, DType>>& info) {
  return std::get<0>(info.param).name + "_" + tensor_core_name(std::get<1>(info.param));
}

#if CNNSCALE_HAVE_CUDA
// The operands of one convolution case on a GPU backend, in `dtype` and `layout`: x, w and dy drawn
// from U(-1, 1) (seeds seed, seed + 1, seed + 2), outputs y, dx, dw; and on the CPU the same values
// in f32 NCHW (widening is exact) with the reference outputs of all three directions.
struct ConvTwins {
  Shape ws, ys;
  Tensor x, w, dy, y, dx, dw;
  Tensor xc, wc, dyc, yc, dxc, dwc;
};

ConvTwins make_conv_twins(CudaBackend& g, const PadCase& c, DType dtype, Layout layout, uint64_t seed) {
  const ConvParams& p = c.p;
  Backend& cpu = cpu_backend();
  ConvTwins t;
  t.ws = Shape{c.filters, c.x.c() / p.groups, p.kernel_h, p.kernel_w};
  t.ys = Shape{c.x.n(), c.filters, conv_output_dim(c.x.h(), p.kernel_h, p.stride_h, p.pad_h, p.dilation_h),
               conv_output_dim(c.x.w(), p.kernel_w, p.stride_w, p.pad_w, p.dilation_w)};
  auto operand = [&](const Shape& s, uint64_t sd, Tensor& on_cpu) {
    Tensor gt = g.alloc(s, dtype).as_layout(layout);
    fill_uniform(g, gt, sd, -1.0f, 1.0f);
    on_cpu = cpu.alloc(s);
    from_host(cpu, on_cpu, to_host(g, gt));
    return gt;
  };
  t.x = operand(c.x, seed, t.xc);
  t.w = operand(t.ws, seed + 1, t.wc);
  t.dy = operand(t.ys, seed + 2, t.dyc);
  t.y = g.alloc(t.ys, dtype).as_layout(layout);
  t.dx = g.alloc(c.x, dtype).as_layout(layout);
  t.dw = g.alloc(t.ws, dtype).as_layout(layout);
  t.yc = cpu.alloc(t.ys);
  t.dxc = cpu.alloc(c.x);
  t.dwc = cpu.alloc(t.ws);
  cpu.conv_forward(p, t.xc, t.wc, t.yc);
  cpu.conv_backward_data(p, t.wc, t.dyc, t.dxc);
  cpu.conv_backward_filter(p, t.xc, t.dyc, t.dwc);
  return t;
}

// A bias for case c on the GPU, a channels-last GPU output for conv_forward_bias_relu, and the
// CPU's max(0, conv(x, w) + bias) with the same bias values, from the twins' CPU forward.
struct BiasReluTwins {
  Tensor bias, fused, fused_c;
};

BiasReluTwins make_bias_relu_twins(CudaBackend& g, const PadCase& c, const ConvTwins& t, DType dtype,
                                   uint64_t seed) {
  Backend& cpu = cpu_backend();
  BiasReluTwins b;
  b.bias = g.alloc(Shape{c.filters}, dtype);
  fill_uniform(g, b.bias, seed, -0.5f, 0.5f);
  Tensor bias_c = cpu.alloc(Shape{c.filters});
  from_host(cpu, bias_c, to_host(g, b.bias));
  b.fused_c = cpu.alloc(t.ys);
  cpu.copy(t.yc, b.fused_c);
  cpu.bias_add(bias_c, b.fused_c);
  cpu.relu_forward(b.fused_c, b.fused_c);
  b.fused = g.alloc(t.ys, dtype).as_layout(Layout::NHWC);
  return b;
}

// The forward, the forward with bias and ReLU, the data gradient (with_data) and the filter
// gradient of case c on `g`, twice (the call that decides a form, then the planned one), each
// output filled with 9 first so that one left unwritten shows, every output against the CPU's.
void expect_directions_match_cpu(CudaBackend& g, const PadCase& c, const ConvTwins& t, const BiasReluTwins& b,
                                 double tol, bool with_data) {
  Backend& cpu = cpu_backend();
  const ConvParams& p = c.p;
  for (int round = 0; round < 2; ++round) {
    for (const Tensor* out : {&t.y, &b.fused, &t.dx, &t.dw}) g.fill(*out, 9.0f);
    g.conv_forward(p, t.x, t.w, t.y);
    g.conv_forward_bias_relu(p, t.x, t.w, b.bias, b.fused);
    if (with_data) g.conv_backward_data(p, t.w, t.dy, t.dx);
    g.conv_backward_filter(p, t.x, t.dy, t.dw);
    expect_parity(c.name + " y", to_host(g, t.y), to_host(cpu, t.yc), tol);
    expect_parity(c.name + " bias relu", to_host(g, b.fused), to_host(cpu, b.fused_c), tol);
    if (with_data) expect_parity(c.name + " dx", to_host(g, t.dx), to_host(cpu, t.dxc), tol);
    expect_parity(c.name + " dw", to_host(g, t.dw), to_host(cpu, t.dwc), tol);
  }
}
// The filter gradient reads the lowered input its forward left behind (CudaBackend::
// input_lowerings counts the im2col passes) only for the buffer that forward lowered: after a
// forward of another x, the filter gradient of the first x lowers it again, and matches the CPU
// both times. The negative control: the filter gradient from the other x, what a stale lowering
// would give, is far outside the tolerance, so the checks tell the two apart.
void expect_filter_gradient_reuses_forward_lowering(CudaBackend& g, const PadCase& c, DType dtype) {
  const ConvParams& p = c.p;
  const double tol = tol_tensor_core_dot(dtype);
  const ConvTwins a = make_conv_twins(g, c, dtype, Layout::NHWC, 171);
  const ConvTwins b = make_conv_twins(g, c, dtype, Layout::NHWC, 181);
  g.conv_forward(p, a.x, a.w, a.y);
  const int64_t after_forward = g.input_lowerings();
  g.conv_backward_filter(p, a.x, a.dy, a.dw);
  EXPECT_EQ(g.input_lowerings(), after_forward) << "the filter gradient lowered x again";
  expect_parity(c.name + " dw after its forward", to_host(g, a.dw), to_host(cpu_backend(), a.dwc), tol);
  g.conv_forward(p, b.x, b.w, b.y);  // the kept slot now holds b.x's lowering
  g.fill(a.dw, 9.0f);
  const int64_t before = g.input_lowerings();
  g.conv_backward_filter(p, a.x, a.dy, a.dw);
  EXPECT_EQ(g.input_lowerings(), before + 1) << "a.x was not lowered again";
  expect_parity(c.name + " dw after another x's forward", to_host(g, a.dw), to_host(cpu_backend(), a.dwc), tol);
  g.conv_backward_filter(p, b.x, a.dy, b.dw);
  EXPECT_GT(parity_error(to_host(g, b.dw), to_host(cpu_backend(), a.dwc)).normalized, 10 * tol);
}
#endif

class CudaConvChannelPadding : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvChannelPadding, EveryModeMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  const bool tf32 = dtype == DType::F32;
  const double tol = tol_tensor_core_dot(dtype);
  const int64_t quantum = 16 / static_cast<int64_t>(dtype_size(dtype));  // channels of a 16-byte pixel
  for (ConvChannelPadding mode :
       {ConvChannelPadding::Always, ConvChannelPadding::Never, ConvChannelPadding::Measured}) {
    const char* mode_name = mode == ConvChannelPadding::Always ? "always" : mode == ConvChannelPadding::Never ? "never"
                                                                                                               : "measured";
    SCOPED_TRACE(mode_name);
    CudaBackendOptions options;
    options.channel_padding = mode;
    options.width_lowering = ConvWidthLowering::Never;  // which would run instead where it times faster
    options.allow_tf32 = tf32;
    CudaBackend g(0, options);
    Backend& cpu = cpu_backend();
    // 16-bit or TF32 channels-last operands on the GPU; the CPU gets their exact values in fp32 NCHW.
    const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, 81);
    const Tensor &x = t.x, &w = t.w, &dy = t.dy, &y = t.y, &dx = t.dx, &dw = t.dw;
    const Tensor &yc = t.yc, &dxc = t.dxc, &dwc = t.dwc;
    const Shape& ws = t.ws;
    for (int round = 0; round < 2; ++round) {  // the searching call, then the planned one
      g.fill(dx, 9.0f);  // a padded path that forgot to copy back would leave this
      g.fill(dw, 9.0f);
      g.conv_forward(p, x, w, y);
      g.conv_backward_data(p, w, dy, dx);
      g.conv_backward_filter(p, x, dy, dw);
      expect_parity(c.name + " " + mode_name + " y", to_host(g, y), to_host(cpu, yc), tol);
      expect_parity(c.name + " " + mode_name + " dx", to_host(g, dx), to_host(cpu, dxc), tol);
      expect_parity(c.name + " " + mode_name + " dw", to_host(g, dw), to_host(cpu, dwc), tol);
    }
    const ConvPlan* plan = g.find_conv_plan(p, c.x, ws, dtype, Layout::NHWC);
    ASSERT_NE(plan, nullptr);
    if (mode == ConvChannelPadding::Never || c.x.c() % quantum == 0) {  // nothing to pad
      EXPECT_EQ(plan->padded, nullptr);
      continue;
    }
    ASSERT_NE(plan->padded, nullptr);
    EXPECT_EQ(plan->padded->channels % quantum, 0);
    EXPECT_GT(plan->padded->channels, c.x.c());
    if (mode == ConvChannelPadding::Always) {
      EXPECT_TRUE(plan->fwd_padded && plan->bwd_data_padded && plan->bwd_filter_padded);
    }
    if (parity_verbose())
      std::printf("[parity] %s %s measured: padded fwd %d bwd_data %d bwd_filter %d\n", c.name.c_str(),
                  dtype_name(dtype).c_str(), plan->fwd_padded, plan->bwd_data_padded, plan->bwd_filter_padded);
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvChannelPadding,
    ::testing::Combine(::testing::Values(PadCase{"gait_conv1_c50", {2, 50, 14, 14}, 16, conv(7, 7, 1, 1, 0, 0, 1, 1)},
                                         PadCase{"rgb_stem_c3", {2, 3, 32, 32}, 16, conv(7, 7, 2, 2, 3, 3, 1, 1)},
                                         PadCase{"c12_k3_pad1", {2, 12, 9, 9}, 8, conv(3, 3, 1, 1, 1, 1, 1, 1)}),
                       ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

// ---- lowered convolution (im2col + one cuBLASLt GEMM) ------------------------------------------

// The lowered forward (plain, and with bias and ReLU in the GEMM epilogue) and filter gradient
// against the CPU, forced on (ConvLowering::Always) whatever the timing would pick here. Their
// sums are the same dot products as cuDNN's, accumulated in fp32 and rounded once to the
// precision, so they take the same tolerance. Cases: CaffeNet's conv1 form (3 channels, 11x11,
// stride 4: a lowered row of 363, padded to 368), padding and dilation (field 12*3*3 = 108,
// padded to 112), and a field that is whole 16-byte rows already (8*3*3 = 72: filters as a view).
class CudaConvLowered : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvLowered, ForwardBiasReluAndFilterGradientMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  const double tol = tol_tensor_core_dot(dtype);
  CudaBackendOptions options;
  options.conv_lowering = ConvLowering::Always;
  options.allow_tf32 = dtype == DType::F32;
  CudaBackend g(0, options);
  const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, 101);
  expect_directions_match_cpu(g, c, t, make_bias_relu_twins(g, c, t, dtype, 7), tol, /*with_data=*/false);
  const ConvPlan* plan = g.find_conv_plan(p, c.x, t.ws, dtype, Layout::NHWC);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->fwd_lowered, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->fwd_bias_relu_lowered, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->bwd_filter_lowered, ConvPlan::Choice::Yes);
  EXPECT_EQ(g.conv_implementation({p, c.x, t.ws, dtype, Layout::NHWC, /*bias_relu=*/true}),
            "fwd lowered: im2col + cuBLASLt GEMM; wgrad lowered: im2col + cuBLASLt GEMM");
#endif
}

TEST_P(CudaConvLowered, FilterGradientReusesOnlyItsOwnForwardsLowering) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  CudaBackendOptions options;
  options.conv_lowering = ConvLowering::Always;
  options.allow_tf32 = dtype == DType::F32;
  CudaBackend g(0, options);
  expect_filter_gradient_reuses_forward_lowering(g, c, dtype);
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvLowered,
    ::testing::Combine(::testing::Values(PadCase{"caffenet_conv1", {2, 3, 35, 35}, 16, conv(11, 11, 4, 4, 0, 0, 1, 1)},
                                         PadCase{"c12_k3_pad2_dil2", {2, 12, 11, 11}, 8, conv(3, 3, 1, 1, 2, 2, 2, 1)},
                                         PadCase{"c8_k3_whole_rows", {3, 8, 9, 9}, 24, conv(3, 3, 2, 2, 1, 1, 1, 1)}),
                       ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

#if CNNSCALE_HAVE_CUDA
// Peak memory of every direction of a case (expect_directions_match_cpu) on a backend that never
// tries one convolution form and on one that times it (measured), and whether it was chosen.
struct TrialPeaks {
  int64_t never = 0, measured = 0;
  bool chosen = false;
};

// set_form(options, measured) turns the form under test off or to measured; every other form, the
// channel padding and the workspace are off (every algorithm then needs none), so nothing else
// differs between the two backends. inspect(plan, measured, twins) checks the case's plan after
// the directions ran and says whether some direction chose the form.
template <typename SetForm, typename Inspect>
TrialPeaks measured_trial_peaks(const PadCase& c, DType dtype, uint64_t seed, SetForm&& set_form, Inspect&& inspect) {
  const double tol = tol_tensor_core_dot(dtype);
  TrialPeaks peaks;
  for (bool measured : {false, true}) {
    SCOPED_TRACE(measured ? "measured" : "never");
    CudaBackendOptions options;
    options.channels_first = ConvChannelsFirst::Never;
    options.width_lowering = ConvWidthLowering::Never;
    options.conv_lowering = ConvLowering::Never;
    options.channel_padding = ConvChannelPadding::Never;
    options.max_workspace_bytes = 0;
    options.allow_tf32 = dtype == DType::F32;
    set_form(options, measured);
    CudaBackend g(0, options);
    const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, seed);
    const BiasReluTwins b = make_bias_relu_twins(g, c, t, dtype, seed + 1);
    g.reset_peak_memory();
    expect_directions_match_cpu(g, c, t, b, tol, /*with_data=*/true);
    g.synchronize();
    (measured ? peaks.measured : peaks.never) = g.memory_stats().peak_bytes;
    const ConvPlan* plan = g.find_conv_plan(c.p, c.x, t.ws, dtype, Layout::NHWC);
    EXPECT_NE(plan, nullptr);
    if (!plan) continue;
    const bool chosen = inspect(*plan, measured, t);
    peaks.chosen = peaks.chosen || (measured && chosen);
  }
  if (parity_verbose())
    std::printf("[parity] %s %s: form %s; peak %lld never, %lld measured\n", c.name.c_str(),
                dtype_name(dtype).c_str(), peaks.chosen ? "chosen" : "not chosen", static_cast<long long>(peaks.never),
                static_cast<long long>(peaks.measured));
  return peaks;
}

// Whether each of `decisions` of `plan` was made (measured), and any of them is Yes.
bool decided_any(const ConvPlan& plan, std::initializer_list<ConvPlan::Choice ConvPlan::*> decisions) {
  bool yes = false;
  for (ConvPlan::Choice ConvPlan::*d : decisions) {
    EXPECT_NE(plan.*d, ConvPlan::Choice::Unsearched);
    yes = yes || plan.*d == ConvPlan::Choice::Yes;
  }
  return yes;
}

// What a kept staging slot of `s` in `dtype` holds: whole floats, (bytes + 3) / 4 of them.
int64_t staging_bytes(const Shape& s, DType dtype) {
  return (s.numel() * static_cast<int64_t>(dtype_size(dtype)) + 3) / 4 * 4;
}
#endif

// ---- channels-first form of a channels-last convolution -------------------------------------------

// Every direction of a first convolution (input channels not filling 16-byte pixels) forced onto
// its channels-first form (ConvChannelsFirst::Always): NCHW copies of the operands, cuDNN's NCHW
// algorithms, the result reordered back. The reorders are exact and the sums the same dot
// products as the channels-last form's, so the same tolerance holds. dx and dw are filled first
// so that a result not copied back shows.
class CudaConvChannelsFirst : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvChannelsFirst, EveryDirectionMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  const double tol = tol_tensor_core_dot(dtype);
  CudaBackendOptions options;
  options.channels_first = ConvChannelsFirst::Always;
  // Else the lowered or width-lowered form may be timed faster and run.
  options.conv_lowering = ConvLowering::Never;
  options.width_lowering = ConvWidthLowering::Never;
  options.allow_tf32 = dtype == DType::F32;
  CudaBackend g(0, options);
  const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, 121);
  expect_directions_match_cpu(g, c, t, make_bias_relu_twins(g, c, t, dtype, 9), tol, /*with_data=*/true);
  const ConvPlan* plan = g.find_conv_plan(p, c.x, t.ws, dtype, Layout::NHWC);
  ASSERT_NE(plan, nullptr);
  ASSERT_NE(plan->channels_first, nullptr);
  EXPECT_EQ(plan->channels_first->layout, Layout::NCHW);
  EXPECT_EQ(plan->fwd_channels_first, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->fwd_bias_relu_channels_first, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->bwd_data_channels_first, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->bwd_filter_channels_first, ConvPlan::Choice::Yes);
  const std::string how = g.conv_implementation({p, c.x, t.ws, dtype, Layout::NHWC, /*bias_relu=*/true});
  for (const char* direction : {"fwd ", "; dgrad ", "; wgrad "})
    EXPECT_NE(how.find(std::string(direction) + "channels-first copies: cuDNN "), std::string::npos) << how;
  EXPECT_NE(how.find(" + bias, ReLU; dgrad"), std::string::npos) << how;
  // Whole 16-byte pixels: no channels-first plan (the form is for first convolutions only).
  const int64_t quantum = 16 / static_cast<int64_t>(dtype_size(dtype));
  const PadCase whole{"whole", {2, quantum, 9, 9}, 8, conv(3, 3, 1, 1, 1, 1, 1, 1)};
  const ConvTwins tw = make_conv_twins(g, whole, dtype, Layout::NHWC, 131);
  g.conv_forward(whole.p, tw.x, tw.w, tw.y);
  const ConvPlan* whole_plan = g.find_conv_plan(whole.p, whole.x, tw.ws, dtype, Layout::NHWC);
  ASSERT_NE(whole_plan, nullptr);
  EXPECT_EQ(whole_plan->channels_first, nullptr);
#endif
}

// Measured, the channels-first form is timed against the channels-last one at each direction's
// first call, on transient buffers: whichever wins, the results match the CPU, and the memory held
// beyond a backend that never tries the form is exactly the three kept staging slots (x, w, y)
// where some direction chose it, and nothing where none did.
TEST_P(CudaConvChannelsFirst, MeasuredTrialKeepsOnlyWhatTheChosenFormHolds) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  Shape ws, ys;
  const TrialPeaks peaks = measured_trial_peaks(
      c, dtype, 141, [](CudaBackendOptions& o, bool measured) {
        o.channels_first = measured ? ConvChannelsFirst::Measured : ConvChannelsFirst::Never;
      },
      [&](const ConvPlan& plan, bool measured, const ConvTwins& t) {
        ws = t.ws;
        ys = t.ys;
        if (!measured) {
          EXPECT_EQ(plan.channels_first, nullptr);
          return false;
        }
        EXPECT_NE(plan.channels_first, nullptr);
        return decided_any(plan, {&ConvPlan::fwd_channels_first, &ConvPlan::fwd_bias_relu_channels_first,
                                  &ConvPlan::bwd_data_channels_first, &ConvPlan::bwd_filter_channels_first});
      });
  const int64_t slots = staging_bytes(c.x, dtype) + staging_bytes(ws, dtype) + staging_bytes(ys, dtype);
  EXPECT_EQ(peaks.measured - peaks.never, peaks.chosen ? slots : 0);
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvChannelsFirst,
    ::testing::Combine(::testing::Values(PadCase{"gait_conv1_c50", {2, 50, 14, 14}, 16, conv(7, 7, 1, 1, 0, 0, 1, 1)},
                                         PadCase{"rgb_stem_c3", {2, 3, 32, 32}, 16, conv(7, 7, 2, 2, 3, 3, 1, 1)}),
                       ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

// ---- width-lowered convolution (an (R x 1) convolution over S*C channels) -------------------------

// The width-lowered forward (plain, and with bias and ReLU) and filter gradient of first
// convolutions against the CPU, forced on (ConvWidthLowering::Always) whatever the timing would
// pick here; the data gradient runs on the other forms beside them. Their sums are the
// convolution's own products (and zeros), accumulated in fp32 and rounded once to the precision,
// as cuDNN's are, so they take the same tolerance. Cases: the gait nets' conv1 form (50 channels,
// 7x7: 350 lowered channels, padded to 352), a ResNet stem (3 channels, 7x7, stride 2, padding 3:
// 21 -> 24), CaffeNet's conv1 (11x11, stride 4: 33 -> 40) and a rectangular kernel with column
// stride, padding and dilation (5 columns of 5 channels: 25 -> 32 in 16 bits, 28 in f32).
class CudaConvWidthLowered : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvWidthLowered, ForwardBiasReluAndFilterGradientMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  const double tol = tol_tensor_core_dot(dtype);
  CudaBackendOptions options;
  options.width_lowering = ConvWidthLowering::Always;
  options.conv_lowering = ConvLowering::Never;  // else the lowered form, decided first, may run
  options.allow_tf32 = dtype == DType::F32;
  CudaBackend g(0, options);
  const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, 151);
  expect_directions_match_cpu(g, c, t, make_bias_relu_twins(g, c, t, dtype, 13), tol, /*with_data=*/true);
  const ConvPlan* plan = g.find_conv_plan(p, c.x, t.ws, dtype, Layout::NHWC);
  ASSERT_NE(plan, nullptr);
  ASSERT_NE(plan->width_lowered, nullptr);
  const int64_t quantum = 16 / static_cast<int64_t>(dtype_size(dtype));
  EXPECT_EQ(plan->width_field, c.x.c() * p.kernel_w);
  EXPECT_EQ(plan->width_lowered->channels % quantum, 0);
  EXPECT_LT(plan->width_lowered->channels - plan->width_field, quantum);
  EXPECT_EQ(plan->width_lowered->params.kernel_w, 1);
  EXPECT_EQ(plan->width_lowered->y_shape, plan->y_shape);
  EXPECT_EQ(plan->fwd_width_lowered, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->fwd_bias_relu_width_lowered, ConvPlan::Choice::Yes);
  EXPECT_EQ(plan->bwd_filter_width_lowered, ConvPlan::Choice::Yes);
  // What `cnnscale time` shows for it: the form of each direction, then the (R x 1) plan's choice.
  const std::string how = g.conv_implementation({p, c.x, t.ws, dtype, Layout::NHWC, /*bias_relu=*/false});
  const std::string form = fmt::format("width-lowered ({}x1 over {} channels): cuDNN ", p.kernel_h,
                                       plan->width_lowered->channels);
  EXPECT_EQ(how.rfind("fwd " + form, 0), 0u) << how;
  EXPECT_NE(how.find("; dgrad "), std::string::npos) << how;
  EXPECT_NE(how.find("; wgrad " + form), std::string::npos) << how;
#endif
}

TEST_P(CudaConvWidthLowered, FilterGradientReusesOnlyItsOwnForwardsLowering) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  CudaBackendOptions options;
  options.width_lowering = ConvWidthLowering::Always;
  options.conv_lowering = ConvLowering::Never;
  options.allow_tf32 = dtype == DType::F32;
  CudaBackend g(0, options);
  expect_filter_gradient_reuses_forward_lowering(g, c, dtype);
#endif
}

// Measured, the width-lowered form is timed against the other forms at each direction's first
// call, its copies on transient buffers: whichever wins, the results match the CPU, and the memory
// held beyond a backend that never tries the form is exactly the two kept staging slots (the
// lowered input and filter) where some direction chose it, and nothing where none did.
TEST_P(CudaConvWidthLowered, MeasuredTrialKeepsOnlyWhatTheChosenFormHolds) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  Shape lowered_x, lowered_w;
  const TrialPeaks peaks = measured_trial_peaks(
      c, dtype, 161, [](CudaBackendOptions& o, bool measured) {
        o.width_lowering = measured ? ConvWidthLowering::Measured : ConvWidthLowering::Never;
      },
      [&](const ConvPlan& plan, bool measured, const ConvTwins&) {
        if (!measured) {
          EXPECT_EQ(plan.width_lowered, nullptr);
          return false;
        }
        EXPECT_NE(plan.width_lowered, nullptr);
        if (!plan.width_lowered) return false;
        lowered_x = plan.width_lowered->x_shape;
        lowered_w = plan.width_lowered->w_shape;
        return decided_any(plan, {&ConvPlan::fwd_width_lowered, &ConvPlan::fwd_bias_relu_width_lowered,
                                  &ConvPlan::bwd_filter_width_lowered});
      });
  const int64_t slots = staging_bytes(lowered_x, dtype) + staging_bytes(lowered_w, dtype);
  EXPECT_EQ(peaks.measured - peaks.never, peaks.chosen ? slots : 0);
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvWidthLowered,
    ::testing::Combine(::testing::Values(PadCase{"gait_conv1_c50", {2, 50, 14, 14}, 16, conv(7, 7, 1, 1, 0, 0, 1, 1)},
                                         PadCase{"rgb_stem_c3", {2, 3, 32, 32}, 16, conv(7, 7, 2, 2, 3, 3, 1, 1)},
                                         PadCase{"caffenet_conv1", {2, 3, 35, 35}, 16, conv(11, 11, 4, 4, 0, 0, 1, 1)},
                                         PadCase{"c5_k3x5_s1x2_p2x3_dil2", {2, 5, 11, 12}, 8,
                                                 conv(3, 5, 1, 2, 2, 3, 2, 1)}),
                       ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

// ---- convolution through cuDNN's graph API ----------------------------------------------------

// Every plan the graph API offers for a shape (not only the one a search picks on this machine:
// another GPU or cuDNN may rank them otherwise) computes each direction within the precision's
// tolerance (kTolTf32Dot for TF32), channels-last as the nets run them in every tensor-core precision.
class CudaConvGraphPlans : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvGraphPlans, EveryPlanMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  const bool tf32 = dtype == DType::F32;
  const Layout layout = Layout::NHWC;
  const double tol = tol_tensor_core_dot(dtype);
  CudaBackendOptions options;
  options.allow_tf32 = tf32;
  CudaBackend g(0, options);
  Backend& cpu = cpu_backend();
  const ConvTwins t = make_conv_twins(g, c, dtype, layout, 91);

  constexpr size_t kWorkspace = size_t{256} << 20;
  Tensor workspace = g.alloc(Shape({static_cast<int64_t>(kWorkspace / 4)}), DType::F32);
  struct Direction {
    const char* name;
    cuda::ConvDirection dir;
    const Tensor *out, *ref;
    void *x_role, *w_role, *y_role;  // the operands in ConvGraphPlan::execute's order
  };
  const Direction directions[] = {
      {"forward y", cuda::ConvDirection::Forward, &t.y, &t.yc, t.x.raw(), t.w.raw(), t.y.raw()},
      {"backward data dx", cuda::ConvDirection::BackwardData, &t.dx, &t.dxc, t.dx.raw(), t.w.raw(), t.dy.raw()},
      {"backward filter dw", cuda::ConvDirection::BackwardFilter, &t.dw, &t.dwc, t.x.raw(), t.dw.raw(),
       t.dy.raw()}};
  for (const Direction& d : directions) {
    const cuda::ConvGraphSpec spec = cuda::conv_graph_spec(d.dir, dtype, layout, c.x, t.ws, t.ys, p, tf32);
    const auto plans = cuda::conv_graph_plans(g.cudnn_handle(), spec, kWorkspace, 64);
    EXPECT_FALSE(plans.empty()) << c.name << " " << d.name << ": the graph API offered no plan";
    for (const auto& plan : plans) {
      SCOPED_TRACE(plan->name());
      g.fill(*d.out, 9.0f);  // a plan that wrote nothing would leave this
      ASSERT_EQ(plan->execute(g.cudnn_handle(), d.x_role, d.w_role, d.y_role, workspace.raw()), CUDNN_STATUS_SUCCESS);
      expect_parity(c.name + " " + d.name + " " + plan->name(), to_host(g, *d.out), to_host(cpu, *d.ref), tol);
    }
    if (parity_verbose())
      std::printf("[parity] %s %s %s: %zu graph plans\n", c.name.c_str(), dtype_name(dtype).c_str(), d.name,
                  plans.size());
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvGraphPlans,
    ::testing::Combine(::testing::Values(PadCase{"gait_conv1_c56_k7", {2, 56, 16, 16}, 16,
                                                 conv(7, 7, 1, 1, 0, 0, 1, 1)},
                                         PadCase{"k3_pad1_c64", {2, 64, 10, 10}, 64, conv(3, 3, 1, 1, 1, 1, 1, 1)},
                                         PadCase{"k3_stride2_pad1", {2, 32, 15, 15}, 48, conv(3, 3, 2, 2, 1, 1, 1, 1)},
                                         PadCase{"k5_pad2_groups2", {2, 32, 11, 11}, 64, conv(5, 5, 1, 1, 2, 2, 1, 2)},
                                         PadCase{"k1_stride2", {2, 64, 8, 8}, 32, conv(1, 1, 2, 2, 0, 0, 1, 1)}),
                       ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

// The residual forward y = max(0, conv(x, w) + bias + z) and the bias-only y = conv(x, w) + bias:
// every graph plan the API offers for each, and conv_forward_residual and conv_forward_bias themselves (its fused plan
// or the ops apart, twice: the searching call and the planned one) against the CPU's ops on the same values,
// channels-last in every tensor-core precision. The addend and bias have the scale of conv's outputs, so neither term
// is negligible and the ReLU cuts about half; a plan that dropped the addend misses by O(1) (the negative control).
class CudaConvFusedEpilogues : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvFusedEpilogues, EveryPlanAndTheOpMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  const bool tf32 = dtype == DType::F32;
  const double tol = tol_tensor_core_dot(dtype);
  CudaBackendOptions options;
  options.allow_tf32 = tf32;
  CudaBackend g(0, options);
  Backend& cpu = cpu_backend();
  const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, 97);
  const BiasReluTwins b = make_bias_relu_twins(g, c, t, dtype, 98);
  // The addend, on both sides, and the CPU reference with it.
  Tensor z = g.alloc(t.ys, dtype).as_layout(Layout::NHWC);
  const float spread = static_cast<float>(std::sqrt(static_cast<double>(t.ws.numel() / c.filters) / 3.0));
  fill_uniform(g, z, 99, -spread, spread);
  Tensor zc = cpu.alloc(t.ys), bias_c = cpu.alloc(Shape{c.filters}), ref = cpu.alloc(t.ys), unsummed = cpu.alloc(t.ys);
  from_host(cpu, zc, to_host(g, z));
  from_host(cpu, bias_c, to_host(g, b.bias));
  cpu.conv_forward_residual(p, t.xc, t.wc, bias_c, zc, ref);
  cpu.conv_forward_bias_relu(p, t.xc, t.wc, bias_c, unsummed);
  const std::vector<float> want = to_host(cpu, ref);

  constexpr size_t kWorkspace = size_t{256} << 20;
  Tensor workspace = g.alloc(Shape({static_cast<int64_t>(kWorkspace / 4)}), DType::F32);
  const cuda::ConvGraphSpec spec = cuda::conv_residual_graph_spec(dtype, Layout::NHWC, c.x, t.ws, t.ys, p, tf32);
  const auto plans = cuda::conv_graph_plans(g.cudnn_handle(), spec, kWorkspace, 64);
  EXPECT_FALSE(plans.empty()) << c.name << ": the graph API offered no residual plan";
  for (const auto& plan : plans) {
    SCOPED_TRACE(plan->name());
    g.fill(b.fused, 9.0f);
    ASSERT_EQ(
        plan->execute(g.cudnn_handle(), t.x.raw(), t.w.raw(), b.fused.raw(), workspace.raw(), b.bias.raw(), z.raw()),
        CUDNN_STATUS_SUCCESS);
    const std::vector<float> got = to_host(g, b.fused);
    expect_parity(c.name + " residual " + plan->name(), got, want, tol);
    EXPECT_GT(parity_error(got, to_host(cpu, unsummed)).normalized, 10 * tol) << "the addend made no difference";
  }
  for (int round = 0; round < 2; ++round) {
    g.fill(b.fused, 9.0f);
    g.conv_forward_residual(p, t.x, t.w, b.bias, z, b.fused);
    expect_parity(c.name + " conv_forward_residual", to_host(g, b.fused), want, tol);
  }
  // The bias alone (conv_forward_bias): every plan and the op against conv + bias on the CPU; one
  // that applied a ReLU would zero about half the outputs (far outside the tolerance).
  Tensor biased = cpu.alloc(t.ys);
  cpu.conv_forward_bias(p, t.xc, t.wc, bias_c, biased);
  const std::vector<float> want_bias = to_host(cpu, biased);
  const auto bias_plans = cuda::conv_graph_plans(
      g.cudnn_handle(), cuda::conv_bias_graph_spec(dtype, Layout::NHWC, c.x, t.ws, t.ys, p, tf32), kWorkspace, 64);
  EXPECT_FALSE(bias_plans.empty()) << c.name << ": the graph API offered no bias plan";
  for (const auto& plan : bias_plans) {
    SCOPED_TRACE(plan->name());
    g.fill(b.fused, 9.0f);
    ASSERT_EQ(plan->execute(g.cudnn_handle(), t.x.raw(), t.w.raw(), b.fused.raw(), workspace.raw(), b.bias.raw()),
              CUDNN_STATUS_SUCCESS);
    expect_parity(c.name + " bias " + plan->name(), to_host(g, b.fused), want_bias, tol);
  }
  for (int round = 0; round < 2; ++round) {
    g.fill(b.fused, 9.0f);
    g.conv_forward_bias(p, t.x, t.w, b.bias, b.fused);
    expect_parity(c.name + " conv_forward_bias", to_host(g, b.fused), want_bias, tol);
  }
  if (parity_verbose())
    std::printf(
        "[parity] %s %s residual: %zu graph plans; %s\n", c.name.c_str(), dtype_name(dtype).c_str(), plans.size(),
        g.conv_implementation({p, c.x, t.ws, dtype, Layout::NHWC, /*bias_relu=*/true, /*addend=*/true}).c_str());
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvFusedEpilogues,
    ::testing::Combine(
        ::testing::Values(PadCase{"k1_c64_bottleneck_expand", {2, 64, 8, 8}, 128, conv(1, 1, 1, 1, 0, 0, 1, 1)},
                          PadCase{"k3_pad1_c64", {2, 64, 10, 10}, 64, conv(3, 3, 1, 1, 1, 1, 1, 1)},
                          PadCase{"k3_pad1_groups2", {2, 32, 9, 9}, 32, conv(3, 3, 1, 1, 1, 1, 1, 2)}),
        ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

// The negative control of kTolTf32Dot: a TF32 convolution (channels-last, as the nets run it) is
// within the tolerance of the right reference and far outside it of a reference with one wrong
// index (the CPU's filters 0 and 1 swapped), so the tolerance still catches what it must.
TEST(CudaConvTf32, ToleranceSeparatesTheRightResultFromAWrongIndex) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  CudaBackendOptions options;
  options.allow_tf32 = true;
  CudaBackend g(0, options);
  Backend& cpu = cpu_backend();
  const PadCase c{"k3_pad1_c64", {2, 64, 10, 10}, 64, conv(3, 3, 1, 1, 1, 1, 1, 1)};
  const ConvTwins t = make_conv_twins(g, c, DType::F32, Layout::NHWC, 93);
  g.conv_forward(c.p, t.x, t.w, t.y);
  const std::vector<float> y = to_host(g, t.y);
  EXPECT_LE(parity_error(y, to_host(cpu, t.yc)).normalized, kTolTf32Dot);
  std::vector<float> w = to_host(cpu, t.wc);
  const auto per_filter = static_cast<std::ptrdiff_t>(w.size() / static_cast<size_t>(c.filters));
  std::swap_ranges(w.begin(), w.begin() + per_filter, w.begin() + per_filter);
  Tensor wrong_w = cpu.alloc(t.ws), wrong_y = cpu.alloc(t.ys);
  from_host(cpu, wrong_w, w);
  cpu.conv_forward(c.p, t.xc, wrong_w, wrong_y);
  EXPECT_GT(parity_error(y, to_host(cpu, wrong_y)).normalized, kTolTf32Dot);
#endif
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
