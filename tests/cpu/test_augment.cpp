// Augmentation: shifts, mirrors and their draws by hand, deterministic across threads, ranks and a
// resume; byte batches decoded and trained as the host's float batches.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/backend.hpp"
#include "common/temp_dir.hpp"
#include "core/byte_input.hpp"
#include "core/hdf5_file.hpp"
#include "cpu/cli_runner.hpp"
#include "data/augment.hpp"
#include "data/datasets.hpp"
#include "data/fashion_mnist.hpp"
#include "data/image_list.hpp"
#include "data/loader.hpp"
#include "data/shard_convert.hpp"
#include "data/shards.hpp"
#include "data/synthetic_dataset.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"
#include "cpu/shards_test_util.hpp"

namespace cnnscale {
namespace {

using namespace shards_test;

// The byte path end to end through the trainer, as a GPU run takes it (bytes and draws uploaded
// into buffers sized for the largest batch, decoded by the backend, for training and for the
// evaluation's last, partial batch), on the CPU backend, whose decode the GPU kernel is tested
// against bit for bit: the same losses and accuracies as the host's float batches, augmented.
TEST(Augment, ByteBatchesTrainAsTheHostsFloatBatches) {
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  const NetSpec spec = NetSpec::load(resolve_network_path("lenet"));
  using Split = FashionMnistDataset::Split;
  const std::string dir = FashionMnistDataset::kDefaultDir;
  auto train = std::make_shared<SubsetDataset>(std::make_shared<FashionMnistDataset>(dir, Split::Train), 256);
  auto test = std::make_shared<SubsetDataset>(std::make_shared<FashionMnistDataset>(dir, Split::Test), 70);
  using Decode = TrainOptions::InputDecode;
  auto run = [&](Decode decode, const AugmentOptions& augment) {
    TrainOptions o;
    o.batch = 32;
    o.test_batch = 32;  // 70 test samples: 32, 32 and a last batch of 6
    o.iterations = 12;
    o.seed = 4;
    o.augment = augment;
    o.input_decode = decode;
    Trainer trainer(spec, *cpu, train, test, SolverConfig{}, o);
    return trainer.run();
  };
  const AugmentOptions augment{2, true};
  const TrainResult host = run(Decode::Auto, augment), bytes = run(Decode::Backend, augment);
  ASSERT_TRUE(host.test.has_value() && bytes.test.has_value());
  EXPECT_EQ(host.test->samples, 70);
  EXPECT_EQ(bytes.final_loss, host.final_loss);
  EXPECT_EQ(bytes.test->top1, host.test->top1);
  EXPECT_EQ(bytes.test->loss, host.test->loss);
  // The draws reached the decode: unaugmented bytes train to another loss.
  EXPECT_NE(run(Decode::Backend, AugmentOptions{}).final_loss, host.final_loss);
}

// Augmentation by hand on a 1x3x4 sample: a shift reads (y + dy, x + dx), zero outside; a mirror
// reverses each row first. Draws stay in range, cover it, mirror about half the samples, and depend
// only on (seed, epoch, sample).
TEST(Augment, ShiftMirrorAndDraws) {
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i + 1);  // rows 1-4, 5-8, 9-12
  std::vector<float> scratch, y = x;
  augment_sample(y.data(), 1, 3, 4, AugmentDraw{1, -1, false}, scratch);
  EXPECT_EQ(y, (std::vector<float>{0, 5, 6, 7, 0, 9, 10, 11, 0, 0, 0, 0}));
  y = x;
  augment_sample(y.data(), 1, 3, 4, AugmentDraw{0, 0, true}, scratch);
  EXPECT_EQ(y, (std::vector<float>{4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9}));
  y = x;
  // Mirrored, then shifted: output(y, x) = input(y - 1, (3 - x) + 1).
  augment_sample(y.data(), 1, 3, 4, AugmentDraw{-1, 1, true}, scratch);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0, 0, 4, 3, 2, 0, 8, 7, 6}));

  std::set<int64_t> shifts;
  int mirrored = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const AugmentDraw d = augment_draw(7, 3, i, 2, true);
    ASSERT_GE(d.dy, -2);
    ASSERT_LE(d.dy, 2);
    ASSERT_GE(d.dx, -2);
    ASSERT_LE(d.dx, 2);
    shifts.insert(d.dy * 10 + d.dx);
    mirrored += d.mirror ? 1 : 0;
    const AugmentDraw again = augment_draw(7, 3, i, 2, true);
    EXPECT_TRUE(again.dy == d.dy && again.dx == d.dx && again.mirror == d.mirror);
  }
  EXPECT_EQ(shifts.size(), 25u);  // every (dy, dx) of the 5 x 5 appears in 4000 draws
  // Binomial(4000, 1/2): standard deviation 31.6; 1800..2200 is over six of them either side.
  EXPECT_GT(mirrored, 1800);
  EXPECT_LT(mirrored, 2200);
  const AugmentDraw e0 = augment_draw(7, 0, 5, 2, true), e1 = augment_draw(7, 1, 5, 2, true);
  const AugmentDraw e2 = augment_draw(7, 2, 5, 2, true);
  EXPECT_FALSE(e0.dy == e1.dy && e0.dx == e1.dx && e1.dy == e2.dy && e1.dx == e2.dx) << "epochs draw alike";
}

