// A whole Net on the GPU against the same Net on the CPU: identical initial parameters from one
// seed, matching loss, gradients and batch-norm statistics, and a training step that never waits
// for the GPU from the host (the net itself adds no synchronisation).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "core/precision.hpp"
#include "net/net.hpp"
#include "solver/sgd_solver.hpp"
#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing {
namespace {

// Every layer type in one small graph: a blob read by three layers (summed diffs), a concat,
// batch norm with running statistics, LRN, dropout, two pooling modes, a test-only accuracy.
const char* kNet = R"(name: parity
input: {shape: [3, 16, 16], classes: 5}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 8, kernel: 3, pad: 1, weight_filler: {type: msra}, bias_filler: {type: gaussian, std: 0.1}}
  - {name: bn1, type: BatchNorm, bottom: conv1, top: bn1, shift_filler: {type: gaussian, std: 0.2}}
  - {name: relu1, type: ReLU, bottom: bn1, top: relu1}
  - {name: a, type: Convolution, bottom: relu1, top: a, num_output: 8, kernel: 3, pad: 1, weight_filler: {type: msra}}
  - {name: b, type: Convolution, bottom: relu1, top: b, num_output: 8, kernel: 1, weight_filler: {type: msra}}
  - {name: sum, type: Eltwise, bottom: [a, b, relu1], top: sum}
  - {name: norm, type: LRN, bottom: sum, top: norm, local_size: 3, alpha: 0.001, beta: 0.75}
  - {name: pool, type: Pooling, bottom: norm, top: pool, pool: max, kernel: 3, stride: 2}
  - {name: cat, type: Concat, bottom: [pool, pool], top: cat}
  - {name: avg, type: Pooling, bottom: cat, top: avg, pool: ave, kernel: 2, stride: 2}
  - {name: fc1, type: InnerProduct, bottom: avg, top: fc1, num_output: 32, weight_filler: {type: msra}}
  - {name: relu2, type: ReLU, bottom: fc1, top: relu2}
  - {name: drop, type: Dropout, bottom: relu2, top: drop, ratio: 0.3}
  - {name: fc2, type: InnerProduct, bottom: drop, top: fc2, num_output: ${classes}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc2, label], top: loss}
  - {name: acc, type: Accuracy, bottom: [fc2, label], top: [top1, top2], top_k: [1, 2], phase: test}
)";

std::vector<float> host_values(Backend& b, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  b.download(t, out.data());
  return out;
}

void same_inputs(Net& cpu, Net& gpu, int64_t classes) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(cpu.input().numel()));
  for (auto& v : data) v = normal(rng);
  std::vector<int32_t> labels(static_cast<size_t>(cpu.labels().numel()));
  for (auto& l : labels) l = static_cast<int32_t>(rng() % static_cast<uint64_t>(classes));
  for (Net* n : {&cpu, &gpu}) {
    n->backend().upload(data.data(), n->input());
    n->backend().upload(labels.data(), n->labels());
  }
}

TEST(NetGpu, SameInitialParametersAsCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  NetSpec spec = NetSpec::load(std::string(CNNSCALE_SOURCE_DIR) + "/networks/caffenet.yaml");
  Net cpu(spec, cpu_backend(), 1, 2024), gpu(spec, gpu_backend(), 1, 2024);
  // Bit-identical: both are filled on the host by the same generator, then copied.
  EXPECT_EQ(host_values(gpu_backend(), gpu.flat_params()), host_values(cpu_backend(), cpu.flat_params()));
}

TEST(NetGpu, ForwardBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  NetSpec spec = NetSpec::load_string(kNet, "parity.yaml");
  Net cpu(spec, cpu_backend(), 8, 5), gpu(spec, gpu_backend(), 8, 5);
  same_inputs(cpu, gpu, spec.classes());
  for (uint64_t it = 0; it < 2; ++it) {
    cpu.forward(Phase::Train, it);
    gpu.forward(Phase::Train, it);
    cpu.backward(it);
    gpu.backward(it);
  }
  // Measured on an H100: 6e-8 (loss) and 2.7e-7 (gradients). Each conv may lose up to kTolConv
  // (2e-5, parity_util.hpp) where cuDNN picks its fused Winograd, and the gradients pass through
  // about five such steps, hence 1e-4. A wrong diff wiring or parameter view would be O(1).
  expect_parity("loss", host_values(gpu_backend(), gpu.loss()), host_values(cpu_backend(), cpu.loss()), 1e-5);
  expect_parity("flat gradients", host_values(gpu_backend(), gpu.flat_grads()),
                host_values(cpu_backend(), cpu.flat_grads()), 1e-4);
  auto cs = cpu.state(), gs = gpu.state();
  ASSERT_EQ(cs.size(), gs.size());
  for (size_t i = 0; i < cs.size(); ++i)
    expect_parity(cs[i].first, host_values(gpu_backend(), gs[i].second), host_values(cpu_backend(), cs[i].second),
                  kTolReduction);
  cpu.forward(Phase::Test, 2);
  gpu.forward(Phase::Test, 2);
  expect_parity("test loss", host_values(gpu_backend(), gpu.loss()), host_values(cpu_backend(), cpu.loss()), 1e-5);
}

