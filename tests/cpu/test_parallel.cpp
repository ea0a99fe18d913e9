// The process-local parts of data-parallel training (no MPI needed): batch split, gradient bucket
// plan, the backward hook that issues buckets only once their gradients are final, the loss scale,
// sharded loading, the shared-GPU check and the watchdog's timeout line and exit code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "data/loader.hpp"
#include "data/synthetic_dataset.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/device_binding.hpp"
#include "parallel/gradient_buckets.hpp"
#include "core/half.hpp"
#include "core/watchdog.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

TEST(BatchSplit, SharesDifferByAtMostOne) {
  EXPECT_EQ(split_global_batch(64, 3), (std::vector<int64_t>{22, 21, 21}));
  EXPECT_EQ(split_global_batch(64, 4), (std::vector<int64_t>{16, 16, 16, 16}));
  EXPECT_EQ(split_global_batch(7, 1), (std::vector<int64_t>{7}));
  EXPECT_EQ(split_global_batch(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_THROW(split_global_batch(2, 3), ConfigError);
  EXPECT_EQ(parse_allreduce_algo("tree"), AllreduceAlgo::Tree);
  EXPECT_THROW(parse_allreduce_algo("butterfly"), ConfigError);
  for (CtaPolicy p : {CtaPolicy::Default, CtaPolicy::Efficiency, CtaPolicy::Zero})
    EXPECT_EQ(parse_cta_policy(to_string(p), "--cta-policy"), p);
  try {
    parse_cta_policy("fewest", "--allreduce-cta-policy");
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--allreduce-cta-policy: expected default, efficiency or zero, got 'fewest'");
  }
}

TEST(BatchSplit, ManualSharesAreCheckedAgainstRanksAndTheGlobalBatch) {
  EXPECT_EQ(parse_split_policy("even"), SplitPolicy::Even);
  EXPECT_EQ(parse_split_policy("manual"), SplitPolicy::Manual);
  EXPECT_THROW(parse_split_policy("fastest"), ConfigError);
  EXPECT_EQ(manual_split(64, {1, 30, 2, 31}, 4), (std::vector<int64_t>{1, 30, 2, 31}));
  EXPECT_EQ(manual_split(8, {8}, 1), (std::vector<int64_t>{8}));
  auto message = [](int64_t batch, std::vector<int64_t> shares, int ranks) {
    try {
      manual_split(batch, shares, ranks);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(64, {32, 32}, 3), "--shares: 2 share(s) for 3 rank(s): give one per rank, in rank order");
  EXPECT_EQ(message(64, {40, 25}, 2), "--shares: the shares sum to 65, but the global batch (--batch) is 64");
  EXPECT_EQ(message(64, {64, 0}, 2), "--shares: rank 1 gets 0 samples; every rank needs at least one");
  EXPECT_EQ(message(64, {65, -1}, 2), "--shares: rank 1 gets -1 samples; every rank needs at least one");
}

TEST(GradientBuckets, PlanCutsAtParametersAndSplitsLargeOnes) {
  // Three parameters (flat order) with alignment gaps; cap 256 elements.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 100}, {128, 200}, {256, 1000}};
  auto b = GradientBuckets::plan(ranges, 1000, 256);
  // [0,256) holds the first two; the 744-element third is cut into 256-element pieces.
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].begin, 0);
  EXPECT_EQ(b[0].end, 256);
  EXPECT_EQ(b[1].end, 512);
  EXPECT_EQ(b[2].end, 768);
  EXPECT_EQ(b[3].end, 1000);
  // A cap below the alignment rounds up to it; a huge one gives a single bucket.
  EXPECT_EQ(GradientBuckets::plan(ranges, 1000, 1 << 30).size(), 1u);
  for (const auto& x : GradientBuckets::plan(ranges, 1000, 10)) EXPECT_LE(x.end - x.begin, 64);
  // A cut at a parameter start, not inside it, when the parameter fits a fresh bucket.
  auto c = GradientBuckets::plan({{0, 100}, {128, 300}}, 300, 192);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].end, 128);
}

