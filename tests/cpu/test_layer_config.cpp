// Layer construction from YAML: every registered type exists, shapes/parameters/costs of the
// study's layers (CaffeNet numbers), and bad parameters fail with a ConfigError naming the key path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.hpp"
#include "common/layer_harness.hpp"

namespace cnnscale::testing {
namespace {

// Every layer file registers itself from a static initialiser; a link that dropped an unreferenced
// layer file (a static library linked without WHOLE_ARCHIVE) would lose its type here.
TEST(LayerConfig, EveryShippedTypeIsRegistered) {
  const auto types = registered_layer_types();
  for (const char* type : {"Convolution", "InnerProduct", "Pooling", "ReLU", "Dropout", "BatchNorm", "LRN", "Eltwise",
                           "Flatten", "Concat", "SoftmaxWithLoss", "Accuracy"})
    EXPECT_NE(std::find(types.begin(), types.end(), type), types.end()) << type;
}

TEST(LayerConfig, RegisteringATypeTwiceIsAnError) {
  const LayerFactory factory = [](LayerConfig c) -> std::unique_ptr<Layer> { return create_layer(std::move(c)); };
  EXPECT_THROW(register_layer("ReLU", factory, {}), RuntimeError);
  register_layer("TestOnce", factory, {});
  EXPECT_THROW(register_layer("TestOnce", factory, {}), RuntimeError);
}

TEST(LayerConfig, CaffeNetConv1Conv2ShapesParamsAndMacs) {
  CpuBackend cpu;
  auto conv1 = make_layer(cpu, "type: Convolution\nnum_output: 96\nkernel: 11\nstride: 4", {Shape{1, 3, 227, 227}});
  EXPECT_EQ(conv1.top_shapes[0], (Shape{1, 96, 55, 55}));
  auto specs = conv1.layer->param_specs();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (Shape{96, 3, 11, 11}));
  EXPECT_EQ(specs[0].fan_in, 3 * 11 * 11);
  EXPECT_EQ(specs[0].fan_out, 96 * 11 * 11);
  EXPECT_EQ(specs[0].filler.type, "xavier");
  EXPECT_EQ(specs[1].shape, (Shape{96}));
  EXPECT_EQ(specs[1].filler.type, "constant");
  EXPECT_EQ(conv1.layer->cost(conv1.bottom_shapes, conv1.top_shapes).forward_macs, 105415200);

  auto conv2 = make_layer(cpu,
                          "type: Convolution\nnum_output: 256\nkernel: 5\npad: 2\ngroup: 2\n"
                          "param: [{lr_mult: 1, decay_mult: 1}, {lr_mult: 2, decay_mult: 0}]",
                          {Shape{1, 96, 27, 27}});
  EXPECT_EQ(conv2.top_shapes[0], (Shape{1, 256, 27, 27}));
  specs = conv2.layer->param_specs();
  EXPECT_EQ(specs[0].shape, (Shape{256, 48, 5, 5}));
  EXPECT_EQ(specs[0].fan_out, 128 * 25);
  EXPECT_FLOAT_EQ(specs[1].lr_mult, 2.0f);
  EXPECT_FLOAT_EQ(specs[1].decay_mult, 0.0f);
  EXPECT_EQ(conv2.layer->cost(conv2.bottom_shapes, conv2.top_shapes).forward_macs, 223948800);
}

TEST(LayerConfig, InnerProductFlattensAndCountsMacs) {
  CpuBackend cpu;
  auto fc6 = make_layer(cpu, "type: InnerProduct\nnum_output: 4096\nweight_filler: {type: gaussian, std: 0.005}",
                        {Shape{2, 256, 6, 6}});
  EXPECT_EQ(fc6.top_shapes[0], (Shape{2, 4096}));
  EXPECT_EQ(fc6.layer->param_specs()[0].shape, (Shape{4096, 9216}));
  EXPECT_EQ(fc6.layer->cost(fc6.bottom_shapes, fc6.top_shapes).forward_macs, 4096 * 9216);
}

TEST(LayerConfig, BatchNormDeclaresParamsAndState) {
  CpuBackend cpu;
  auto bn = make_layer(cpu, "type: BatchNorm", {Shape{2, 8, 4, 4}});
  auto params = bn.layer->param_specs();
  auto state = bn.layer->state_specs();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "scale");
  EXPECT_FLOAT_EQ(params[0].filler.value, 1.0f);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "running_mean");
  EXPECT_FLOAT_EQ(state[1].init, 1.0f);
}

