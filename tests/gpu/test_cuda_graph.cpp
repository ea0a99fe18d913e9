// CUDA graphs: the ops that read their per-step values from device memory agree bit for bit with
// their host-value twins; captured work replays with each replay's values and times its points;
// a capture that would synchronise fails with a clear error and leaves the backend usable; frozen
// weights refresh their copies once. Trainers whose steps replay captured graphs:
// test_trainer_graph.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"  // a deterministic backend for the bit-for-bit comparison
#include "backend/cuda/cuda_entry.hpp"    // a one-rank NCCL communicator
#include "backend/communicator.hpp"
#endif
#include "common/layer_harness.hpp"
#include "core/rng.hpp"
#include "data/synthetic_dataset.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"
#include "graph_test_util.hpp"

namespace cnnscale {
namespace {

using testing::fill_uniform;
using testing::to_host;

using namespace graph_test;

TEST(CudaGraph, DeviceValueOpsMatchTheirHostValueTwins) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu:0");
  Backend& g = *backend;
  Tensor it = g.alloc(Shape{1}, DType::I32);
  const int32_t iteration = 123457;
  g.upload(&iteration, it);
  // Dropout in f32 and bf16, forward and backward: the device iteration gives the host stream's mask.
  for (DType d : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x32 = g.alloc(Shape{3, 5, 7, 11});
    fill_uniform(g, x32, 9, -1, 1);
    Tensor x = g.alloc(x32.shape(), d), host = g.alloc(x32.shape(), d), dev = g.alloc(x32.shape(), d);
    g.convert(x32, x);
    g.dropout_forward(0.3f, 77, dropout_stream(iteration, 6), x, host);
    g.dropout_forward_at(0.3f, 77, it, 6, x, dev);
    EXPECT_EQ(raw_bytes(g, host), raw_bytes(g, dev));
    g.dropout_backward(0.3f, 77, dropout_stream(iteration, 6), x, host);
    g.dropout_backward_at(0.3f, 77, it, 6, x, dev);
    EXPECT_EQ(raw_bytes(g, host), raw_bytes(g, dev));
    // A different iteration is a different mask (the device value is really read).
    g.dropout_forward(0.3f, 77, dropout_stream(iteration + 1, 6), x, host);
    g.dropout_forward_at(0.3f, 77, it, 6, x, dev);
    EXPECT_NE(raw_bytes(g, host), raw_bytes(g, dev));
  }
  // The segmented SGD update with the learning rate on the device.
  const int64_t n = 1000;
  Tensor w1 = g.alloc(Shape{n}), w2 = g.alloc(Shape{n}), dw = g.alloc(Shape{n}), h1 = g.alloc(Shape{n}),
         h2 = g.alloc(Shape{n});
  fill_uniform(g, w1, 1, -1, 1);
  fill_uniform(g, dw, 2, -1, 1);
  fill_uniform(g, h1, 3, -1, 1);
  g.copy(w1, w2);
  g.copy(h1, h2);
  const std::vector<int32_t> ranges = {0, 300, 310, 1000};
  const std::vector<float> mults = {1.0f, 1.0f, 2.0f, 0.0f};
  Tensor r = g.alloc(Shape{4}, DType::I32), m = g.alloc(Shape{4}), lr = g.alloc(Shape{1});
  g.upload(ranges.data(), r);
  g.upload(mults.data(), m);
  g.fill(lr, 0.037f);
  g.sgd_update_segments(w1, dw, h1, r, m, 0.037f, 0.9f, 5e-4f);
  g.sgd_update_segments_at(w2, dw, h2, r, m, lr, 0.9f, 5e-4f);
  EXPECT_TRUE(same_bits(to_host(g, w1), to_host(g, w2)));
  EXPECT_TRUE(same_bits(to_host(g, h1), to_host(g, h2)));
  // The divergence flag takes the device tag.
  Tensor flag = g.alloc(Shape{1}, DType::I32), tag = g.alloc(Shape{1}, DType::I32);
  const int32_t t = 4242;
  g.upload(&t, tag);
  g.fill(flag, 0.0f);
  g.fill(w1.view(17, Shape{1}), std::numeric_limits<float>::infinity());
  g.flag_nonfinite_at(w1, tag, flag);
  int32_t got = 0;
  g.download(flag, &got);
  EXPECT_EQ(got, t);

