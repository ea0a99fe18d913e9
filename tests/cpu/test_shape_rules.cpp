// Output-extent rules shared by both backends: convolution floor division and Caffe's ceil-mode
// pooling, including windows larger than their (padded) input, which must be rejected.
#include <gtest/gtest.h>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "common/layer_harness.hpp"

namespace cnnscale {

TEST(ShapeRules, ConvolutionOutputExtent) {
  EXPECT_EQ(conv_output_dim(227, 11, 4, 0, 1), 55);
  EXPECT_EQ(conv_output_dim(224, 7, 2, 3, 1), 112);
  EXPECT_EQ(conv_output_dim(5, 3, 1, 0, 2), 1);   // dilated extent 5
  EXPECT_EQ(conv_output_dim(11, 11, 4, 0, 1), 1);
  // A window larger than the input: no output (truncating division would wrongly give 1).
  EXPECT_LE(conv_output_dim(8, 11, 4, 0, 1), 0);
  EXPECT_LE(conv_output_dim(4, 7, 2, 0, 1), 0);
}

TEST(ShapeRules, PoolingOutputExtentCeilAndFloor) {
  EXPECT_EQ(pool_output_dim(55, 3, 2, 0, true), 27);
  EXPECT_EQ(pool_output_dim(27, 3, 2, 0, true), 13);
  EXPECT_EQ(pool_output_dim(13, 3, 2, 0, true), 6);
  EXPECT_EQ(pool_output_dim(12, 3, 2, 0, true), 6);   // ceil: partial last window
  EXPECT_EQ(pool_output_dim(12, 3, 2, 0, false), 5);  // floor
  EXPECT_EQ(pool_output_dim(112, 3, 2, 1, false), 56);
  // Caffe: the last window must start inside the image or its left padding.
  EXPECT_EQ(pool_output_dim(4, 2, 2, 1, true), 3);
  EXPECT_EQ(pool_output_dim(2, 3, 1, 0, true), 0);
}

TEST(ShapeRules, ConvolutionLargerThanInputIsAConfigError) {
  CpuBackend cpu;
  try {
    testing::make_layer(cpu, "type: Convolution\nnum_output: 4\nkernel: 11\nstride: 4", {Shape{1, 3, 8, 8}});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layers[0]"), std::string::npos) << e.what();
  }
}

}  // namespace cnnscale