// Mixed precision over the whole graph: bf16/f16 activations and weight copies against the f32 CPU
// net. Each layer adds at most ~4u relative error (the layer parity tests' argument, u = 2^-8 for
// bf16, 2^-11 for fp16) and the gradient passes through 14 layers forward and back, so the f32
// master gradients must agree in relative 2-norm, ||g - g_ref|| / ||g_ref||, to 14 x 4u < 64u, and
// the loss (two layers from the input of the loss) to a few u. A dtype mix-up, an unconverted or
// stale weight copy, a loss scale not divided out, or a gradient left in the 16-bit buffer gives a
// relative error of order 1 instead.
double relative_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double dd = 0, rr = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    dd += d * d;
    rr += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(dd / rr);
}

TEST(NetGpu, MixedPrecisionGradientsFollowTheF32Reference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  NetSpec spec = NetSpec::load_string(kNet, "parity.yaml");
  for (DType t : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Net cpu(spec, cpu_backend(), 8, 5), gpu(spec, gpu_backend(), 8, 5, t);
    same_inputs(cpu, gpu, spec.classes());
    if (t == DType::F16) gpu.set_grad_scale(1024.0);  // exercised: the gradients must come out unscaled
    cpu.forward(Phase::Train, 0);
    gpu.forward(Phase::Train, 0);
    cpu.backward(0);
    gpu.backward(0);
    const double u = t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    expect_parity("loss", host_values(gpu_backend(), gpu.loss()), host_values(cpu_backend(), cpu.loss()), 8 * u);
    const std::vector<float> g = host_values(gpu_backend(), gpu.flat_grads());
    EXPECT_LT(relative_error(g, host_values(cpu_backend(), cpu.flat_grads())), 64 * u)
        << "master gradients";
  }
}

// Two residual stages of different sizes, 4 channels at 16 x 16 and at 8 x 8: each stage's input
// is read by its block's convolution and then by the shortcut sum, so the convolution adds its data
// gradient to what the sum wrote. In 16 bits, 4 channels do not fill a 16-byte pixel, and the
// convolutions are forced onto their channels-first form (NCHW copies), which cannot add in place:
// both adders go through the one scratch the net shares between them, sized for the larger, as a
// view of each gradient's shape. The gradients must still follow the f32 CPU net (the
// mixed-precision test's argument, 6 layers deep here: < 64u), and each adder must say how it adds.
const char* kStagesNet = R"(name: stages
input: {shape: [4, 16, 16], classes: 5}
layers:
  - {name: c1, type: Convolution, bottom: data, top: c1, num_output: 4, kernel: 3, pad: 1, bias: false, weight_filler: {type: msra}}
  - {name: r1, type: ReLU, bottom: c1, top: r1}
  - {name: b1, type: Convolution, bottom: r1, top: b1, num_output: 4, kernel: 3, pad: 1, bias: false, weight_filler: {type: msra}}
  - {name: s1, type: Eltwise, bottom: [b1, r1], top: s1}
  - {name: c2, type: Convolution, bottom: s1, top: c2, num_output: 4, kernel: 3, pad: 1, stride: 2, bias: false, weight_filler: {type: msra}}
  - {name: r2, type: ReLU, bottom: c2, top: r2}
  - {name: b2, type: Convolution, bottom: r2, top: b2, num_output: 4, kernel: 3, pad: 1, bias: false, weight_filler: {type: msra}}
  - {name: s2, type: Eltwise, bottom: [b2, r2], top: s2}
  - {name: pool, type: Pooling, bottom: s2, top: pool, pool: ave, kernel: 8, stride: 8}
  - {name: fc, type: InnerProduct, bottom: pool, top: fc, num_output: ${classes}, weight_filler: {type: msra}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";

TEST(NetGpu, ConvolutionsAddingToGradientsOfTwoSizesFollowTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
#if CNNSCALE_HAVE_CUDA
  NetSpec spec = NetSpec::load_string(kStagesNet, "stages.yaml");
  CudaBackendOptions options;
  options.channels_first = ConvChannelsFirst::Always;
  options.conv_lowering = ConvLowering::Never;  // else a lowered form may be timed faster and run
  options.width_lowering = ConvWidthLowering::Never;
  CudaBackend g(0, options);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Net cpu(spec, cpu_backend(), 8, 5), gpu(spec, g, 8, 5, t);
    same_inputs(cpu, gpu, spec.classes());
    for (uint64_t it = 0; it < 2; ++it) {  // the second step adds as the first did
      cpu.forward(Phase::Train, it);
      gpu.forward(Phase::Train, it);
      cpu.backward(it);
      gpu.backward(it);
    }
    // f32 (TF32 off): ForwardBackwardMatchCpu's bound, 1e-4: up to kTolConv (2e-5) per convolution
    // where cuDNN picks a Winograd or FFT form, through some five of them.
    const double bound = t == DType::BF16  ? 64 * std::ldexp(1.0, -8)
                         : t == DType::F16 ? 64 * std::ldexp(1.0, -11)
                                           : 1e-4;
    EXPECT_LT(relative_error(host_values(g, gpu.flat_grads()), host_values(cpu_backend(), cpu.flat_grads())), bound)
        << "master gradients";
    for (Layer* l : gpu.layers()) {
      if (l->type() != "Convolution") continue;
      const std::string how = l->implementation(g);
      const bool adder = l->name() == "b1" || l->name() == "b2";
      EXPECT_EQ(how.find("adding to its input's gradient") != std::string::npos, adder) << l->name() << ": " << how;
      // f32 computes channels-first (NCHW) anyway and may add in place; 16 bits must take the scratch.
      if (adder && t != DType::F32)
        EXPECT_NE(how.find("adding to its input's gradient through a scratch copy"), std::string::npos)
            << l->name() << ": " << how;
    }
  }
#endif
}