// Gathered parameters (local) make buckets of their own, cut at their first start and the next
// parameter's start; the others are planned between them as without any; the buckets still cover
// the buffer without gaps, a local run first or in the middle.
TEST(GradientBuckets, GatheredParametersAreLocalBucketsOfTheirOwn) {
  auto b = GradientBuckets::plan({{0, 100}, {128, 300}, {320, 400}}, {false, true, false}, 400, 192);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].begin, 0);
  EXPECT_EQ(b[0].end, 128);
  EXPECT_FALSE(b[0].local);
  EXPECT_EQ(b[1].begin, 128);
  EXPECT_EQ(b[1].end, 320);
  EXPECT_TRUE(b[1].local);
  EXPECT_EQ(b[2].begin, 320);
  EXPECT_EQ(b[2].end, 400);
  EXPECT_FALSE(b[2].local);
  auto first = GradientBuckets::plan({{0, 100}, {128, 300}, {320, 700}}, {true, true, false}, 700, 192);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_TRUE(first[0].local);
  EXPECT_EQ(first[0].end, 320);
  EXPECT_EQ(first[1].begin, 320);  // the 380-element parameter split at the cap, as without locals
  EXPECT_EQ(first[1].end, 512);
  EXPECT_EQ(first[2].end, 700);
  auto none = GradientBuckets::plan({{0, 100}, {128, 300}}, {false, false}, 300, 192);
  auto plain = GradientBuckets::plan({{0, 100}, {128, 300}}, 300, 192);
  ASSERT_EQ(none.size(), plain.size());
  for (size_t i = 0; i < none.size(); ++i) EXPECT_TRUE(none[i].begin == plain[i].begin && none[i].end == plain[i].end);
}

// Each bucket rounds the unmirrored gradients (batch norm's f32 ones) that lie in it, relative to
// its start; one longer than a bucket is cut at the bucket bounds, every element in exactly one
// table; a bucket with none has an empty table; local buckets round theirs too.
TEST(GradientBuckets, RoundingTablesCoverEachUnmirroredElementOnce) {
  const std::vector<GradientBucket> buckets = {{0, 128}, {128, 320, true}, {320, 512}, {512, 700}, {700, 768}};
  const std::vector<std::pair<int64_t, int64_t>> unmirrored = {{64, 70}, {128, 140}, {192, 200}, {448, 600}};
  const auto tables = GradientBuckets::plan_rounding(buckets, unmirrored);
  ASSERT_EQ(tables.size(), buckets.size());
  EXPECT_EQ(tables[0], (std::vector<int32_t>{64, 70}));
  EXPECT_EQ(tables[1], (std::vector<int32_t>{0, 12, 64, 72}));  // the local bucket's, relative to 128
  EXPECT_EQ(tables[2], (std::vector<int32_t>{128, 192}));       // [448, 512) of the cut one
  EXPECT_EQ(tables[3], (std::vector<int32_t>{0, 88}));          // its rest, [512, 600)
  EXPECT_TRUE(tables[4].empty());
  std::vector<int> covered(768, 0);
  for (size_t k = 0; k < buckets.size(); ++k)
    for (size_t i = 0; i < tables[k].size(); i += 2)
      for (int64_t e = buckets[k].begin + tables[k][i]; e < buckets[k].begin + tables[k][i + 1]; ++e) ++covered[e];
  for (int64_t e = 0; e < 768; ++e) {
    const bool in =
        std::any_of(unmirrored.begin(), unmirrored.end(), [e](const auto& r) { return e >= r.first && e < r.second; });
    EXPECT_EQ(covered[static_cast<size_t>(e)], in ? 1 : 0) << "element " << e;
  }
}

// Records every allreduce together with the bucket's contents at the moment it was issued.
class RecordingCommunicator final : public Communicator {
 public:
  struct Call {
    Tensor tensor;
    std::vector<float> values;
    size_t layers_done;
  };
  std::string name() const override { return "recording"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum_async(const Tensor& t) override {
    calls.push_back({t, std::vector<float>(t.f32(), t.f32() + t.numel()), layers_done});
  }
  void allgather_async(const Tensor&, const Tensor&) override { ADD_FAILURE() << "no gather expected"; }
  void wait() override {}
  void synchronize_host() override {}
  void abort() override {}
  std::vector<Call> calls;
  size_t layers_done = 0;
};

const char* kBucketNet = R"(name: buckets
input: {shape: [1, 12, 12], classes: 5}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3, weight_filler: {type: xavier}}
  - {name: relu1, type: ReLU, bottom: conv1, top: relu1}
  - {name: conv2, type: Convolution, bottom: relu1, top: conv2, num_output: 8, kernel: 3, weight_filler: {type: xavier}}
  - {name: pool, type: Pooling, bottom: conv2, top: pool, pool: max, kernel: 2, stride: 2}
  - {name: fc1, type: InnerProduct, bottom: pool, top: fc1, num_output: 40, weight_filler: {type: xavier}}
  - {name: relu2, type: ReLU, bottom: fc1, top: relu2}
  - {name: fc2, type: InnerProduct, bottom: relu2, top: fc2, num_output: 5, weight_filler: {type: xavier}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc2, label], top: loss}
)";

