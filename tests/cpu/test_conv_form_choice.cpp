// The rule that weighs a convolution's forward and filter gradient together when choosing a lowered
// form (backend/conv_form_choice.hpp). Times are the H100 medians the CUDA backend logged for the
// cases named (bf16, batch 256), so the tests pin the decisions those nets get.
#include <gtest/gtest.h>

#include "backend/conv_form_choice.hpp"

namespace cnnscale {
namespace {

// The gait ResNet's conv1 (7x7 over 50 channels): its forward alone is faster padded (0.928 ms)
// than width-lowered (1.157 ms), its filter gradient about even with the copy (1.415 against
// 1.424 ms); without the copy (0.607 ms) the width-lowered filter gradient takes 0.817 ms, so both
// directions width-lowered (1.974 ms) beat the forward as it runs with its faster filter gradient
// (2.343 ms).
TEST(ConvFormChoice, GaitResNetConv1SwitchesItsForwardToTheWidthLoweredForm) {
  const FormSwitch w = weigh_forward_switch({0.928f, 1.157f, 1.415f, 1.424f, 0.607f});
  EXPECT_NEAR(w.as_is, 0.928 + 1.415, 1e-5);
  EXPECT_NEAR(w.switched, 1.157 + 1.424 - 0.607, 1e-5);
  EXPECT_TRUE(w.switches());
}

// ResNet-34's RGB stem: cuDNN's forward (1.807 ms) and filter gradient (0.918 ms) beat the lowered
// form's (2.392 ms, 2.412 ms with a 1.906 ms copy) even with the copy taken off: the forward stays.
TEST(ConvFormChoice, ResNet34StemKeepsCudnn) {
  const FormSwitch w = weigh_forward_switch({1.807f, 2.392f, 0.918f, 2.412f, 1.906f});
  EXPECT_FALSE(w.switches());
  EXPECT_NEAR(w.as_is, 1.807 + 0.918, 1e-5);
  EXPECT_NEAR(w.switched, 2.392 + (2.412 - 1.906), 1e-5);
}

// A filter gradient faster in the form even with its copy counts at that time on the kept side:
// the switch must beat the form's own filter gradient, not the other one.
TEST(ConvFormChoice, TheKeptSideTakesTheFasterFilterGradient) {
  // Forward 1.0 as it runs, 1.3 in the form; filter gradient 2.0 otherwise, 1.2 in the form with a
  // 0.25 ms copy. Kept: 1.0 + 1.2 = 2.2; switched: 1.3 + 0.95 = 2.25: no switch. Measured against
  // the other filter gradient (3.0) it would wrongly switch.
  const FormSwitch w = weigh_forward_switch({1.0f, 1.3f, 2.0f, 1.2f, 0.25f});
  EXPECT_NEAR(w.as_is, 2.2, 1e-5);
  EXPECT_FALSE(w.switches());
}

// A copy timed longer than the filter gradient measured with it leaves that filter gradient at no
// time, not at a negative one that would pay for a slower forward: 1.5 + 0 against 1.0 + 0.3, where
// 1.5 - 0.4 would have switched.
TEST(ConvFormChoice, ACopyLongerThanItsFilterGradientLeavesNothingNotLess) {
  const FormSwitch w = weigh_forward_switch({1.0f, 1.5f, 0.4f, 0.3f, 0.7f});
  EXPECT_FLOAT_EQ(w.switched, 1.5f);
  EXPECT_FALSE(w.switches());
}

}  // namespace
}  // namespace cnnscale