TEST(LayerConfig, SoftmaxLossScratchFollowsBatchChanges) {
  CpuBackend cpu;
  auto h = make_layer(cpu, "type: SoftmaxWithLoss", {Shape{4, 3}, Shape{4}}, 1, {DType::F32, DType::I32});
  h.forward();
  // The net reshapes to a smaller batch (last test batch): the layer must follow the new shapes.
  std::vector<Tensor> bottoms{cpu.alloc({2, 3}), cpu.alloc({2}, DType::I32)};
  from_host(cpu, bottoms[0], {0, 0, 0, 0, 0, 0});
  LayerContext ctx{cpu, Phase::Train, 1, 0};
  h.layer->forward(ctx, bottoms, h.tops);
  EXPECT_NEAR(to_host(cpu, h.tops[0])[0], std::log(3.0), 1e-6);
}

// ---- errors name the key path -------------------------------------------------------------------

void expect_config_error(const std::string& yaml, const std::vector<Shape>& shapes, const std::string& fragment,
                         const std::vector<DType>& dtypes = {}) {
  CpuBackend cpu;
  try {
    make_layer(cpu, yaml, shapes, 1, dtypes);
    ADD_FAILURE() << "no error for:\n" << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' lacks '" << fragment << "'";
    EXPECT_NE(std::string(e.what()).find("test_layer.yaml:"), std::string::npos) << e.what();
  }
}

TEST(LayerConfig, BadParametersNameTheirKey) {
  const std::vector<Shape> image{Shape{1, 6, 8, 8}};
  expect_config_error("type: Convolution\nnum_output: 4\nkernel: 3\ngroup: 4", image, "layers[0].group");
  expect_config_error("type: Convolution\nnum_output: 5\nkernel: 3\ngroup: 2", image, "layers[0].num_output");
  expect_config_error("type: Convolution\nnum_output: 4\nkernel: 9", image, "layers[0].kernel");
  expect_config_error("type: Convolution\nnum_output: 4\nkernal: 3", image, "layers[0].kernal");
  expect_config_error("type: Convolution\nkernel: 3", image, "missing required key 'num_output'");
  expect_config_error("type: Convolution\nnum_output: 4\nkernel: [3, 3, 3]", image, "layers[0].kernel");
  expect_config_error("type: Convolution\nnum_output: 4\nkernel: 3\nweight_filler: {type: bilinear}", image,
                      "layers[0].weight_filler.type");
  expect_config_error("type: Convolution\nnum_output: 4\nkernel: 3\nparam: [{lr_mult: 1}, {lr: 2}]", image,
                      "layers[0].param[1].lr");
  expect_config_error("type: Pooling\npool: stochastic\nkernel: 2", image, "layers[0].pool");
  expect_config_error("type: Pooling\nkernel: 2\nround: nearest", image, "layers[0].round");
  expect_config_error("type: Pooling\nkernel: 2\npad: 2", image, "layers[0].pad");
  expect_config_error("type: Pooling\nglobal_pooling: true\nkernel: 2", image, "layers[0].kernel");
  expect_config_error("type: Dropout\nratio: 1.0", image, "layers[0].ratio");
  expect_config_error("type: LRN\nnorm_region: within_channel", image, "layers[0].norm_region");
  expect_config_error("type: LRN\nlocal_size: 4", image, "layers[0].local_size");
  expect_config_error("type: Eltwise\noperation: prod", {image[0], image[0]}, "layers[0].operation");
  expect_config_error("type: Eltwise\ncoeff: [1, 2, 3]", {image[0], image[0]}, "layers[0].coeff");
  expect_config_error("type: Eltwise", {image[0], Shape{1, 6, 4, 4}}, "(1, 6, 4, 4)");
  expect_config_error("type: Concat\naxis: 2", {image[0], image[0]}, "layers[0].axis");
  expect_config_error("type: Concat", {image[0], Shape{1, 2, 4, 8}}, "(1, 2, 4, 8)");
  expect_config_error("type: BatchNorm\nmomentum: 2", image, "layers[0].momentum");
  expect_config_error("type: Accuracy\ntop_k: 7", {Shape{2, 5}, Shape{2}}, "layers[0].top_k", {DType::F32, DType::I32});
  expect_config_error("type: Accuracy\ntop: [a]\ntop_k: [1, 5]", {Shape{2, 5}, Shape{2}}, "one top per k",
                      {DType::F32, DType::I32});
  expect_config_error("type: SoftmaxWithLoss", {Shape{2, 5}, Shape{3}}, "labels (3)", {DType::F32, DType::I32});
  expect_config_error("type: NoSuchLayer", image, "layers[0].type");
}

}  // namespace
}  // namespace cnnscale::testing