void random_batch(Backend& backend, Net& net, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> data(static_cast<size_t>(net.input().numel()));
  for (float& v : data) v = normal(rng);
  std::vector<int32_t> labels(static_cast<size_t>(net.batch()));
  for (auto& l : labels) l = static_cast<int32_t>(rng() % 5);
  backend.upload(data.data(), net.input());
  backend.upload(labels.data(), net.labels());
}

// An exchange of the f32 (or `dtype`) gradients in buckets of `bucket_bytes`.
GradientPlan exchange_plan(int64_t bucket_bytes, bool overlap, DType dtype = DType::F32) {
  GradientPlan plan;
  plan.exchange = true;
  plan.bucket_bytes = bucket_bytes;
  plan.overlap = overlap;
  plan.exchange_dtype = dtype;
  return plan;
}

TEST(GradientBuckets, IssuedDuringBackwardOnlyOnceFinal) {
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load_string(kBucketNet, "buckets.yaml");
  Net net(spec, *backend, 4, 3);
  random_batch(*backend, net, 9);
  RecordingCommunicator comm;
  // ~1/5 of the parameters per bucket: several buckets, fc1's weight split in pieces.
  GradientBuckets buckets(net, comm, exchange_plan(net.flat_grads().numel() * 4 / 5, true));
  ASSERT_GE(buckets.buckets().size(), 4u);
  // Poison the gradients: a bucket sent before backward wrote it would carry the poison.
  backend->fill(net.flat_grads(), 12345.0f);
  net.forward(Phase::Train, 0);
  buckets.begin_backward();
  net.backward(0, [&](size_t l) {
    ++comm.layers_done;
    buckets.layer_done(l);
  });
  buckets.end_backward();
  ASSERT_EQ(comm.calls.size(), buckets.buckets().size());
  const float* grads = net.flat_grads().f32();
  int64_t covered = 0;
  for (size_t i = 0; i < comm.calls.size(); ++i) {
    const auto& call = comm.calls[i];
    const int64_t begin = static_cast<int64_t>(call.tensor.offset_bytes() / 4);
    EXPECT_EQ(begin, covered) << "buckets are contiguous, in flat order";
    covered += call.tensor.numel();
    EXPECT_EQ(0, std::memcmp(call.values.data(), grads + begin, call.values.size() * 4))
        << "bucket " << i << " was issued before its gradients were final";
  }
  EXPECT_EQ(covered, net.flat_grads().numel());
  // Overlap: the first bucket (fc2, the last layer) leaves before backward reaches conv1.
  EXPECT_LT(comm.calls.front().layers_done, net.layers().size());

  // Without overlap: one allreduce of the whole buffer after backward.
  RecordingCommunicator one;
  GradientBuckets whole(net, one, exchange_plan(1 << 20, false));
  whole.begin_backward();
  net.backward(1, [&](size_t l) { whole.layer_done(l); });
  EXPECT_TRUE(one.calls.empty());
  whole.end_backward();
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].tensor.numel(), net.flat_grads().numel());
}