  // A skipped update leaves weights and history alone; a not-skipped one is the plain update.
  Tensor skip = g.alloc(Shape{1}, DType::I32);
  fill_uniform(g, w1, 1, -1, 1);
  g.copy(w1, w2);
  const std::vector<float> w_before = to_host(g, w1), h_before = to_host(g, h1);
  g.fill_i32(skip, 1);
  g.sgd_update_segments_at(w1, dw, h1, r, m, lr, 0.9f, 5e-4f, skip);
  EXPECT_TRUE(same_bits(to_host(g, w1), w_before));
  EXPECT_TRUE(same_bits(to_host(g, h1), h_before));
  g.copy(h1, h2);
  g.fill_i32(skip, 0);
  g.sgd_update_segments_at(w1, dw, h1, r, m, lr, 0.9f, 5e-4f, skip);
  g.sgd_update_segments_at(w2, dw, h2, r, m, lr, 0.9f, 5e-4f);
  EXPECT_TRUE(same_bits(to_host(g, w1), to_host(g, w2)));
  EXPECT_FALSE(same_bits(to_host(g, w1), w_before));

  // The scaled conversion with the scale on the device, into fp16 and back, in place too.
  Tensor scale = g.alloc(Shape{2}), x16 = g.alloc(Shape{n}, DType::F16), y16 = g.alloc(Shape{n}, DType::F16);
  const float sc[2] = {1024.0f, 1.0f / 1024.0f};
  g.upload(sc, scale);
  g.convert(dw, x16, 1024.0f);
  g.convert_scaled_at(dw, y16, scale.view(0, Shape{1}));
  EXPECT_EQ(raw_bytes(g, x16), raw_bytes(g, y16));
  g.convert_scaled_at(y16, w2, scale.view(1, Shape{1}));
  g.convert(x16, w1, 1.0f / 1024.0f);
  EXPECT_TRUE(same_bits(to_host(g, w1), to_host(g, w2)));
  g.convert_scaled_at(w2, w2, scale.view(0, Shape{1}));
  g.convert(w1, w1, 1024.0f);
  EXPECT_TRUE(same_bits(to_host(g, w1), to_host(g, w2)));

  // The loss sum and kept loss that leave skipped steps out: a skipped inf is neither added nor
  // kept, a 3 is; beta 0 assigns over the kept loss's initial NaN.
  Tensor loss = g.alloc(Shape{1}), sum = g.alloc(Shape{1}), kept = g.alloc(Shape{1});
  g.fill(sum, 0.5f);
  g.fill(kept, std::numeric_limits<float>::quiet_NaN());
  g.fill(loss, std::numeric_limits<float>::infinity());
  g.fill_i32(skip, 1);
  g.axpby_unless(0.5f, loss, 1.0f, sum, skip);
  g.axpby_unless(1.0f, loss, 0.0f, kept, skip);
  g.fill(loss, 3.0f);
  g.fill_i32(skip, 0);
  g.axpby_unless(0.5f, loss, 1.0f, sum, skip);
  g.axpby_unless(1.0f, loss, 0.0f, kept, skip);
  float sum_now = 0, kept_now = 0;
  g.download(sum, &sum_now);
  g.download(kept, &kept_now);
  EXPECT_EQ(sum_now, 2.0f);
  EXPECT_EQ(kept_now, 3.0f);

