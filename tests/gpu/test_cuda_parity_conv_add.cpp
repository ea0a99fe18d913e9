// CUDA vs CPU parity of conv_backward_data_add: a blob's later consumer in backward adds its data
// gradient to what the first one wrote (Net::Impl::plan_backward). Channels-last in every
// tensor-core precision, on ResNet block shapes. The first call makes conv_backward_data's choices
// (on the scratch); every call, the first included, then adds in place where the chosen algorithm
// can, through the scratch where not.
// Tolerances are those of parity_util.hpp: the result is stored once (in place) or twice (the
// scratch's gradient, then the sum), within the three stores tol_16bit allows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conv_parity_util.hpp"
#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing {
namespace {

using namespace conv_parity;

class CudaConvAdd : public ::testing::TestWithParam<std::tuple<PadCase, DType>> {};

TEST_P(CudaConvAdd, DataGradientAddsToWhatDxHolds) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  const auto& [c, dtype] = GetParam();
  const ConvParams& p = c.p;
  Backend& cpu = cpu_backend();
  // Timed choices, then cuDNN's heuristic ones (deterministic: legacy algorithms only, every call's
  // bits the same).
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "timed choices");
    CudaBackendOptions options;
    options.allow_tf32 = dtype == DType::F32;
    options.deterministic = deterministic;
    CudaBackend g(0, options);
    const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, 121);
    const Tensor held = g.alloc(c.x, dtype).as_layout(Layout::NHWC);
    const Tensor scratch = g.alloc(c.x, dtype).as_layout(Layout::NHWC);
    fill_uniform(g, held, 131, -1.0f, 1.0f);
    const Tensor expected = cpu.alloc(c.x);
    from_host(cpu, expected, to_host(g, held));
    cpu.axpby(1.0f, t.dxc, 1.0f, expected);
    const double tol = tol_tensor_core_dot(dtype);
    std::vector<float> first;
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE(round == 0 ? "first call (choices made)" : "planned call");
      g.copy(held, t.dx);
      g.fill(scratch, 9.0f);  // what the scratch held must not reach dx
      g.conv_backward_data_add(p, t.w, t.dy, t.dx, scratch);
      const std::vector<float> got = to_host(g, t.dx);
      expect_parity(c.name + " dx += dgrad", got, to_host(cpu, expected), tol);
      // Every call adds the same way, the first included (a resumed run's first step).
      if (round == 0) first = got;
      if (deterministic) EXPECT_EQ(got, first) << "the sum's bits changed between calls";
      const ConvPlan* plan = g.find_conv_plan(p, c.x, t.ws, dtype, Layout::NHWC);
      ASSERT_NE(plan, nullptr);
      EXPECT_NE(plan->bwd_data_adds, ConvPlan::Adds::Never);
      // A legacy algorithm on the operands themselves always adds in place (cuDNN's beta).
      if (!plan->bwd_data.graph && !plan->bwd_data_padded && plan->bwd_data_channels_first == ConvPlan::Choice::No)
        EXPECT_EQ(plan->bwd_data_adds, ConvPlan::Adds::InPlace);
      if (parity_verbose() && round == 2)
        std::printf(
            "[parity] %s %s%s: adds %s (%s)\n", c.name.c_str(), tensor_core_name(dtype).c_str(),
            deterministic ? " deterministic" : "",
            plan->bwd_data_adds == ConvPlan::Adds::InPlace ? "in place" : "through the scratch",
            g.conv_implementation(ConvSignature{p, c.x, t.ws, dtype, Layout::NHWC, false, false, false, true}).c_str());
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConvAdd,
    ::testing::Combine(
        ::testing::Values(PadCase{"bottleneck_conv1_1x1", {4, 64, 14, 14}, 32, conv(1, 1, 1, 1, 0, 0, 1, 1)},
                          PadCase{"basic_conv1_3x3", {4, 32, 14, 14}, 32, conv(3, 3, 1, 1, 1, 1, 1, 1)},
                          PadCase{"downsample_3x3_s2", {4, 32, 14, 14}, 64, conv(3, 3, 2, 2, 1, 1, 1, 1)}),
        ::testing::Values(DType::BF16, DType::F16, DType::F32)),
    pad_case_name);

}  // namespace
}  // namespace cnnscale::testing