// Stands for a job of two ranks that hold the same gradients: each allreduce doubles the tensor in
// its own dtype (2x is exact in every binary format, so the only rounding left is the exchange's).
class DoublingCommunicator final : public Communicator {
 public:
  std::string name() const override { return "doubling"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum_async(const Tensor& t) override {
    dtypes.push_back(t.dtype());
    for (int64_t i = 0; i < t.numel(); ++i) store_float(t.dtype(), 2 * load_float(t.dtype(), t.raw(), i), t.raw(), i);
  }
  void allgather_async(const Tensor&, const Tensor&) override { ADD_FAILURE() << "no gather expected"; }
  void wait() override { ++waits; }
  void synchronize_host() override {}
  void abort() override {}
  std::vector<DType> dtypes;
  int waits = 0;
};

// A 16-bit exchange rounds each gradient to the format once, sums in it and widens back: after
// wait() every f32 gradient is exactly 2 * round(g) for the f32 gradient g of the same step. Under
// loss scaling (fp16) the values on the wire are g * scale, so the result is 2 * round(g * s) / s.
TEST(GradientBuckets, SixteenBitExchangeRoundsEachGradientOnce) {
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load_string(kBucketNet, "buckets.yaml");
  struct Case {
    DType dtype;
    double grad_scale;
    bool overlap;
    bool scale_on_device;  // the fp16 trainer's way (Net::set_grad_scale_on_device)
  };
  for (const Case c : {Case{DType::BF16, 1.0, true, false}, Case{DType::F16, 1024.0, true, false},
                       Case{DType::F16, 1.0, false, false}, Case{DType::F16, 1024.0, true, true}}) {
    SCOPED_TRACE(fmt::format("{} scale {} overlap {} on device {}", dtype_name(c.dtype), c.grad_scale, c.overlap,
                             c.scale_on_device));
    Net net(spec, *backend, 4, 3);
    random_batch(*backend, net, 9);
    Tensor device_scale = backend->alloc(Shape{2});
    if (c.scale_on_device) {
      const float s[2] = {static_cast<float>(c.grad_scale), static_cast<float>(1.0 / c.grad_scale)};
      backend->upload(s, device_scale);
      net.set_grad_scale_on_device(device_scale);
    } else {
      net.set_grad_scale(c.grad_scale);
    }
    net.forward(Phase::Train, 0);
    net.backward(0);
    const std::vector<float> g(net.flat_grads().f32(), net.flat_grads().f32() + net.flat_grads().numel());

    DoublingCommunicator comm;
    GradientBuckets buckets(net, comm, exchange_plan(net.flat_grads().numel() * 4 / 5, c.overlap, c.dtype));
    EXPECT_EQ(buckets.exchange_dtype(), c.dtype);
    buckets.begin_backward();
    net.backward(0, [&](size_t l) { buckets.layer_done(l); });
    buckets.end_backward();
    buckets.wait();
    EXPECT_EQ(comm.waits, 1);
    ASSERT_EQ(comm.dtypes.size(), c.overlap ? buckets.buckets().size() : 1u);
    for (DType d : comm.dtypes) EXPECT_EQ(d, c.dtype);
    const auto s = static_cast<float>(c.grad_scale);
    const float* got = net.flat_grads().f32();
    int64_t rounded = 0, scale_mattered = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const float want = 2 * round_to(c.dtype, g[i] * s) / s;
      ASSERT_EQ(got[i], want) << "gradient " << i << " = " << g[i];
      rounded += want != 2 * g[i];
      scale_mattered += want != 2 * round_to(c.dtype, g[i]);
    }
    // Not vacuous: the exchange rounded most gradients, and the scale changed what fp16 kept.
    EXPECT_GT(rounded, static_cast<int64_t>(g.size()) / 2);
    if (c.grad_scale != 1.0) {
      EXPECT_GT(scale_mattered, 0);
    }
  }
}

TEST(LossScale, ScalesEveryGradient) {
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load_string(kBucketNet, "buckets.yaml");
  Net a(spec, *backend, 6, 3), b(spec, *backend, 6, 3);
  random_batch(*backend, a, 4);
  random_batch(*backend, b, 4);
  // A power of two: backward is linear in the loss gradient, so every rounding scales with it and
  // the result must be exactly 0.25 x the unscaled gradient (any other scale differs by ulps).
  b.set_loss_scale(0.25);
  for (Net* n : {&a, &b}) {
    n->forward(Phase::Train, 0);
    n->backward(0);
  }
  const float *ga = a.flat_grads().f32(), *gb = b.flat_grads().f32();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < a.flat_grads().numel(); ++i) {
    ASSERT_EQ(gb[i], 0.25f * ga[i]) << i;
    nonzero += ga[i] != 0.0f;
  }
  EXPECT_GT(nonzero, a.flat_grads().numel() / 2);
}