// The update writes every mirrored parameter's compute copy (SgdMirrors) and the next forward
// computes with it unconverted: after each step every copy must hold, bit for bit, what convert()
// makes of its updated master (channels-last filters reordered KCRS -> KRSC), in bf16, fp16 and
// tf32 (whose copies are the f32 channels-last filters). A copy written to the wrong place, left
// unwritten or written from the master before its update differs in its bits.
TEST(NetGpu, UpdateWritesTheComputeCopiesAsConvertWould) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  NetSpec spec = NetSpec::load_string(kNet, "parity.yaml");
  for (Precision precision : {Precision::BF16, Precision::FP16, Precision::TF32}) {
    SCOPED_TRACE(precision_name(precision));
    auto backend = make_backend("gpu:0", 0, precision);
    Backend& g = *backend;
    Net cpu(spec, cpu_backend(), 8, 5), net(spec, g, 8, 5, compute_dtype(precision));
    same_inputs(cpu, net, spec.classes());
    SolverConfig config;
    config.lr = 0.05;
    SgdSolver solver(net, config, /*iterations_per_epoch=*/1, /*total_iterations=*/10);
    const std::vector<float> before = host_values(g, net.flat_params());
    int mirrored = 0, reordered = 0;
    for (int64_t it = 0; it < 3; ++it) {
      net.forward(Phase::Train, static_cast<uint64_t>(it));
      net.backward(static_cast<uint64_t>(it));
      solver.step(it);
      for (Param* p : net.params()) {
        if (!p->spec.mirrored()) continue;
        Tensor ref = g.alloc(p->data.shape(), p->data.dtype()).as_layout(p->data.layout());
        g.convert(p->master, ref);
        std::vector<uint8_t> copy(p->data.bytes()), expected(ref.bytes());
        g.download(p->data, copy.data());
        g.download(ref, expected.data());
        EXPECT_TRUE(copy == expected) << "the compute copy of a " << p->spec.name << " of shape "
                                      << p->master.shape().to_string() << " after step " << it;
        if (it == 0) {
          ++mirrored;
          reordered += p->data.layout() != p->master.layout();
        }
      }
    }
    EXPECT_GT(mirrored, 0);
    EXPECT_GT(reordered, 0) << "no channels-last filter: the reordering went untested";
    EXPECT_NE(host_values(g, net.flat_params()), before) << "the steps did not move the masters";
  }
}