  // The loss-scale rule's kernel against the CPU backend's host rule, over a sequence that halves,
  // grows (interval 3), caps and ends in divergence at scale 1.
  auto cpu = make_backend("cpu");
  struct Side {
    Backend& b;
    Tensor found = b.alloc(Shape{1}, DType::I32), sc = b.alloc(Shape{2}), st = b.alloc(Shape{3}, DType::I32),
           tg = b.alloc(Shape{1}, DType::I32), nf = b.alloc(Shape{1}, DType::I32);
    std::vector<float> step(bool overflow, int32_t step_tag, float max_scale) {
      b.fill_i32(found, overflow ? 1 : 0);
      b.fill_i32(tg, step_tag);
      b.update_loss_scale(found, sc, st, tg, nf, 3, max_scale);
      std::vector<float> out(2);
      b.download(sc, out.data());
      int32_t s[3], f = 0;
      b.download(st, s);
      b.download(nf, &f);
      for (int32_t v : {s[0], s[1], s[2], f}) out.push_back(static_cast<float>(v));
      return out;
    }
  };
  Side dev{g}, host{*cpu};
  const float start[2] = {8.0f, 0.125f};
  g.upload(start, dev.sc);
  cpu->upload(start, host.sc);
  const bool overflows[] = {true, false, false, false, false, false, false, true, true, true, true, true, true};
  int32_t step_tag = 1;
  for (bool o : overflows) {
    SCOPED_TRACE(step_tag);
    EXPECT_EQ(dev.step(o, step_tag, 16.0f), host.step(o, step_tag, 16.0f));
    ++step_tag;
  }
  EXPECT_EQ(host.step(false, step_tag, 16.0f)[5], 12) << "the sequence ends in divergence at step 12, at scale 1";
}

TEST(CudaGraph, CapturedWorkReplaysWithEachReplaysValuesAndTimesItsPoints) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu:0");
  Backend& g = *backend;
  ASSERT_TRUE(g.can_capture());
  Tensor it = g.alloc(Shape{1}, DType::I32), x = g.alloc(Shape{4096}), y = g.alloc(Shape{4096}),
         expect = g.alloc(Shape{4096});
  fill_uniform(g, x, 4, -1, 1);
  int32_t zero = 0;
  g.upload(&zero, it);
  // Run once uncaptured (nothing left to set up), then capture: dropout at the device iteration,
  // a timing point, then y = 2 y.
  auto dropout = [&] { g.dropout_forward_at(0.5f, 5, it, 3, x, y); };
  auto scale = [&] { g.axpby(0.0f, x, 2.0f, y); };
  dropout();
  scale();
  for (CaptureOptions how : {CaptureOptions{}, CaptureOptions{CaptureOptions::Points::Nodes, 2}}) {
    const bool nodes = how.points == CaptureOptions::Points::Nodes;
    SCOPED_TRACE(nodes ? "event nodes, 2 copies" : "segments");
    std::unique_ptr<CapturedWork> graph = g.capture(
        [&] {
          dropout();
          EXPECT_EQ(g.capture_timing_point(), 0u);
          scale();
        },
        how);
    ASSERT_EQ(graph->timing_points(), 1u);
    EXPECT_TRUE(graph->valid());
    std::vector<std::vector<std::shared_ptr<TimingEvent>>> held;
    for (int32_t i = 1; i <= 4; ++i) {
      g.upload(&i, it);
      auto begin = g.record_timing_event();
      ASSERT_TRUE(graph->ready());
      std::vector<std::shared_ptr<TimingEvent>> points = graph->launch();
      ASSERT_EQ(points.size(), 1u);
      auto end = g.record_timing_event();
      g.dropout_forward(0.5f, 5, dropout_stream(static_cast<uint64_t>(i), 3), x, expect);
      g.axpby(0.0f, x, 2.0f, expect);
      EXPECT_TRUE(same_bits(to_host(g, y), to_host(g, expect))) << "replay " << i;
      const double to_point = g.elapsed_ms(*begin, *points[0]), to_end = g.elapsed_ms(*begin, *end);
      EXPECT_GE(to_point, 0.0);
      EXPECT_LE(to_point, to_end);
      held.push_back(std::move(points));
      // Event nodes: a copy is replayed again only once its last replay's events are let go.
      if (nodes && held.size() == 2) {
        EXPECT_FALSE(graph->ready()) << "both copies' events are held";
        held.erase(held.begin());
        EXPECT_TRUE(graph->ready());
      }
    }
  }
}