// Training with augmentation from shards: the batches are the same for any thread count and rank
// split (the draw follows the sample), and a run resumed from its checkpoint ends bit-identical to
// the straight run; without augmentation the loss differs (it was applied).
TEST(Augment, DeterministicAcrossThreadsRanksAndResume) {
  TempDir t;
  const std::string dir = write_set(t.str(), 23);
  auto batches = [&](int threads, int64_t begin, int64_t count) {
    LoaderOptions o;
    o.batch = 6;
    o.seed = 3;
    o.threads = threads;
    o.shard_begin = begin;
    o.shard_count = count;
    o.augment = AugmentOptions{1, true};
    Loader loader(std::make_shared<ShardDataset>(dir, "train"), o);
    std::vector<float> all;
    for (int b = 0; b < 6; ++b) {
      const HostBatch& batch = loader.next();
      all.insert(all.end(), batch.data, batch.data + batch.count * kBytes);
      loader.release(batch.slot);
    }
    return all;
  };
  const std::vector<float> whole = batches(1, 0, 0);
  EXPECT_EQ(batches(4, 0, 0), whole);
  const std::vector<float> r0 = batches(1, 0, 2), r1 = batches(2, 2, 4);
  std::vector<float> merged;
  for (size_t b = 0; b < 6; ++b) {
    merged.insert(merged.end(), r0.begin() + b * 2 * kBytes, r0.begin() + (b + 1) * 2 * kBytes);
    merged.insert(merged.end(), r1.begin() + b * 4 * kBytes, r1.begin() + (b + 1) * 4 * kBytes);
  }
  EXPECT_EQ(merged, whole);

  const std::string fm = t.file("fm");
  ASSERT_EQ(testing::run_cnnscale({"data", "fashion-mnist", "--out", fm}).exit_code, 0);
  auto train = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"train", "--net",   "lenet", "--data",         "hdf5:" + fm, "--train-samples",
                                     "256",   "--batch", "32",    "--test-samples", "0",          "--no-results",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    testing::CliResult r = testing::run_cnnscale(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["final_loss"];
  };
  const std::vector<std::string> augment = {"--crop-pad", "3", "--mirror"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), augment.begin(), augment.end());
    return a;
  };
  const auto straight = train(with({"--iterations", "12"}));
  train(with({"--iterations", "6", "--checkpoint-dir", t.file("ck"), "--checkpoint-every", "6"}));
  EXPECT_EQ(train(with({"--iterations", "12", "--checkpoint-dir", t.file("ck"), "--resume", "auto"})), straight);
  EXPECT_NE(train({"--iterations", "12"}), straight);
  testing::expect_usage_error(
      {"train", "--net", "lenet", "--data", "hdf5:" + fm, "--crop-pad", "28", "--iterations", "1"},
      {"--crop-pad 28", "below"});
}

