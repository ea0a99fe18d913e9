// Layer-level CUDA vs CPU parity: every layer type built from the same YAML with the same seed on
// both backends (tests/common/layer_harness), run forward (and backward with the same random top
// gradients), then tops, bottom gradients, parameter gradients and state compared. Covers what the
// op tests cannot: each layer's use of the ops (views, reshapes, bias, flattening, in-layer
// scratch) on device memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/half.hpp"
#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/device_context.hpp"
#endif

namespace cnnscale::testing {
namespace {

struct LayerCase {
  std::string name, yaml;
  std::vector<Shape> bottoms;
  double tol_forward, tol_backward;
  std::vector<DType> dtypes = {};      // default: all f32
  std::vector<int32_t> labels = {};    // for the i32 bottom (index 1), if any
  float input_range = 1.0f;            // f32 bottoms ~ U(-range, range)
  bool backward = true;
  bool test_phase = false;             // also compare a Test-phase forward
};

std::ostream& operator<<(std::ostream& os, const LayerCase& c) { return os << c.name; }

class CudaParityLayer : public ::testing::TestWithParam<LayerCase> {};

void expect_tensors(const std::string& what, const Tensor& gpu, const Tensor& cpu, double tol,
                    Backend& g = gpu_backend()) {
  expect_parity(what, to_host(g, gpu), to_host(cpu_backend(), cpu), tol);
}

TEST_P(CudaParityLayer, ForwardBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const LayerCase& c = GetParam();
  const uint64_t seed = 7;
  LayerHarness hc = make_layer(cpu_backend(), c.yaml, c.bottoms, seed, c.dtypes);
  LayerHarness hg = make_layer(gpu_backend(), c.yaml, c.bottoms, seed, c.dtypes);
  for (size_t i = 0; i < c.bottoms.size(); ++i) {
    if (hc.bottoms[i].dtype() == DType::I32) {
      set_labels(cpu_backend(), hc.bottoms[i], c.labels);
      set_labels(gpu_backend(), hg.bottoms[i], c.labels);
    } else if (c.input_range != 1.0f) {
      fill_uniform(cpu_backend(), hc.bottoms[i], 300 + i, -c.input_range, c.input_range);
      fill_uniform(gpu_backend(), hg.bottoms[i], 300 + i, -c.input_range, c.input_range);
    }
  }
  expect_tensors(c.name + " parameters as initialised", hg.flat_params, hc.flat_params, kTolExact);
  hc.iteration = hg.iteration = 5;

  hc.forward(Phase::Train);
  hg.forward(Phase::Train);
  for (size_t i = 0; i < hc.tops.size(); ++i)
    expect_tensors(c.name + " train top" + std::to_string(i), hg.tops[i], hc.tops[i], c.tol_forward);
  for (size_t i = 0; i < hc.layer->state().size(); ++i)
    expect_tensors(c.name + " state" + std::to_string(i) + " after train forward", hg.layer->state()[i],
                   hc.layer->state()[i], c.tol_forward);

  if (c.backward) {
    for (size_t i = 0; i < hc.top_diffs.size(); ++i) {
      fill_uniform(cpu_backend(), hc.top_diffs[i], 400 + i, -1.0f, 1.0f);
      fill_uniform(gpu_backend(), hg.top_diffs[i], 400 + i, -1.0f, 1.0f);
    }
    // The GPU's outputs for the CPU's backward too: a fused ReLU gates by y's sign, which an output
    // within rounding of 0 may have either way on the two sides (see expect_layer_parity).
    for (size_t i = 0; i < hc.tops.size(); ++i)
      if (hc.tops[i].dtype() != DType::I32)
        from_host(cpu_backend(), hc.tops[i], to_host(gpu_backend(), hg.tops[i]));
    for (size_t i = 0; i < hc.bottom_diffs.size(); ++i)
      if (hc.bottom_diffs[i].defined()) {  // stale values: the layer must overwrite them
        fill_uniform(cpu_backend(), hc.bottom_diffs[i], 500 + i, -9.0f, 9.0f);
        fill_uniform(gpu_backend(), hg.bottom_diffs[i], 500 + i, -9.0f, 9.0f);
      }
    if (hc.flat_grads.numel() > 0) {
      fill_uniform(cpu_backend(), hc.flat_grads, 600, -9.0f, 9.0f);
      fill_uniform(gpu_backend(), hg.flat_grads, 600, -9.0f, 9.0f);
    }
    hc.backward(Phase::Train);
    hg.backward(Phase::Train);
    for (size_t i = 0; i < hc.bottom_diffs.size(); ++i)
      if (hc.bottom_diffs[i].defined())
        expect_tensors(c.name + " bottom" + std::to_string(i) + " diff", hg.bottom_diffs[i], hc.bottom_diffs[i],
                       c.tol_backward);
    for (const Param& p : hc.layer->params()) {
      size_t k = static_cast<size_t>(&p - hc.layer->params().data());
      expect_tensors(c.name + " " + p.spec.name + " diff", hg.layer->params()[k].diff, p.diff, c.tol_backward);
    }
  }

  if (c.test_phase) {
    hc.forward(Phase::Test);
    hg.forward(Phase::Test);
    for (size_t i = 0; i < hc.tops.size(); ++i)
      expect_tensors(c.name + " test top" + std::to_string(i), hg.tops[i], hc.tops[i], c.tol_forward);
  }
}

const std::vector<int32_t> kLabels8 = {3, 0, 9, 9, 1, 5, 2, 7};

std::vector<int32_t> labels_for(int n, int classes) {
  std::vector<int32_t> l;
  for (int i = 0; i < n; ++i) l.push_back((i * 7 + 3) % classes);
  return l;
}

// clang-format off
const std::vector<LayerCase>& layer_cases() {
  static const std::vector<LayerCase> cases{
        LayerCase{"conv_k3_pad1_bias", "type: Convolution\nnum_output: 8\nkernel: 3\npad: 1\n"
                  "bias_filler: {type: gaussian, std: 0.5}", {{2, 4, 9, 9}}, kTolConv, kTolConv},
        LayerCase{"conv_stride2_group2_nobias", "type: Convolution\nnum_output: 6\nkernel: 3\nstride: 2\npad: 1\n"
                  "group: 2\nbias: false", {{2, 4, 11, 11}}, kTolConv, kTolConv},
        LayerCase{"conv_k1", "type: Convolution\nnum_output: 12\nkernel: 1", {{2, 8, 6, 6}}, kTolConv, kTolConv},
        LayerCase{"conv_k3_pad1_bias_relu", "type: Convolution\nnum_output: 16\nkernel: 3\npad: 1\nrelu: true\n"
                  "bias_filler: {type: gaussian, std: 0.5}", {{2, 8, 9, 9}}, kTolConv, kTolConv},
        LayerCase{"conv_k3_relu_nobias", "type: Convolution\nnum_output: 8\nkernel: 3\nrelu: true\nbias: false",
                  {{2, 4, 9, 9}}, kTolConv, kTolConv},
        LayerCase{"conv_caffenet_conv1", "type: Convolution\nnum_output: 16\nkernel: 11\nstride: 4",
                  {{2, 3, 67, 67}}, kTolConv, kTolConv},
        LayerCase{"conv_k7_stride2_pad3", "type: Convolution\nnum_output: 8\nkernel: 7\nstride: 2\npad: 3",
                  {{2, 3, 32, 32}}, kTolConv, kTolConv},
        LayerCase{"inner_product_4d_bottom", "type: InnerProduct\nnum_output: 10\n"
                  "bias_filler: {type: uniform, min: -1, max: 1}", {{4, 3, 5, 5}}, kTolDot, kTolDot},
        LayerCase{"inner_product_nobias", "type: InnerProduct\nnum_output: 7\nbias: false", {{6, 40}}, kTolDot,
                  kTolDot},
        // Bias and ReLU in the matmul's epilogue, the bias gradient in dw's (cuBLASLt, tensor-core precisions).
        LayerCase{"inner_product_bias_relu", "type: InnerProduct\nnum_output: 24\nrelu: true\n"
                  "bias_filler: {type: gaussian, std: 0.5}", {{8, 64}}, kTolDot, kTolDot},
        LayerCase{"inner_product_relu_nobias", "type: InnerProduct\nnum_output: 9\nrelu: true\nbias: false",
                  {{4, 2, 4, 4}}, kTolDot, kTolDot},
        // Batch 1: the forward as cuBLAS GEMV or the matmul, whichever measures faster (--fc-gemv auto).
        LayerCase{"inner_product_batch1_bias_relu", "type: InnerProduct\nnum_output: 40\nrelu: true\n"
                  "bias_filler: {type: gaussian, std: 0.5}", {{1, 200}}, kTolDot, kTolDot},
        LayerCase{"inner_product_batch1_4d_bottom", "type: InnerProduct\nnum_output: 10\nbias: false",
                  {{1, 16, 3, 3}}, kTolDot, kTolDot},
        // A residual addend (second bottom) before the ReLU: conv_forward_residual.
        LayerCase{"conv_k3_residual_relu", "type: Convolution\nnum_output: 8\nkernel: 3\npad: 1\nrelu: true\n"
                  "bias_filler: {type: gaussian, std: 0.5}", {{2, 8, 9, 9}, {2, 8, 9, 9}}, kTolConv, kTolConv},
        LayerCase{"pool_caffenet_max_13to6", "type: Pooling\npool: max\nkernel: 3\nstride: 2", {{2, 4, 13, 13}},
                  kTolExact, kTolElementwise},
        // 16 channels: whole 16-byte packs in every precision (the packed channels-last kernels); 13 -> 6
        // has overlapping windows, 12 -> 6 windows tiling the input (one pass backward).
        LayerCase{"pool_caffenet_max_13to6_packed", "type: Pooling\npool: max\nkernel: 3\nstride: 2",
                  {{2, 16, 13, 13}}, kTolExact, kTolElementwise},
        LayerCase{"pool_gait_max_k2s2_tiling_packed", "type: Pooling\npool: max\nkernel: 2\nstride: 2",
                  {{2, 16, 12, 12}}, kTolExact, kTolElementwise},
        LayerCase{"pool_gait_max_k2s2_floor", "type: Pooling\npool: max\nkernel: 2\nstride: 2\nround: floor",
                  {{2, 8, 11, 11}}, kTolExact, kTolElementwise},
        LayerCase{"pool_resnet_max_k3s2p1", "type: Pooling\npool: max\nkernel: 3\nstride: 2\npad: 1",
                  {{2, 16, 14, 14}}, kTolExact, kTolElementwise},
        LayerCase{"pool_ceil_max_112to56", "type: Pooling\npool: max\nkernel: 3\nstride: 2", {{1, 2, 112, 112}},
                  kTolExact, kTolElementwise},
        LayerCase{"pool_ceil_ave_pad1", "type: Pooling\npool: ave\nkernel: 3\nstride: 2\npad: 1", {{2, 3, 14, 14}},
                  kTolElementwise, kTolElementwise},
        LayerCase{"pool_global_ave", "type: Pooling\npool: ave\nglobal_pooling: true", {{2, 8, 7, 7}},
                  kTolReduction, kTolElementwise},
        LayerCase{"relu", "type: ReLU", {{2, 3, 8, 8}}, kTolExact, kTolExact},
        LayerCase{"dropout", "type: Dropout\nratio: 0.5", {{4, 64}}, kTolElementwise, kTolElementwise, {}, {}, 1.0f,
                  true, true},
        LayerCase{"batchnorm_4d", "type: BatchNorm\nscale_filler: {type: uniform, min: 0.5, max: 1.5}\n"
                  "shift_filler: {type: gaussian, std: 0.5}", {{4, 6, 5, 5}}, kTolReduction, kTolBnBackward, {}, {},
                  2.0f, true, true},
        LayerCase{"batchnorm_2d", "type: BatchNorm\nscale_filler: {type: uniform, min: 0.5, max: 1.5}",
                  {{16, 10}}, kTolReduction, kTolBnBackward, {}, {}, 1.0f, true, true},
        LayerCase{"batchnorm_relu", "type: BatchNorm\nrelu: true\nscale_filler: {type: uniform, min: 0.5, max: 1.5}\n"
                  "shift_filler: {type: gaussian, std: 0.5}", {{4, 8, 5, 5}}, kTolReduction, kTolBnBackward, {}, {},
                  2.0f, true, true},
        LayerCase{"batchnorm_add_relu", "type: BatchNorm\nrelu: true\n"
                  "scale_filler: {type: uniform, min: 0.5, max: 1.5}\nshift_filler: {type: gaussian, std: 0.5}",
                  {{4, 8, 5, 5}, {4, 8, 5, 5}}, kTolReduction, kTolBnBackward, {}, {}, 2.0f, true, true},
        LayerCase{"batchnorm_add_relu_c6_op_by_op", "type: BatchNorm\nrelu: true\n"
                  "scale_filler: {type: uniform, min: 0.5, max: 1.5}\nshift_filler: {type: gaussian, std: 0.5}",
                  {{4, 6, 5, 5}, {4, 6, 5, 5}}, kTolReduction, kTolBnBackward, {}, {}, 2.0f, true, true},
        LayerCase{"batchnorm_2d_relu", "type: BatchNorm\nrelu: true\nscale_filler: {type: uniform, min: 0.5, max: 1.5}",
                  {{16, 10}}, kTolReduction, kTolBnBackward, {}, {}, 1.0f, true, true},
        LayerCase{"lrn_caffenet", "type: LRN\nlocal_size: 5\nalpha: 0.0001\nbeta: 0.75", {{2, 16, 6, 6}}, kTolLrn,
                  kTolLrnBackward},
        LayerCase{"lrn_strong", "type: LRN\nlocal_size: 3\nalpha: 1.0\nbeta: 0.75\nk: 2.0", {{2, 6, 3, 3}}, kTolLrn,
                  kTolLrnBackward, {}, {}, 2.0f},
        // CaffeNet's norm1 channel count: 21 pixels' rows per 2048-element tile, the last tile partial
        // (50 rows); and rows wider than a tile, which take the one-thread-per-element kernels.
        LayerCase{"lrn_96_channels_tiles", "type: LRN\nlocal_size: 5\nalpha: 0.5\nbeta: 0.75", {{2, 96, 5, 5}},
                  kTolLrn, kTolLrnBackward, {}, {}, 2.0f},
        LayerCase{"lrn_rows_wider_than_a_tile", "type: LRN\nlocal_size: 5\nalpha: 0.5\nbeta: 0.75",
                  {{1, 2056, 1, 2}}, kTolLrn, kTolLrnBackward, {}, {}, 2.0f},
        LayerCase{"eltwise_sum_coeffs", "type: Eltwise\ncoeff: [0.5, -2, 1.5]",
                  {{2, 3, 4, 4}, {2, 3, 4, 4}, {2, 3, 4, 4}}, kTolElementwise, kTolElementwise},
        LayerCase{"concat", "type: Concat", {{2, 1, 3, 3}, {2, 3, 3, 3}, {2, 2, 3, 3}}, kTolExact, kTolExact},
        LayerCase{"flatten", "type: Flatten", {{2, 3, 2, 2}}, kTolExact, kTolExact},
        LayerCase{"softmax_with_loss", "type: SoftmaxWithLoss\nloss_weight: 2.0", {{8, 10}, {8}}, kTolReduction,
                  kTolReduction, {DType::F32, DType::I32}, kLabels8, 3.0f},
        LayerCase{"accuracy_top1_top5", "type: Accuracy\ntop_k: [1, 5]\ntop: [top1, top5]", {{37, 20}, {37}},
                  kTolExact, kTolExact, {DType::F32, DType::I32}, labels_for(37, 20), 1.0f, false}};
  return cases;
}
// clang-format on

INSTANTIATE_TEST_SUITE_P(Layers, CudaParityLayer, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; });

// ---- tensor-core precisions: the CUDA layer in bf16/f16, or f32 channels-last with TF32, against the
// f32 CPU reference ------------------------------------------------------------------------------
// The CPU layer gets exactly the GPU's inputs, weights and top gradients (widened, which is exact),
// so the only differences are the GPU's 16-bit stores or TF32 products, and the usual fp32
// differences. Tolerances: tol_16bit and kTolTf32Dot (parity_util.hpp).

// Copies the GPU tensor's (rounded) values into the CPU tensor.
void mirror(Backend& g, const Tensor& gpu, const Tensor& cpu) { from_host(cpu_backend(), cpu, to_host(g, gpu)); }

void expect_layer_parity(const LayerCase& c, Backend& g, DType dtype, double tol_forward, double tol_backward) {
  const uint64_t seed = 7;
  LayerHarness hc = make_layer(cpu_backend(), c.yaml, c.bottoms, seed, c.dtypes);
  LayerHarness hg = make_layer(g, c.yaml, c.bottoms, seed, c.dtypes, dtype);
  for (size_t i = 0; i < c.bottoms.size(); ++i) {
    if (hc.bottoms[i].dtype() == DType::I32) {
      set_labels(cpu_backend(), hc.bottoms[i], c.labels);
      set_labels(g, hg.bottoms[i], c.labels);
      continue;
    }
    ASSERT_EQ(hg.bottoms[i].dtype(), dtype);
    fill_uniform(g, hg.bottoms[i], 300 + i, -c.input_range, c.input_range);
    mirror(g, hg.bottoms[i], hc.bottoms[i]);
  }
  for (size_t k = 0; k < hc.layer->params().size(); ++k)
    mirror(g, hg.layer->params()[k].data, hc.layer->params()[k].data);
  hc.iteration = hg.iteration = 5;

  hc.forward(Phase::Train);
  hg.forward(Phase::Train);
  for (size_t i = 0; i < hc.tops.size(); ++i)
    expect_tensors(c.name + " train top" + std::to_string(i), hg.tops[i], hc.tops[i], tol_forward, g);
  for (size_t i = 0; i < hc.layer->state().size(); ++i)
    expect_tensors(c.name + " state" + std::to_string(i), hg.layer->state()[i], hc.layer->state()[i], tol_forward, g);
  if (c.backward) {
    for (size_t i = 0; i < hc.top_diffs.size(); ++i) {
      fill_uniform(g, hg.top_diffs[i], 400 + i, -1.0f, 1.0f);
      mirror(g, hg.top_diffs[i], hc.top_diffs[i]);
    }
    // Backward as a function of (x, y, dy): the CPU also gets the GPU's outputs, already compared
    // above. A fused ReLU gates by y's sign, and an output within the forward tolerance of 0 may
    // have either sign on the two sides (a TF32 or 16-bit product rounds before the bias is added):
    // gating by different signs would differ by O(1) at that element, a difference of inputs, not
    // of the backward pass under test.
    for (size_t i = 0; i < hc.tops.size(); ++i)
      if (hc.tops[i].dtype() != DType::I32) mirror(g, hg.tops[i], hc.tops[i]);
    hc.backward(Phase::Train);
    hg.backward(Phase::Train);
    for (size_t i = 0; i < hc.bottom_diffs.size(); ++i)
      if (hc.bottom_diffs[i].defined())
        expect_tensors(c.name + " bottom" + std::to_string(i) + " diff", hg.bottom_diffs[i], hc.bottom_diffs[i],
                       tol_backward, g);
    for (size_t k = 0; k < hc.layer->params().size(); ++k)
      expect_tensors(c.name + " " + hc.layer->params()[k].spec.name + " diff", hg.layer->params()[k].diff,
                     hc.layer->params()[k].diff, tol_backward, g);
  }
  if (c.test_phase) {
    hc.forward(Phase::Test);
    hg.forward(Phase::Test);
    for (size_t i = 0; i < hc.tops.size(); ++i)
      expect_tensors(c.name + " test top" + std::to_string(i), hg.tops[i], hc.tops[i], tol_forward, g);
  }
}

class CudaParityLayer16 : public ::testing::TestWithParam<std::tuple<LayerCase, DType>> {};

TEST_P(CudaParityLayer16, ForwardBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const auto& [c, dtype] = GetParam();
  expect_layer_parity(c, gpu_backend(), dtype, tol_16bit(dtype), tol_16bit(dtype));
}

// f32 with TF32 allowed, as a --precision tf32 net runs: channels-last 4-d activations and KRSC
// filters (mirrored from NCHW masters), so every layer's channels-last f32 path is checked. Dot
// products (convolution, fully connected) take the TF32 tolerance; every other op computes in
// fp32 and keeps its f32 tolerance.
class CudaParityLayerTf32 : public ::testing::TestWithParam<LayerCase> {};

TEST_P(CudaParityLayerTf32, ForwardBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const LayerCase& c = GetParam();
  ASSERT_EQ(gpu_tf32_backend().activation_layout_for(DType::F32), Layout::NHWC);
  auto tol = [](double f32_tol) { return f32_tol == kTolConv || f32_tol == kTolDot ? kTolTf32Dot : f32_tol; };
  expect_layer_parity(c, gpu_tf32_backend(), DType::F32, tol(c.tol_forward), tol(c.tol_backward));
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaParityLayerTf32, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(Layers, CudaParityLayer16,
                         ::testing::Combine(::testing::ValuesIn(layer_cases()),
                                            ::testing::Values(DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<std::tuple<LayerCase, DType>>& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param));
                         });

// ---- batch norm on a partition of the GPU's SMs, and cnnscale's own kernels -------------------------
// A slow rank of a heterogeneous mix runs in a green context of part of the GPU's SMs, where cuDNN's
// persistent channels-last batch-norm kernels fail (they size their grid for the whole device) and
// its spatial ones crawl, so the backend runs cnnscale's own kernels there (--batchnorm auto,
// CudaBackend::own_batchnorm). Every batch-norm case in bf16 and f16 on a partition of 16 SMs (or
// the device's smallest), against the CPU with the 16-bit tolerances of CudaParityLayer16; and the
// same cases on the whole GPU with --batchnorm cnnscale, in f32 (channels-last, as a TF32 run has
// it) with the f32 tolerances, and in bf16 and f16.
#if CNNSCALE_HAVE_CUDA
std::vector<LayerCase> batchnorm_cases() {
  std::vector<LayerCase> out;
  for (const LayerCase& c : layer_cases())
    if (c.name.rfind("batchnorm", 0) == 0) out.push_back(c);
  // A ResNet block's shape (ResNet-34's res2 at 32 samples a rank), as the partitioned ranks that
  // failed ran it: large enough that a persistent kernel sized for the whole GPU would need more
  // co-resident blocks than the partition holds.
  out.push_back(LayerCase{"batchnorm_add_relu_res2", "type: BatchNorm\nrelu: true\n"
                          "scale_filler: {type: uniform, min: 0.5, max: 1.5}\nshift_filler: {type: gaussian, std: 0.5}",
                          {{32, 64, 56, 56}, {32, 64, 56, 56}}, kTolReduction, kTolBnBackward, {}, {}, 2.0f, true,
                          false});
  // More channels than one block's 256 threads take in one-element packs (302 is no multiple of a
  // 16-byte pack in any dtype): the own kernels' channel slices and their partial sums.
  out.push_back(LayerCase{"batchnorm_relu_c302_sliced",
                          "type: BatchNorm\nrelu: true\n"
                          "scale_filler: {type: uniform, min: 0.5, max: 1.5}\nshift_filler: {type: gaussian, std: 0.5}",
                          {{3, 302, 5, 7}},
                          kTolReduction,
                          kTolBnBackward});
  return out;
}

// The whole GPU with cnnscale's batch-norm kernels. TF32 allowed, so that f32 activations are
// channels-last (the layout those kernels run in) as 16-bit ones are in any precision.
Backend& own_batchnorm_backend() {
  static Backend* b = make_backend("gpu:0", 0, Precision::TF32, {.batchnorm = BatchNormKernels::Cnnscale}).release();
  return *b;
}

class CudaParityBatchNormOwn : public ::testing::TestWithParam<std::tuple<LayerCase, DType>> {};

TEST_P(CudaParityBatchNormOwn, ForwardBackward) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const auto& [c, dtype] = GetParam();
  Backend& g = own_batchnorm_backend();
  ASSERT_EQ(g.activation_layout_for(dtype), Layout::NHWC);
  if (dtype == DType::F32)
    expect_layer_parity(c, g, dtype, c.tol_forward, c.tol_backward);
  else
    expect_layer_parity(c, g, dtype, tol_16bit(dtype), tol_16bit(dtype));
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaParityBatchNormOwn,
                         ::testing::Combine(::testing::ValuesIn(batchnorm_cases()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<std::tuple<LayerCase, DType>>& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param));
                         });

