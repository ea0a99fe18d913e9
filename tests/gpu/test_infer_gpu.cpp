// The inference engine on the GPU: in every precision its scores follow the fp32 CPU engine's
// (batch norm folded on both sides, the same seeded weights and input), its forward passes replay
// from a CUDA graph after the first, and a replayed pass gives exactly the bits of a pass queued op
// by op on the same deterministic backend; the int8 engine follows it to within int8's resolution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "infer/inference_engine.hpp"
#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing {
namespace {

// A smooth net (LRN as its nonlinearity, average pooling) with a convolution + batch norm pair to
// fold, and the inner product + batch norm the folding leaves alone.
NetSpec test_net() { return NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet_bn.yaml"); }

// Queues `passes` forward passes of batch `batch` and returns the scores (the loss layer's input).
std::vector<float> scores(infer::InferenceEngine& engine, int64_t batch, int passes) {
  for (int i = 0; i < passes; ++i) engine.run(batch);
  Net& net = engine.net(batch);
  const std::string blob = net.layers().back()->bottoms()[0];
  Backend& b = engine.backend();
  Tensor wide = b.alloc(net.blob(blob).shape());
  b.convert(net.blob(blob), wide);
  return to_host(b, wide);
}

double relative_error(const std::vector<float>& a, const std::vector<float>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double dd = 0, rr = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    dd += d * d;
    rr += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(dd / rr);
}

// Tolerance on the scores' relative 2-norm error: each of the net's 6 compute layers (conv, LRN,
// pool, two inner products, batch norm) adds at most ~4u relative error in the compute format (the
// layer parity tests' argument), so 6 x 4u < 32u: u = 2^-8 for bf16, 2^-11 for fp16 and for TF32's
// 10-bit mantissa. fp32 differs only in summation order and cuDNN's algorithm (fused Winograd: kTolConv).
// Stale or unconverted weight copies, an unfolded or doubly-applied batch norm, or a pass reading
// another batch's input give errors of order 1.
double tolerance(Precision p) {
  switch (p) {
    case Precision::FP32: return 10 * kTolConv;
    case Precision::TF32:
    case Precision::FP16: return 32 * std::ldexp(1.0, -11);
    case Precision::BF16: return 32 * std::ldexp(1.0, -8);
  }
  return 0;
}

TEST(InferGpu, EveryPrecisionFollowsTheCpuEngineAndReplaysItsPasses) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NetSpec spec = test_net();
  infer::EngineOptions cpu_options;
  infer::InferenceEngine cpu(spec, cpu_backend(), cpu_options);
  ASSERT_GT(cpu.folded_batch_norms(), 0u);
  const std::vector<float> ref = scores(cpu, 8, 1), ref1 = scores(cpu, 1, 1);
  EXPECT_EQ(cpu.cuda_graph(), "off: cpu backend: ops run as they are called");
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    auto backend = make_backend("gpu:0", 0, p);
    infer::EngineOptions o;
    o.precision = p;
    infer::InferenceEngine gpu(spec, *backend, o);
    EXPECT_EQ(gpu.folded_batch_norms(), cpu.folded_batch_norms());
    const std::vector<float> got = scores(gpu, 8, 3);  // the first uncaptured, then two replays
    EXPECT_EQ(gpu.cuda_graph(), "on");
    EXPECT_EQ(gpu.graph_replays(), 2);
    EXPECT_LT(relative_error(got, ref), tolerance(p));
    // Another batch size is its own net, input and graph.
    const std::vector<float> one = scores(gpu, 1, 2);
    EXPECT_EQ(gpu.graph_replays(), 3);
    EXPECT_LT(relative_error(one, ref1), tolerance(p));
  }
}

