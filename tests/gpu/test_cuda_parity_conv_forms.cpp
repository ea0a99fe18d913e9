// CUDA vs CPU parity of a channels-last convolution's other forms and plans: channels-first,
// width-lowered, cuDNN's graph-API plans and fused epilogues, each against the CPU and, where a
// form's trial is measured, keeping only what the chosen form holds; and the TF32 tolerance's
// separation of the right result from a wrong index.
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

}  // namespace
}  // namespace cnnscale::testing