// Channels far from zero mean: x = 500 + U(-1, 1) in f32. The batch variance (~1/3) is a difference
// of E[x^2] ~ 2.5e5 and E[x]^2; formed from plain fp32 sums it would lose mean^2 / var ~ 7.5e5 times
// fp32's unit roundoff (6e-8), some 4% of it, and inv_std half of that. The own kernels sum x minus
// one of the channel's own values, which keeps that ratio of order one, so mean and inv_std must
// match a double reference over the same stored values to the f32 reduction tolerance; the running
// variance (unbiased, momentum 0.1 from 1) likewise.
TEST(CudaBatchNormOwn, StatisticsOfChannelsFarFromZeroMean) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = own_batchnorm_backend();
  const int64_t n = 16, c = 8, h = 9, w = 9, rows = n * h * w;
  const Shape shape{n, c, h, w};
  Tensor x = g.alloc(shape).as_layout(Layout::NHWC), y = g.alloc(shape).as_layout(Layout::NHWC);
  fill_uniform(g, x, 11, 499.0f, 501.0f);
  const std::vector<float> xs = to_host(g, x);  // NCHW order, whatever x's memory order
  auto at = [&](int64_t sample, int64_t ch, int64_t pixel) {
    return xs[static_cast<size_t>((sample * c + ch) * h * w + pixel)];
  };
  auto param = [&](float v) {
    Tensor t = g.alloc(Shape{c});
    g.fill(t, v);
    return t;
  };
  Tensor scale = param(1.0f), shift = param(0.0f), rmean = param(0.0f), rvar = param(1.0f), smean = param(0.0f),
         sinv = param(0.0f);
  BatchNormParams p;
  p.momentum = 0.1f;
  g.batchnorm_forward_train(p, x, scale, shift, rmean, rvar, y, smean, sinv);
  const std::vector<float> got_mean = to_host(g, smean), got_inv = to_host(g, sinv), got_rvar = to_host(g, rvar);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0.0;
    for (int64_t sample = 0; sample < n; ++sample)
      for (int64_t pixel = 0; pixel < h * w; ++pixel) sum += at(sample, ch, pixel);
    const double mean = sum / static_cast<double>(rows);
    double ss = 0.0;
    for (int64_t sample = 0; sample < n; ++sample)
      for (int64_t pixel = 0; pixel < h * w; ++pixel) ss += std::pow(at(sample, ch, pixel) - mean, 2);
    const double var = ss / static_cast<double>(rows), inv = 1.0 / std::sqrt(var + p.eps);
    const double rvar_want = 0.9 * 1.0 + 0.1 * ss / static_cast<double>(rows - 1);
    EXPECT_NEAR(got_mean[static_cast<size_t>(ch)], mean, mean * kTolReduction) << "channel " << ch;
    EXPECT_NEAR(got_inv[static_cast<size_t>(ch)], inv, inv * kTolReduction) << "channel " << ch;
    EXPECT_NEAR(got_rvar[static_cast<size_t>(ch)], rvar_want, rvar_want * kTolReduction) << "channel " << ch;
  }
}

