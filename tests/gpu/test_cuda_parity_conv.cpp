// CUDA vs CPU parity of convolutions, every direction, on the same seeded random inputs: the shapes
// of the study's networks, the channel padding of 16-bit channels-last convolutions and the lowered
// form (im2col + one cuBLASLt GEMM). Tolerances are normalized errors justified in parity_util.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "parity_util.hpp"
#include "conv_parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing {
namespace {

using namespace conv_parity;

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
}  // namespace
}  // namespace cnnscale::testing