TEST(Loader, ShardsOfAGlobalBatchTileIt) {
  auto ds = std::make_shared<SyntheticDataset>(Shape{1, 2, 2}, 7, 200, SyntheticFill::Gaussian, 3);
  LoaderOptions whole;
  whole.batch = 64;
  whole.seed = 8;
  Loader full(ds, whole);
  std::vector<std::unique_ptr<Loader>> shards;
  int64_t begin = 0;
  for (int64_t n : split_global_batch(64, 3)) {
    LoaderOptions o = whole;
    o.shard_begin = begin;
    o.shard_count = n;
    shards.push_back(std::make_unique<Loader>(ds, o));
    begin += n;
  }
  for (int step = 0; step < 5; ++step) {  // crosses an epoch boundary (3 batches per epoch)
    const HostBatch& f = full.next();
    int64_t offset = 0;
    for (auto& s : shards) {
      const HostBatch& b = s->next();
      EXPECT_EQ(b.epoch, f.epoch);
      EXPECT_EQ(0, std::memcmp(b.labels, f.labels + offset, static_cast<size_t>(b.count) * 4)) << step;
      EXPECT_EQ(0, std::memcmp(b.data, f.data + offset * 4, static_cast<size_t>(b.count) * 16)) << step;
      offset += b.count;
      EXPECT_EQ(s->state().rng_state, full.state().rng_state);
      s->release(b.slot);
    }
    EXPECT_EQ(offset, 64);
    full.release(f.slot);
  }
  LoaderOptions bad = whole;
  bad.shard_begin = 60;
  bad.shard_count = 5;
  EXPECT_THROW(Loader(ds, bad), ConfigError);
}

// 8 ranks on a 4-GPU host: ranks 4..7 are told, by name, to launch at most 4 per node.
TEST(DeviceBinding, MoreRanksThanGpusOnANodeIsALaunchError) {
  check_gpu_visible(3, 3, "h", 3, 4);
  check_gpu_visible(7, 7, "h", 7, 8);
  check_gpu_visible(4, 4, "h", 4, 0);  // nothing visible: the backend reports that itself
  try {
    check_gpu_visible(5, 5, "node7", 5, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "rank 5 (node-local rank 5 on host node7) has no GPU: it was bound to gpu:5, but 4 GPU(s) are "
                 "visible there (0..3); launch at most one rank per GPU on each node (here: at most 4 ranks), or "
                 "use --device cpu");
  }
  // Second node of a 2 x 4 job: world rank 6 is node-local rank 2 there.
  check_gpu_visible(6, 2, "node8", 2, 4);
}

TEST(DeviceBinding, TwoRanksOnOneGpuAreNamed) {
  EXPECT_EQ(gpu_for_local_rank(1, 2, {}), 1);
  EXPECT_EQ(gpu_for_local_rank(1, 2, {0, 2}), 2);
  EXPECT_THROW(gpu_for_local_rank(0, 3, {0, 2}), ConfigError);
  check_distinct_devices({{"a", "cpu", ""}, {"a", "cpu", ""}});  // CPU ranks: nothing to compare
  check_distinct_devices({{"a", "gpu:0", "GPU-1"}, {"a", "gpu:1", "GPU-2"}, {"b", "gpu:0", "GPU-3"}});
  try {
    check_distinct_devices({{"a", "gpu:0", "GPU-1"}, {"a", "gpu:1", "GPU-2"}, {"a", "gpu:1", "GPU-2"}});
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "ranks 1 (host a, gpu:1) and 2 (host a, gpu:1) are bound to the same GPU GPU-2: give each rank its "
                 "own GPU (--gpus, or one rank per GPU per node)");
  }
  RankDevice d{"node7", "gpu:3", "GPU-abc"};
  RankDevice back = decode_rank_device(encode_rank_device(d));
  EXPECT_EQ(back.host, d.host);
  EXPECT_EQ(back.device, d.device);
  EXPECT_EQ(back.uuid, d.uuid);
}

TEST(Watchdog, StuckOperationEndsTheProcessWithOneLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Watchdog w(0.2, 5, "hostx", {});
        set_watchdog_iteration(7);
        BlockingOp op("allreduce wait");
        std::this_thread::sleep_for(std::chrono::seconds(20));  // the hang being detected
      },
      ::testing::ExitedWithCode(3),
      "^cnnscale: error: rank 5 \\(host hostx\\): allreduce wait at iteration 7 did not complete within 0.2 s; a "
      "peer rank failed or hung\n$");
}

TEST(Watchdog, OperationsThatCompleteAreNotReported) {
  bool fired = false;
  {
    Watchdog w(0.3, 0, "h", [&] { fired = true; });
    for (int i = 0; i < 20; ++i) {
      BlockingOp op("host sync");  // each well under the timeout
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Idle (no operation marked) for several timeouts: nothing to report either.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  }
  EXPECT_FALSE(fired);
  EXPECT_EQ(Watchdog::active(), nullptr);
}

}  // namespace
}  // namespace cnnscale