// The update may read the mirrored parameters' gradients where backward left them (16-bit, or
// channels-last f32 filters) instead of the f32 gradients backward widened from them, and check
// them for divergence as it reads them: masters, momentum histories and compute copies must stay
// bit for bit those of the widening path (the widening multiplied by 1, so it is exact), the check
// must not fire on finite gradients, and it must fire on a NaN in a mirrored gradient, with the
// step's tag, keeping the first tag.
TEST(NetGpu, UpdateReadingTheMirrorGradientsMatchesTheWidenedOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  NetSpec spec = NetSpec::load_string(kNet, "parity.yaml");
  for (Precision precision : {Precision::BF16, Precision::FP16, Precision::TF32}) {
    SCOPED_TRACE(precision_name(precision));
#if CNNSCALE_HAVE_CUDA
    // Deterministic algorithms: the two nets are compared bit for bit, and a backward algorithm
    // that adds with atomics would make them differ for reasons of its own.
    CudaBackendOptions opts;
    opts.deterministic = true;
    opts.allow_tf32 = uses_tf32(precision);
    CudaBackend g(0, opts);
#else
    GTEST_SKIP() << "no CUDA backend";
    Backend& g = cpu_backend();
#endif
    ASSERT_TRUE(g.sgd_reads_mirror_grads());
    Net cpu(spec, cpu_backend(), 8, 5), widened(spec, g, 8, 5, compute_dtype(precision)),
        direct(spec, g, 8, 5, compute_dtype(precision));
    same_inputs(cpu, widened, spec.classes());
    same_inputs(cpu, direct, spec.classes());
    SolverConfig config;
    config.lr = 0.05;
    ASSERT_TRUE(SgdSolver::abilities(direct).reads_mirror_grads);
    GradientPlan reads_mirror_grads;
    reads_mirror_grads.update_reads_mirror_grads = true;
    direct.set_gradient_plan(reads_mirror_grads);
    SgdSolver a(widened, config, 1, 10), b(direct, config, 1, 10);
    Tensor flag = g.alloc(Shape{1}, DType::I32), tag = g.alloc(Shape{1}, DType::I32);
    g.fill_i32(flag, 0);
    for (int64_t it = 0; it < 3; ++it) {
      g.fill_i32(tag, static_cast<int32_t>(it + 1));
      for (Net* n : {&widened, &direct}) {
        n->forward(Phase::Train, static_cast<uint64_t>(it));
        n->backward(static_cast<uint64_t>(it));
      }
      a.set_rate(it);
      a.apply();
      b.set_rate(it);
      b.apply(Tensor(), GradCheck{flag, tag});
      for (const auto& [x, y] : {std::pair{&widened.flat_params(), &direct.flat_params()},
                                 {&widened.flat_mirrors(), &direct.flat_mirrors()}}) {
        std::vector<uint8_t> bx(x->bytes()), by(y->bytes());
        g.download(*x, bx.data());
        g.download(*y, by.data());
        EXPECT_TRUE(bx == by) << "step " << it;
      }
      for (size_t i = 0; i < a.history().size(); ++i)
        EXPECT_EQ(host_values(g, a.history()[i]), host_values(g, b.history()[i])) << a.params()[i].name;
    }
    int32_t flagged = -1;
    g.download(flag, &flagged);
    EXPECT_EQ(flagged, 0) << "finite gradients were flagged";
    // A NaN in one mirrored gradient, where only the direct reader sees it.
    Param* mirrored = nullptr;
    for (Param* p : direct.params())
      if (p->spec.mirrored() && !mirrored) mirrored = p;
    ASSERT_NE(mirrored, nullptr);
    direct.forward(Phase::Train, 3);
    direct.backward(3);
    g.fill(mirrored->diff, std::numeric_limits<float>::quiet_NaN());
    g.fill_i32(tag, 4);
    b.set_rate(3);
    b.apply(Tensor(), GradCheck{flag, tag});
    g.download(flag, &flagged);
    EXPECT_EQ(flagged, 4);
    g.fill_i32(tag, 5);  // a later non-finite step leaves the first tag
    b.apply(Tensor(), GradCheck{flag, tag});
    g.download(flag, &flagged);
    EXPECT_EQ(flagged, 4);
  }
}

#if CNNSCALE_HAVE_CUDA
// Holds the stream from a host callback until released (or 20 s pass): had the net waited for
// the GPU from the host, it would have stalled on the gate until the timeout.
struct Gate {
  std::atomic<bool> release{false};
  std::atomic<bool> timed_out{false};
  static void hold(void* p) {
    auto* gate = static_cast<Gate*>(p);
    auto start = std::chrono::steady_clock::now();
    while (!gate->release.load()) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
        gate->timed_out = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

TEST(NetGpu, TrainingStepNeverWaitsForTheGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto& g = dynamic_cast<CudaBackend&>(gpu_backend());
  NetSpec spec = NetSpec::load_string(kNet, "parity.yaml");
  Net net(spec, g, 8, 5);
  net.forward(Phase::Train, 0);  // first use: algorithm searches and lazy buffers may synchronise
  net.backward(0);
  g.synchronize();
  Gate gate;
  ASSERT_EQ(cudaLaunchHostFunc(g.stream(), &Gate::hold, &gate), cudaSuccess);
  net.forward(Phase::Train, 1);
  net.backward(1);
  const bool still_queued = cudaStreamQuery(g.stream()) == cudaErrorNotReady;
  gate.release = true;
  g.synchronize();
  EXPECT_FALSE(gate.timed_out) << "forward/backward waited for the GPU from the host";
  EXPECT_TRUE(still_queued) << "the step's work should still have been queued behind the gate";
}
#endif

}  // namespace
}  // namespace cnnscale::testing