#if CNNSCALE_HAVE_CUDA
// The reason for event nodes: a second stream forked from the capture that runs across a timing
// point. A segmented capture cannot end there and says so; event nodes time both streams.
TEST(CudaGraph, EventNodesTimeAStreamThatRunsAcrossATimingPoint) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  CudaBackend g(0);
  Tensor x = g.alloc(Shape{1 << 20}), y = g.alloc(Shape{1 << 20});
  fill_uniform(g, x, 4, -1, 1);
  // A stream of its own for each capture: the failed one leaves its stream in that capture's ruins.
  cudaStream_t streams[2] = {nullptr, nullptr};
  for (cudaStream_t& st : streams) ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cudaStream_t side = streams[0];
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  size_t side_begin = 0, side_end = 0;
  auto work = [&] {
    ASSERT_EQ(cudaEventRecord(fork, g.stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
    side_begin = g.capture_timing_point(side);
    ASSERT_EQ(cudaMemcpyAsync(y.raw(), x.raw(), x.bytes(), cudaMemcpyDeviceToDevice, side), cudaSuccess);
    side_end = g.capture_timing_point(side);
    g.capture_timing_point();  // on the compute stream, while the side stream is apart
    g.axpby(2.0f, x, 0.0f, x);
    ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(g.stream(), join, 0), cudaSuccess);
  };
  EXPECT_THROW(g.capture(work), RuntimeError);
  side = streams[1];
  std::unique_ptr<CapturedWork> graph = g.capture(work, CaptureOptions{CaptureOptions::Points::Nodes, 3});
  ASSERT_EQ(graph->timing_points(), 3u);
  EXPECT_EQ(side_begin, 0u);
  EXPECT_EQ(side_end, 1u);
  const std::vector<float> before = to_host(g, x);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(graph->ready());
    std::vector<std::shared_ptr<TimingEvent>> points = graph->launch();
    const double copy_ms = g.elapsed_ms(*points[0], *points[1]);
    EXPECT_GT(copy_ms, 0.0) << "replay " << i;
  }
  g.synchronize();
  std::vector<float> expect = before;
  for (float& v : expect) v *= 32.0f;  // five replays of x = 2 x, exact in binary
  EXPECT_TRUE(same_bits(to_host(g, x), expect));
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  for (cudaStream_t st : streams) cudaStreamDestroy(st);
}
#endif  // CNNSCALE_HAVE_CUDA

TEST(CudaGraph, CaptureThatWouldSynchroniseFailsClearlyAndTheBackendGoesOn) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu:0");
  Backend& g = *backend;
  Tensor x = g.alloc(Shape{16});
  g.fill(x, 1.5f);
  float host[16];
  try {
    g.capture([&] {
      g.axpby(2.0f, x, 0.0f, x);
      g.download(x, host);  // a host read cannot be part of a graph
    });
    FAIL() << "the capture did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
  g.fill(x, 3.0f);
  g.download(x, host);
  EXPECT_EQ(host[5], 3.0f);
}

// Inference nets freeze their weights: the 16-bit copies are refreshed at the first forward after
// freeze_weights and then left alone, so a master written later is not seen until the next freeze.
TEST(NetGpu, FrozenWeightsRefreshTheirCopiesOnce) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = make_backend("gpu:0", 0, Precision::BF16);
  Backend& g = *backend;
  const NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet_bn.yaml");
  Net net(spec, g, 4, 7, DType::BF16);
  fill_uniform(g, net.input(), 3, -1, 1);
  g.fill(net.labels(), 0.0f);
  const std::string scores = net.layers().back()->bottoms()[0];
  auto out = [&] {
    net.forward(Phase::Test, 0);
    Tensor wide = g.alloc(net.blob(scores).shape());
    g.convert(net.blob(scores), wide);
    return to_host(g, wide);
  };
  net.freeze_weights(true);
  const std::vector<float> before = out();
  // Every master that has a 16-bit compute copy zeroed behind it (fp32 parameters such as batch
  // norm's scale and shift are computed with directly, so they are left alone).
  int mirrored = 0;
  for (Param* p : net.params())
    if (p->spec.dtype != DType::F32) {
      g.fill(p->master, 0.0f);
      ++mirrored;
    }
  ASSERT_GT(mirrored, 0);
  EXPECT_TRUE(same_bits(out(), before));
  net.freeze_weights(true);  // asked again: the copies follow the masters once more
  EXPECT_FALSE(same_bits(out(), before));
}

}  // namespace
}  // namespace cnnscale