// Byte mode (what a GPU run uploads): the stored bytes and each sample's draw, decoded by the
// backend, give the float batches of the host path bit for bit, with and without augmentation,
// for several threads and over an epoch boundary; on shards with per-channel statistics and on
// Fashion-MNIST's IDX path. A dataset not stored as bytes is refused by name.
TEST(Augment, ByteBatchesDecodeToTheHostsFloatBatches) {
  TempDir t;
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  auto compare = [&](std::shared_ptr<const Dataset> ds, const AugmentOptions& augment, int threads) {
    const Shape sample = ds->sample_shape();
    LoaderOptions o;
    o.batch = 6;
    o.seed = 5;
    o.augment = augment;
    Loader floats(ds, o);
    o.bytes = true;
    o.threads = threads;
    Loader bytes(ds, o);
    std::vector<int64_t> dims = sample.dims();
    dims.insert(dims.begin(), o.batch);
    const Shape batch(dims);
    Tensor x = cpu->alloc(batch, DType::U8), y = cpu->alloc(batch), a = cpu->alloc(Shape{2 * sample[0]});
    Tensor d = augment.any() ? cpu->alloc(Shape{o.batch * kDrawInts}, DType::I32) : Tensor();
    const std::vector<float> affine = ds->byte_affine()->packed();
    cpu->upload(affine.data(), a);
    for (int64_t b = 0; b < 2 * floats.batches_per_epoch() + 1; ++b) {
      const HostBatch& f = floats.next();
      const HostBatch& u = bytes.next();
      ASSERT_EQ(u.data, nullptr);
      ASSERT_EQ(u.count, f.count);
      ASSERT_EQ(u.draws != nullptr, augment.any());
      cpu->upload(u.bytes, x);
      if (u.draws) cpu->upload(u.draws, d);
      cpu->decode_bytes(x, d, a, y);
      EXPECT_EQ(std::memcmp(y.f32(), f.data, static_cast<size_t>(f.count * sample.numel()) * sizeof(float)), 0)
          << ds->name() << ", " << augment.describe() << ", batch " << b;
      EXPECT_EQ(std::vector<int32_t>(u.labels, u.labels + u.count), std::vector<int32_t>(f.labels, f.labels + f.count));
      floats.release(f.slot);
      bytes.release(u.slot);
    }
  };
  auto shards = std::make_shared<ShardDataset>(write_set(t.str(), 23), "train");
  compare(shards, AugmentOptions{}, 1);
  compare(shards, AugmentOptions{2, true}, 3);
  compare(shards, AugmentOptions{3, false}, 2);  // shifts of up to 3 in a 5x4 sample: mostly border
  auto fm = std::make_shared<SubsetDataset>(
      std::make_shared<FashionMnistDataset>(FashionMnistDataset::kDefaultDir, FashionMnistDataset::Split::Train), 40);
  compare(fm, AugmentOptions{3, true}, 2);

  LoaderOptions o;
  o.batch = 4;
  o.bytes = true;
  const std::string msg = error_of([&] {
    Loader(std::make_shared<SyntheticDataset>(Shape{1, 4, 4}, 3, 16, SyntheticFill::Gaussian, 1), o);
  });
  EXPECT_NE(msg.find("synthetic"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not stored as bytes"), std::string::npos) << msg;
  testing::expect_usage_error(
      {"train", "--net", "lenet", "--data", "fashion-mnist", "--host-decode", "--iterations", "1", "--no-results"},
      {"--host-decode", "GPU runs"});
}

}  // namespace
}  // namespace cnnscale
