// The CUDA backend itself: construction on a missing device, description, argument errors that
// name the op and backend, pinned host memory, and label errors surfacing as NaN (no host sync).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/byte_input.hpp"
#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#endif

namespace cnnscale::testing {
namespace {

// Runs the statement and returns the RuntimeError's message ("" and a test failure if none).
template <typename F>
std::string runtime_error_of(F&& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected cnnscale::RuntimeError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected cnnscale::RuntimeError, nothing was thrown";
  return "";
}

TEST(CudaBackend, MissingDeviceIndexThrowsRuntimeError) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  gpu_backend();  // a first backend exists; the second asks for a device past the last one
  const int n = cuda_device_count();
  const std::string spec = "gpu:" + std::to_string(n);
  std::string msg = runtime_error_of([&] { make_backend(spec); });
  EXPECT_NE(msg.find(spec), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such CUDA device"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(n) + " visible"), std::string::npos) << msg;
}

TEST(CudaBackend, DescriptionNamesTheGpuAndLibraries) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto b = make_backend("gpu:0");
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_EQ(b->device(), (Device{Device::Kind::CUDA, 0}));
  const std::string d = b->description();
#if CNNSCALE_HAVE_CUDA
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_NE(d.find(prop.name), std::string::npos) << d;
#endif
  for (const char* part : {"cuDNN", "cuBLAS", "CUDA runtime", "no TF32"})
    EXPECT_NE(d.find(part), std::string::npos) << "'" << part << "' missing from: " << d;
}

TEST(CudaBackend, UnsupportedArgumentsNameTheOpAndBackend) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Tensor i32 = g.alloc(Shape{2, 3, 4, 4}, DType::I32), f32 = g.alloc(Shape{2, 3, 4, 4});
  std::string msg = runtime_error_of([&] { g.relu_forward(i32, f32); });
  EXPECT_NE(msg.find("relu_forward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;

  Tensor host = cpu_backend().alloc(Shape{2, 3, 4, 4});  // a CPU tensor handed to a GPU op
  msg = runtime_error_of([&] { g.axpby(1.0f, host, 0.0f, f32); });
  EXPECT_NE(msg.find("axpby"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;

  Tensor half = g.alloc(Shape{2, 3, 4, 4}, DType::F16);  // 16-bit ops take one dtype per call
  msg = runtime_error_of([&] { g.relu_forward(half, f32); });
  EXPECT_NE(msg.find("relu_forward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  msg = runtime_error_of([&] { g.convert(i32, f32); });
  EXPECT_NE(msg.find("convert"), std::string::npos) << msg;

  LrnParams wide{17, 1e-4f, 0.75f, 1.0f};  // cuDNN's window is at most 16 channels
  Tensor y = g.alloc(Shape{2, 3, 4, 4});
  msg = runtime_error_of([&] { g.lrn_forward(wide, f32, y); });
  EXPECT_NE(msg.find("lrn_forward"), std::string::npos) << msg;
}

#if CNNSCALE_HAVE_CUDA
TEST(CudaBackend, HostAllocationsArePinned) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto host = gpu_backend().alloc_host(1 << 20);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, host->ptr()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  EXPECT_TRUE(host->device().is_cpu());
}

// The study's fp32 runs must not use TF32. A backend with allow_tf32 shows both that TF32 is
// what the option switches and that kTolDot would catch it: its 512-term dot products differ
// from the CPU by far more than kTolDot, while the default backend stays inside it.
TEST(CudaBackend, Tf32IsOffByDefaultAndTheParityToleranceWouldCatchIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  CudaBackendOptions options;
  options.allow_tf32 = true;
  CudaBackend tf32(0, options);
  EXPECT_NE(tf32.description().find("TF32 allowed"), std::string::npos) << tf32.description();
  const int64_t m = 512, n = 512, k = 512;
  Twin a = twin_uniform(Shape{m, k}, 151), b = twin_uniform(Shape{k, n}, 152), c = twin(Shape{m, n});
  Tensor c_tf32 = tf32.alloc(Shape{m, n});
  cpu_backend().gemm(false, false, m, n, k, 1.0f, a.cpu.f32(), b.cpu.f32(), 0.0f, c.cpu.f32());
  gpu_backend().gemm(false, false, m, n, k, 1.0f, a.gpu.f32(), b.gpu.f32(), 0.0f, c.gpu.f32());
  tf32.gemm(false, false, m, n, k, 1.0f, a.gpu.f32(), b.gpu.f32(), 0.0f, c_tf32.f32());
  std::vector<float> ref = to_host(cpu_backend(), c.cpu);
  ParityError fp32 = parity_error(to_host(gpu_backend(), c.gpu), ref);
  ParityError with_tf32 = parity_error(to_host(tf32, c_tf32), ref);
  EXPECT_LE(fp32.normalized, kTolDot) << "default backend: fp32 GEMM differs like TF32 would";
  EXPECT_GT(with_tf32.normalized, kTolDot)
      << "allow_tf32 backend: expected TF32-sized errors, got " << with_tf32.normalized;
  if (parity_verbose())
    std::printf("[parity] gemm 512^3 normalized error: fp32 %.3e, TF32 allowed %.3e\n", fp32.normalized,
                with_tf32.normalized);
}

// Blocks the stream from a host callback until released (or 20 s pass), so that any op that
// waits for the GPU from the host would wait for the gate: the timeout then records it.
struct StreamGate {
  std::atomic<bool> release{false};
  std::atomic<bool> timed_out{false};
  static void hold(void* p) {
    auto* gate = static_cast<StreamGate*>(p);
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

// backend.hpp: ops never synchronise with the host (only download and synchronize do). One
// training step's worth of ops is queued behind a closed gate; had any of them waited for the
// stream, the host would have stalled until the gate's timeout.
TEST(CudaBackend, StepOpsNeverWaitForTheGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto& g = dynamic_cast<CudaBackend&>(gpu_backend());
  ConvParams cp{3, 3, 1, 1, 1, 1, 1, 1, 1};
  PoolParams cudnn_pool{PoolMode::Max, 3, 3, 2, 2, 0, 0, true};    // 13 -> 6: cuDNN
  PoolParams own_pool{PoolMode::Average, 2, 2, 2, 2, 0, 0, true};  // 13 -> 7: own kernel
  BatchNormParams bn;
  LrnParams lrn;
  Tensor x = g.alloc(Shape{4, 8, 13, 13}), w = g.alloc(Shape{8, 8, 3, 3}), b = g.alloc(Shape{8});
  Tensor y = g.alloc(x.shape()), dy = g.alloc(x.shape()), dx = g.alloc(x.shape()), dw = g.alloc(w.shape());
  Tensor p1 = g.alloc(Shape{4, 8, 6, 6}), p2 = g.alloc(Shape{4, 8, 7, 7}), c8 = g.alloc(Shape{8});
  Tensor rm = g.alloc(Shape{8}), rv = g.alloc(Shape{8}), sm = g.alloc(Shape{8}), si = g.alloc(Shape{8});
  Tensor dscale = g.alloc(Shape{8}), dshift = g.alloc(Shape{8});
  Tensor fc_w = g.alloc(Shape{10, 8 * 36}), scores = g.alloc(Shape{4, 10}), prob = g.alloc(Shape{4, 10});
  Tensor labels = g.alloc(Shape{4}, DType::I32), loss = g.alloc(Shape{1}), acc = g.alloc(Shape{2});
  Tensor cat = g.alloc(Shape{4, 16, 13, 13}), hist = g.alloc(w.shape());
  fill_uniform(g, x, 1, -1, 1);
  fill_uniform(g, w, 2, -1, 1);
  fill_uniform(g, fc_w, 3, -1, 1);
  g.fill(c8, 1.0f);
  g.fill(rv, 1.0f);
  auto step = [&] {
    g.conv_forward(cp, x, w, y);
    g.bias_add(b, y);
    g.relu_forward(y, y);
    g.lrn_forward(lrn, y, dy);
    g.batchnorm_forward_train(bn, dy, c8, b, rm, rv, y, sm, si);
    g.dropout_forward(0.5f, 1, 2, y, dy);
    g.pool_forward(cudnn_pool, dy, p1);
    g.pool_forward(own_pool, dy, p2);
    g.gemm(false, true, 4, 10, 8 * 36, 1.0f, p1.f32(), fc_w.f32(), 0.0f, scores.f32());
    g.softmax_forward(scores, prob);
    g.cross_entropy_loss(prob, labels, loss);
    g.accuracy_topk(scores, labels, {1, 5}, acc);
    g.softmax_cross_entropy_backward(prob, labels, 0.25f, scores);
    g.pool_backward(cudnn_pool, dy, p1, p1, dx);
    g.pool_backward(own_pool, dy, p2, p2, dx);
    g.dropout_backward(0.5f, 1, 2, dx, dy);
    g.batchnorm_backward(bn, x, dy, c8, sm, si, dx, dscale, dshift);
    g.lrn_backward(lrn, x, y, dy, dx);
    g.relu_backward(y, dx, dy);
    g.bias_backward(dy, b);
    g.conv_backward_filter(cp, x, dy, dw);
    g.conv_backward_data(cp, w, dy, dx);
    g.copy_channels(dx, 0, cat, 8, 8);
    g.axpby(1.0f, dx, 0.5f, y);
    g.sgd_update(w, dw, hist, 0.01f, 0.9f, 5e-4f);
    g.fill(dw, 0.0f);
    g.copy(x, y);
  };
  step();  // first use of each shape: algorithm searches may synchronise here
  g.synchronize();

  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(g.stream(), &StreamGate::hold, &gate), cudaSuccess);
  step();
  const bool still_queued = cudaStreamQuery(g.stream()) == cudaErrorNotReady;
  gate.release = true;
  g.synchronize();
  EXPECT_FALSE(gate.timed_out) << "an op waited for the GPU from the host (the stream gate timed out)";
  EXPECT_TRUE(still_queued) << "the step's work should still have been queued behind the gate";
}

TEST(CudaBackend, DeviceTensorsAreOnTheBackendsDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Tensor t = gpu_backend().alloc(Shape{16});
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, t.raw()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  auto& cuda = dynamic_cast<CudaBackend&>(gpu_backend());
  EXPECT_EQ(cuda.device_index(), 0);
  EXPECT_NE(cuda.stream(), nullptr);
  EXPECT_NE(cuda.cudnn_handle(), nullptr);
  EXPECT_NE(cuda.cublas_handle(), nullptr);
  EXPECT_FALSE(cuda.options().allow_tf32);
}
#endif

// The CPU backend throws on a bad label; the CUDA ops cannot without a host sync, so they poison
// their outputs with NaN instead, which the loss check of any caller sees.
TEST(CudaBackend, LabelOutOfRangeGivesNaN) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Tensor prob = g.alloc(Shape{3, 4}), labels = g.alloc(Shape{3}, DType::I32);
  Tensor loss = g.alloc(Shape{1}), dx = g.alloc(Shape{3, 4}), acc = g.alloc(Shape{1});
  g.fill(prob, 0.25f);
  set_labels(g, labels, {0, 4, 1});  // 4 is outside [0, 4)
  g.cross_entropy_loss(prob, labels, loss);
  g.softmax_cross_entropy_backward(prob, labels, 1.0f, dx);
  g.accuracy_topk(prob, labels, {1}, acc);
  EXPECT_TRUE(std::isnan(to_host(g, loss)[0]));
  EXPECT_TRUE(std::isnan(to_host(g, acc)[0]));
  std::vector<float> d = to_host(g, dx);
  EXPECT_FALSE(std::isnan(d[0]));  // row 0 has a valid label
  EXPECT_TRUE(std::isnan(d[4]));   // row 1 does not
}

// The divergence flag: CUDA and CPU agree on clean data, a NaN, +inf and -inf anywhere (first
// and last element, and past one block's grid stride), and the first tag set stays.
TEST(CudaBackend, FlagNonfiniteMatchesTheCpuBackend) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const int64_t n = 3 * 1024 * 1024 + 7;  // more elements than one pass of the grid
  const float kInf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<int64_t, float>> cases = {
      {-1, 0.0f}, {0, NAN}, {n - 1, kInf}, {n / 2 + 1, -kInf}, {12345, NAN}};
  for (const auto& [where, value] : cases) {
    std::vector<float> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = std::sin(0.001f * static_cast<float>(i)) * 1e30f;
    if (where >= 0) host[static_cast<size_t>(where)] = value;
    int32_t flags[2] = {0, 0};
    Backend* backends[2] = {&cpu_backend(), &gpu_backend()};
    for (int b = 0; b < 2; ++b) {
      Tensor x = backends[b]->alloc(Shape{n}), flag = backends[b]->alloc(Shape{1}, DType::I32);
      backends[b]->upload(host.data(), x);
      backends[b]->flag_nonfinite(x, 7, flag);
      backends[b]->flag_nonfinite(x, 9, flag);  // a later step: the first tag stays
      backends[b]->download(flag, &flags[b]);
    }
    EXPECT_EQ(flags[0], where >= 0 ? 7 : 0) << "cpu, bad element at " << where;
    EXPECT_EQ(flags[1], flags[0]) << "cuda, bad element at " << where;
  }
}

// convert_segments in one launch equals the CPU backend's convert of each range, bit for bit, and
// leaves the elements between the ranges as they were: ranges shorter and longer than a block's
// threads, an empty one, and one ending at the buffer's end; bf16 and f16.
TEST(CudaBackend, ConvertSegmentsMatchesTheCpuBackendBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const int64_t n = 5000;
  std::vector<float> host(static_cast<size_t>(n)), before(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    host[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    before[static_cast<size_t>(i)] = -7.0f - static_cast<float>(i % 5);
  }
  const std::vector<int32_t> bounds = {0, 3, 64, 64, 100, 1700, 1701, 1702, 2048, 2112, 4000, 5000};
  for (DType d : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> got[2];
    Backend* backends[2] = {&cpu_backend(), &gpu_backend()};
    for (int b = 0; b < 2; ++b) {
      Backend& be = *backends[b];
      Tensor src = be.alloc(Shape{n}), old = be.alloc(Shape{n}), dst = be.alloc(Shape{n}, d);
      Tensor ranges = be.alloc(Shape{static_cast<int64_t>(bounds.size())}, DType::I32);
      be.upload(host.data(), src);
      be.upload(before.data(), old);
      be.upload(bounds.data(), ranges);
      be.convert(old, dst);
      be.convert_segments(src, dst, ranges);
      got[b].resize(static_cast<size_t>(n));
      be.download(dst, got[b].data());
    }
    Tensor one = cpu_backend().alloc(Shape{1}, d);
    int mismatches = 0, inside = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool in = false;
      for (size_t k = 0; k < bounds.size(); k += 2) in |= i >= bounds[k] && i < bounds[k + 1];
      inside += in;
      Tensor from = cpu_backend().alloc(Shape{1});
      from.f32()[0] = in ? host[static_cast<size_t>(i)] : before[static_cast<size_t>(i)];
      cpu_backend().convert(from, one);
      const uint16_t want = *static_cast<const uint16_t*>(one.raw());
      mismatches += got[0][static_cast<size_t>(i)] != want || got[1][static_cast<size_t>(i)] != want;
    }
    EXPECT_EQ(mismatches, 0) << dtype_name(d);
    EXPECT_EQ(inside, 3 + 1600 + 1 + 64 + 1000);
  }
}

// The device decode of byte batches (uint8 over the bus, normalised and augmented on the GPU) must
// give the host's floats bit for bit: both round the product and the sum separately
// (core/byte_input.hpp), and the moves only pick pixels. Every draw kind: none, shifts in each
// direction up to beyond half the image (most of the output is then the zero border), mirror with
// and without a shift; channels with their own scale and offset; a second batch size of the same
// buffers (a test set's last, partial batch); and an optical-flow volume's map, whose third block
// negates channels 0 and 2 of the mirrored samples (negated_flow_byte, byte 0 included).
TEST(CudaBackend, DecodeBytesEqualsTheCpuBackendBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const Shape shape{9, 3, 13, 11};
  std::vector<uint8_t> bytes(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const std::vector<float> affine = {1.0f / (255.0f * 0.3530f), 0.0123f, -0.71f, -0.2860f / 0.3530f, 1.5f, 0.25f};
  const std::vector<int32_t> draws = {0, 0,   0,  2, -3, 0, -4, 4,  1, 0, 0, 1, 7, -6,
                                      0, -12, 10, 1, 1,  1, 1,  -1, 0, 0, 3, 5, 1};
  const std::vector<float> flow_affine = [&] {
    std::vector<float> a = affine;
    a.insert(a.end(), {1.0f, 0.0f, 1.0f});
    return a;
  }();
  for (const std::vector<float>* map : {&affine, &flow_affine})
    for (const int64_t n : {int64_t{9}, int64_t{4}})
      for (const bool with_draws : {false, true}) {
        const Shape s = shape.with_batch(n);
        std::vector<float> out[2];
        Backend* backends[2] = {&cpu_backend(), &gpu_backend()};
        for (int b = 0; b < 2; ++b) {
          Backend& be = *backends[b];
          Tensor x = be.alloc(s, DType::U8), a = be.alloc(Shape{static_cast<int64_t>(map->size())}), y = be.alloc(s);
          Tensor d = with_draws ? be.alloc(Shape{n * kDrawInts}, DType::I32) : Tensor();
          be.upload(bytes.data(), x);
          be.upload(map->data(), a);
          if (with_draws) be.upload(draws.data(), d);
          be.fill(y, 123.0f);  // every element must be written
          be.decode_bytes(x, d, a, y);
          out[b].resize(static_cast<size_t>(s.numel()));
          be.download(y, out[b].data());
        }
        size_t differ = 0;
        for (size_t i = 0; i < out[0].size(); ++i) differ += std::memcmp(&out[0][i], &out[1][i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "batch " << n << (with_draws ? " with draws" : " without draws")
                              << (map == &flow_affine ? ", flow" : "");
      }
}

#if CNNSCALE_HAVE_CUDA
// The lowering (im2col) kernels copy bits, so both must reproduce, bit for bit, a plain loop over
// (row, column): the field's pixel where it lies in the image, zero in the padding and in the
// columns past r*s*c. x holds non-zero bit patterns, and col starts as all ones, so a zero or a
// stale word in the wrong place shows. The shapes: a 16-bit ResNet stem (3 channels, 7x7, stride
// 2, whose 6-byte pixels the per-row kernel moves 2 bytes at a time), a dilated 4-channel case,
// CaffeNet's fp32 conv1 (stride 4), a width lowering (one row high), 256 channels on a 61-pixel
// row (the tiled kernel splits the row into runs, the last one short), and rows of 147 elements,
// which are not 16-byte aligned, so only the per-row kernel may take them.
TEST(CudaKernels, TiledAndPerRowLoweringsMatchAPlainLoop) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  struct Case {
    const char* name;
    DType dtype;
    cuda::Im2colShape g;
  };
  auto shape = [](int64_t n, int64_t h, int64_t w, int64_t c, int r, int s, int stride, int pad, int dilation,
                  int64_t cols) {
    cuda::Im2colShape g;
    g.n = n, g.h = h, g.w = w, g.c = c, g.r = r, g.s = s;
    g.stride_h = g.stride_w = stride;
    g.pad_h = g.pad_w = pad;
    g.dilation_h = g.dilation_w = dilation;
    g.oh = (h + 2 * pad - ((r - 1) * dilation + 1)) / stride + 1;
    g.ow = (w + 2 * pad - ((s - 1) * dilation + 1)) / stride + 1;
    g.cols = cols;
    return g;
  };
  cuda::Im2colShape width = shape(6, 1, 40, 3, 1, 7, 2, 3, 1, 24);
  width.pad_h = 0;  // as width_lowered_input: one image row in, one lowered row out
  width.stride_h = 1;
  width.oh = 1;
  const std::vector<Case> cases = {
      {"bf16 stem", DType::BF16, shape(2, 30, 30, 3, 7, 7, 2, 3, 1, 152)},
      {"bf16 dilated, 4 channels", DType::BF16, shape(3, 9, 13, 4, 3, 3, 1, 1, 2, 40)},
      {"f32 CaffeNet conv1", DType::F32, shape(2, 47, 47, 3, 11, 11, 4, 0, 1, 368)},
      {"bf16 width lowering", DType::BF16, width},
      {"bf16 256 channels, 61 wide", DType::BF16, shape(2, 5, 61, 256, 3, 3, 1, 1, 1, 2304)},
      {"bf16 unaligned rows", DType::BF16, shape(2, 12, 12, 3, 7, 7, 2, 3, 1, 147)},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    const cuda::Im2colShape& g = tc.g;
    const size_t unit = dtype_size(tc.dtype), x_n = static_cast<size_t>(g.n * g.h * g.w * g.c),
                 rows = static_cast<size_t>(g.n * g.oh * g.ow), col_n = rows * static_cast<size_t>(g.cols);
    // Units of the element's width; the values are bit patterns, never zero.
    std::vector<uint32_t> x(x_n);
    for (size_t i = 0; i < x_n; ++i)
      x[i] = (static_cast<uint32_t>(i) * 2654435761u >> 8 | 1u) & (unit == 2 ? 0xffffu : ~0u);
    std::vector<uint32_t> expected(col_n, 0);
    for (size_t row = 0; row < rows; ++row) {
      const int64_t ox = static_cast<int64_t>(row) % g.ow, oy = static_cast<int64_t>(row) / g.ow % g.oh,
                    b = static_cast<int64_t>(row) / (g.ow * g.oh);
      for (int64_t k = 0; k < g.r * g.s * g.c; ++k) {
        const int64_t c = k % g.c, kx = k / g.c % g.s, ky = k / g.c / g.s;
        const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h,
                      ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
          expected[row * static_cast<size_t>(g.cols) + static_cast<size_t>(k)] =
              x[static_cast<size_t>(((b * g.h + iy) * g.w + ix) * g.c + c)];
      }
    }
    std::vector<unsigned char> x_bytes(x_n * unit);
    for (size_t i = 0; i < x_n; ++i) std::memcpy(x_bytes.data() + i * unit, &x[i], unit);  // little-endian low part
    void *dx = nullptr, *dcol = nullptr;
    ASSERT_EQ(cudaMalloc(&dx, x_bytes.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dcol, col_n * unit), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x_bytes.data(), x_bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    const bool aligned = g.cols * static_cast<int64_t>(unit) % 16 == 0;
    for (cuda::Im2colKernel kernel : {cuda::Im2colKernel::PerRow, cuda::Im2colKernel::Tiled}) {
      SCOPED_TRACE(kernel == cuda::Im2colKernel::Tiled ? "tiled" : "per row");
      ASSERT_EQ(cudaMemset(dcol, 0xff, col_n * unit), cudaSuccess);
      if (kernel == cuda::Im2colKernel::Tiled && !aligned) {
        EXPECT_THROW(cuda::launch_im2col_nhwc(tc.dtype, g, dx, dcol, nullptr, kernel), RuntimeError);
        continue;
      }
      cuda::launch_im2col_nhwc(tc.dtype, g, dx, dcol, nullptr, kernel);
      std::vector<unsigned char> got(col_n * unit);
      ASSERT_EQ(cudaMemcpy(got.data(), dcol, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      size_t wrong = 0, first = col_n;
      for (size_t i = 0; i < col_n; ++i) {
        uint32_t v = 0;
        std::memcpy(&v, got.data() + i * unit, unit);
        if (v != expected[i] && wrong++ == 0) first = i;
      }
      EXPECT_EQ(wrong, 0u) << "first wrong element: row " << first / static_cast<size_t>(g.cols) << ", column "
                           << first % static_cast<size_t>(g.cols);
    }
    cudaFree(dx);
    cudaFree(dcol);
  }
}
#endif

}  // namespace
}  // namespace cnnscale::testing