// The partitioned backend, made once; nullptr with `why` where the GPU or driver has none to give.
Backend* partition_backend(std::string& why) {
  static std::string reason;
  static Backend* b = []() -> Backend* {
    if (cuda_device_count() == 0) {
      reason = "no usable GPU";
      return nullptr;
    }
    try {
      const cuda::SmPartitionRules rules = cuda::sm_partition_rules(0);
      const int request = std::max(16, rules.min_sms);
      if (rules.device_sms <= request + std::max(1, rules.alignment)) {
        reason = "GPU too small for a partition of 16 SMs and a remainder";
        return nullptr;
      }
      return make_backend("gpu:0", request).release();
    } catch (const RuntimeError& e) {
      reason = e.what();  // a driver without green contexts
      return nullptr;
    }
  }();
  why = reason;
  return b;
}

class CudaParityBatchNormPartition : public ::testing::TestWithParam<std::tuple<LayerCase, DType>> {};

TEST_P(CudaParityBatchNormPartition, ForwardBackward) {
  std::string why;
  Backend* part = partition_backend(why);
  if (part == nullptr) GTEST_SKIP() << why;
  ASSERT_GT(part->granted_sms(), 0);
  const auto& [c, dtype] = GetParam();
  expect_layer_parity(c, *part, dtype, tol_16bit(dtype), tol_16bit(dtype));
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaParityBatchNormPartition,
                         ::testing::Combine(::testing::ValuesIn(batchnorm_cases()),
                                            ::testing::Values(DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<std::tuple<LayerCase, DType>>& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param));
                         });
#endif

}  // namespace
}  // namespace cnnscale::testing