// A residual net (fold_small_resnet: ReLUs, max pooling, a grouped convolution, batch norms that
// stay) as infer builds it: batch norms folded, then ReLUs and the residual sum fused into the
// convolutions (conv_forward_residual: cuDNN's fused graph plan where it measures faster), on the
// GPU against the same on the CPU. Its folded and fused network has 10 compute layers (convolutions,
// inner products, pooling, the remaining batch norms), each adding at most ~4u as above: 40u, so
// 48u; fp32 2e-5 a layer (kTolConv, fused Winograd) and 10 of them, 2e-4. A dropped addend, bias or
// ReLU errs by O(1).
TEST(InferGpu, ResidualNetFoldedAndFusedFollowsTheCpuEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/fold_small_resnet.yaml");
  infer::InferenceEngine cpu(spec, cpu_backend(), infer::EngineOptions{});
  ASSERT_EQ(cpu.folded_batch_norms(), 3u);
  ASSERT_EQ(cpu.fused_epilogues(), 5u);  // conv1, conv2, conv3 (with the sum), bn4, bn_fc
  const std::vector<float> ref = scores(cpu, 16, 1);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    auto backend = make_backend("gpu:0", 0, p);
    infer::EngineOptions o;
    o.precision = p;
    infer::InferenceEngine gpu(spec, *backend, o);
    EXPECT_EQ(gpu.fused_epilogues(), cpu.fused_epilogues());
    const double tol = p == Precision::FP32   ? 10 * kTolConv
                       : p == Precision::BF16 ? 48 * std::ldexp(1.0, -8)
                                              : 48 * std::ldexp(1.0, -11);
    EXPECT_LT(relative_error(scores(gpu, 16, 3), ref), tol);
  }
}

#if CNNSCALE_HAVE_CUDA
// The int8 engine on the GPU (int8 kernels, int8 activations between them, bf16 elsewhere) and on
// the CPU (the reference loops, fp32 elsewhere) against the fp32 CPU engine, on tests/data's
// int8_chain (an int8 output beside a bf16 addend, an int8 addend, an int8 classifier), the table's
// scales max |x| / 127 of each layer's input in the fp32 pass (calibration's max method). Each int8
// tensor rounds by at most half a step, 1/254 of its range, about 0.8 % of its RMS value in
// RMS; some twelve quantised tensors (activations and filters) on any path add in quadrature to
// about 3 %, so 0.05 bounds the int8 part; the GPU's bf16 between layers adds at most 48u (u = 2^-8)
// as in the residual test above: 0.05 + 0.19. A scale not folded into an epilogue (s_y is about
// 0.01-0.1 here) or a dropped addend errs by O(1).
TEST(InferGpu, Int8EngineFollowsTheFp32CpuEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/int8_chain.yaml");
  infer::InferenceEngine cpu(spec, cpu_backend(), infer::EngineOptions{});
  const std::vector<float> ref = scores(cpu, 16, 1);
  infer::EngineOptions int8;
  Net& n = cpu.net(16);
  for (Layer* l : n.layers()) {
    if (l->type() != "Convolution" && l->type() != "InnerProduct") continue;
    const std::vector<float> v = to_host(cpu_backend(), n.blob(l->bottoms()[0]));
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    int8.int8_input_scales[l->name()] = m / 127.0;
  }
  infer::EngineOptions cpu8 = int8;
  infer::InferenceEngine cpu_int8(spec, cpu_backend(), cpu8);
  EXPECT_LT(relative_error(scores(cpu_int8, 16, 1), ref), 0.05);
  auto backend = make_backend("gpu:0", 0, Precision::BF16);
  int8.precision = Precision::BF16;
  infer::InferenceEngine gpu(spec, *backend, int8);
  ASSERT_NE(gpu.int8(), nullptr);
  EXPECT_EQ(gpu.int8()->outputs, (std::vector<std::string>{"a", "b", "c"}));
  const std::vector<float> got = scores(gpu, 16, 3);
  EXPECT_EQ(gpu.int8_layers_run(), (std::vector<std::string>{"a", "b", "c", "d", "fc"}));
  EXPECT_EQ(gpu.graph_replays(), 2);
  EXPECT_LT(relative_error(got, ref), 0.05 + 48 * std::ldexp(1.0, -8));
}

TEST(InferGpu, ReplayedPassesGiveTheBitsOfPassesQueuedOpByOp) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NetSpec spec = test_net();
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    // One deterministic backend for both: cuDNN's algorithm choice is made once per shape and kept.
    CudaBackendOptions opts;
    opts.deterministic = true;
    CudaBackend backend(0, opts);
    infer::EngineOptions on, off;
    on.precision = off.precision = p;
    off.cuda_graph = false;
    infer::InferenceEngine eager(spec, backend, off), graphed(spec, backend, on);
    const std::vector<float> a = scores(eager, 16, 3), b = scores(graphed, 16, 3);
    EXPECT_EQ(eager.cuda_graph(), "off: turned off (--no-graph)");
    EXPECT_EQ(eager.graph_replays(), 0);
    EXPECT_EQ(graphed.graph_replays(), 2);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}
#endif

}  // namespace
}  // namespace cnnscale::testing
