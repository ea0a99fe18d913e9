// HDF5 shards: the round trip of bytes, labels and checksums; damaged and truncated shards named
// with their file and chunk; the prefetching loader over shards keeping every sample once per
// epoch across ranks, with threads; manifest defects named by key path; experiments reading shard
// folders beside their file.
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

TEST(Shards, RoundTripBytesLabelsAndNormalisation) {
  TempDir t;
  const std::string dir = write_set(t.str(), 23);
  const ShardManifest m = read_shard_manifest(dir);
  ASSERT_EQ(m.splits.at("train").shards.size(), 3u);
  EXPECT_EQ(m.splits.at("train").samples, 23);
  EXPECT_EQ(m.splits.at("train").shards[2].samples, 3);
  const ShardDataset ds(dir, "train");
  EXPECT_EQ(ds.size(), 23);
  EXPECT_EQ(ds.classes(), kClasses);
  EXPECT_EQ(ds.sample_shape(), Shape({kC, kH, kW}));
  std::vector<uint8_t> raw(kBytes);
  for (int64_t i = 0; i < 23; ++i) {
    int32_t label = -1;
    ds.read_raw(i, raw.data(), &label);
    EXPECT_EQ(raw, sample_bytes(i)) << i;
    EXPECT_EQ(label, i % kClasses) << i;
  }
  // fill: (x / 255 - mean[c]) / std[c], computed as x * (1 / (255 std)) - mean / std in float.
  const std::vector<int64_t> idx = {22, 0, 13};
  std::vector<float> data(idx.size() * kBytes);
  std::vector<int32_t> labels(idx.size());
  ds.fill(idx, data.data(), labels.data());
  for (size_t s = 0; s < idx.size(); ++s) {
    const std::vector<uint8_t> b = sample_bytes(idx[s]);
    for (int64_t j = 0; j < kBytes; ++j) {
      const size_t c = static_cast<size_t>(j / (kH * kW));
      const float expect =
          static_cast<float>(b[static_cast<size_t>(j)]) * (1.0f / (255.0f * m.stddev[c])) + (-m.mean[c] / m.stddev[c]);
      ASSERT_EQ(data[s * kBytes + static_cast<size_t>(j)], expect) << s << " " << j;
    }
    EXPECT_EQ(labels[s], idx[s] % kClasses);
  }
  EXPECT_EQ(ds.verify_all(), 3 + 3 + 1);  // chunks of 4: 10 -> 3, 10 -> 3, 3 -> 1
  // A cache smaller than one chunk still serves every sample (it keeps the chunk in use).
  const ShardDataset tiny(dir, "train", 1);
  int32_t label = -1;
  for (int64_t i : {5, 21, 4, 5}) {
    tiny.read_raw(i, raw.data(), &label);
    EXPECT_EQ(raw, sample_bytes(i));
  }
}

TEST(Shards, APublishedFolderIsNeverHalfWritten) {
  TempDir t;
  const std::string dir = write_set(t.str(), 12);
  EXPECT_NE(error_of([&] { write_set(t.str(), 12); }).find("exists already"), std::string::npos);
  // A conversion that fails leaves neither the folder nor its temporary.
  const std::string out = t.file("failed");
  EXPECT_THROW(publish_shard_folder(out, [](const std::string&) { throw_config("broken input"); }), ConfigError);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(t.entries(), std::vector<std::string>{"set"});
}

TEST(Shards, ADamagedChunkIsNamedByFileAndChunk) {
  TempDir t;
  const std::string dir = write_set(t.str(), 23);
  const std::string file = (fs::path(dir) / "train-00001.h5").string();
  const haddr_t at = chunk_offset(file, 2);  // samples 8 and 9 of the shard: 18 and 19 of the set
  ASSERT_GT(at, 0u);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 5));
    char byte = 0;
    f.read(&byte, 1);
    f.seekp(static_cast<std::streamoff>(at + 5));
    byte = static_cast<char>(byte ^ 0x10);
    f.write(&byte, 1);
  }
  const ShardDataset ds(dir, "train");  // the file's size and structure are intact: it opens
  std::vector<uint8_t> raw(kBytes);
  int32_t label = 0;
  ds.read_raw(17, raw.data(), &label);  // another chunk reads fine
  const std::string why = error_of([&] { ds.read_raw(18, raw.data(), &label); });
  EXPECT_NE(why.find("train-00001.h5: chunk 2 (samples 8 to 9)"), std::string::npos) << why;
  EXPECT_NE(why.find("CRC-32"), std::string::npos) << why;
  EXPECT_NE(error_of([&] { ds.verify_all(); }).find("train-00001.h5: chunk 2"), std::string::npos);
  // The same through the command, one line and exit 2.
  testing::expect_usage_error({"data", "verify", dir}, {"train-00001.h5: chunk 2 (samples 8 to 9)", "damaged"});
}

TEST(Shards, TruncatedOrMissingShardsAndBadManifestsFailAtOpen) {
  TempDir t;
  const std::string dir = write_set(t.str(), 23);
  const fs::path shard = fs::path(dir) / "train-00002.h5";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  std::string why = error_of([&] { ShardDataset(dir, "train"); });
  EXPECT_NE(why.find("train-00002.h5"), std::string::npos) << why;
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  fs::remove(shard);
  why = error_of([&] { ShardDataset(dir, "train"); });
  EXPECT_NE(why.find("train-00002.h5: missing"), std::string::npos) << why;
  EXPECT_NE(error_of([&] { ShardDataset(dir, "test"); }).find("no split 'test'"), std::string::npos);

  // Manifest defects name manifest.json and the key path.
  const fs::path manifest = fs::path(dir) / "manifest.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(manifest));
  auto broken = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json k = j;
    change(k);
    std::ofstream(manifest) << k.dump();
    return error_of([&] { read_shard_manifest(dir); });
  };
  why = broken([](nlohmann::json& k) { k["splits"]["train"]["shards"][1].erase("crc32"); });
  EXPECT_NE(why.find("manifest.json: missing key 'splits.train.shards[1].crc32'"), std::string::npos) << why;
  why = broken([](nlohmann::json& k) { k["splits"]["train"]["samples"] = 24; });
  EXPECT_NE(why.find("'splits.train.samples' is 24, but its shards hold 23"), std::string::npos) << why;
  why = broken([](nlohmann::json& k) { k["mean"] = {0.5}; });
  EXPECT_NE(why.find("one value per channel (3)"), std::string::npos) << why;
  why = broken([](nlohmann::json& k) { k["version"] = 2; });
  EXPECT_NE(why.find("format version 2"), std::string::npos) << why;
  std::ofstream(manifest) << "{ not json";
  EXPECT_NE(error_of([&] { read_shard_manifest(dir); }).find("manifest.json: not JSON"), std::string::npos);
}

// Two ranks' loaders over shards, prefetching, three epochs: each epoch's batches hold every
// sample at most once (drop_last leaves the remainder out), the ranks' halves make up the one-rank
// batch, in the same order, and the shard reader agrees with the sample index.
TEST(Shards, PrefetchKeepsEverySampleOnceAcrossEpochsAndRanks) {
  TempDir t;
  const std::string dir = write_set(t.str(), 23);
  auto ds = std::make_shared<ShardDataset>(dir, "train", 64);  // a cache of one chunk: reads keep coming
  auto order = [&](int64_t begin, int64_t count) {
    LoaderOptions o;
    o.batch = 6;
    o.seed = 11;
    o.shard_begin = begin;
    o.shard_count = count;
    Loader loader(ds, o);
    std::vector<std::vector<int64_t>> epochs(3);
    for (int64_t e = 0; e < 3; ++e)
      for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
        const HostBatch& batch = loader.next();
        for (int64_t s = 0; s < batch.count; ++s) {
          // Undo the normalisation of bytes 0 and 1 (channel 0: mean 0.25, std 0.5) to read i back.
          const float* x = batch.data + s * kBytes;
          const auto byte = [&](int j) { return std::lround((x[j] * 0.5f + 0.25f) * 255.0f); };
          const int64_t i = byte(0) * 256 + byte(1);
          EXPECT_EQ(batch.labels[s], i % kClasses);
          epochs[static_cast<size_t>(e)].push_back(i);
        }
        loader.release(batch.slot);
      }
    return epochs;
  };
  const auto whole = order(0, 0);
  const auto rank0 = order(0, 3), rank1 = order(3, 3);
  for (size_t e = 0; e < 3; ++e) {
    ASSERT_EQ(whole[e].size(), 18u);  // 3 batches of 6 out of 23
    EXPECT_EQ(std::set<int64_t>(whole[e].begin(), whole[e].end()).size(), 18u) << "a sample twice in epoch " << e;
    std::vector<int64_t> merged;
    for (size_t b = 0; b < 3; ++b) {
      merged.insert(merged.end(), rank0[e].begin() + 3 * b, rank0[e].begin() + 3 * b + 3);
      merged.insert(merged.end(), rank1[e].begin() + 3 * b, rank1[e].begin() + 3 * b + 3);
    }
    EXPECT_EQ(merged, whole[e]) << "epoch " << e;
  }
  EXPECT_NE(whole[0], whole[1]);  // reshuffled every epoch
}

// A batch filled by three threads (contiguous parts each) equals the one-thread batch, bit for bit;
// bench data reports both passes per thread count.
TEST(Shards, ThreadsFillTheSameBatchesAndBenchDataReportsThem) {
  TempDir t;
  const std::string dir = write_set(t.str(), 23);
  auto batches = [&](int threads) {
    LoaderOptions o;
    o.batch = 7;
    o.seed = 5;
    o.threads = threads;
    Loader loader(std::make_shared<ShardDataset>(dir, "train"), o);
    std::vector<float> all;
    std::vector<int32_t> labels;
    for (int b = 0; b < 6; ++b) {  // two epochs of three batches
      const HostBatch& batch = loader.next();
      all.insert(all.end(), batch.data, batch.data + batch.count * kBytes);
      labels.insert(labels.end(), batch.labels, batch.labels + batch.count);
      loader.release(batch.slot);
    }
    return std::make_pair(all, labels);
  };
  EXPECT_EQ(batches(3), batches(1));
  EXPECT_EQ(batches(64), batches(1));  // more threads than samples: one sample each
  testing::CliResult r = testing::run_cnnscale(
      {"bench", "data", "--data", "hdf5:" + dir, "--batch", "5", "--batches", "3", "--threads", "1,2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 4u);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["batches"], 3);
    EXPECT_GT(row["samples_per_second"].get<double>(), 0.0);
    // Stored bytes are uint8, batches float: four times as many bytes plus a label per sample.
    EXPECT_NEAR(row["batch_mb_per_second"].get<double>(),
                row["read_mb_per_second"].get<double>() * (4.0 * kBytes + 4.0) / kBytes,
                1e-9 * row["batch_mb_per_second"].get<double>());
  }
  // As a GPU run takes them: the stored bytes, each sample's draw (three int32) and its label.
  r = testing::run_cnnscale({"bench", "data", "--data", "hdf5:" + dir, "--batch", "5", "--batches", "3", "--threads",
                             "2", "--bytes", "--crop-pad", "1", "--mirror", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json b = nlohmann::json::parse(r.out);
  EXPECT_EQ(b["batches_as"], "bytes");
  ASSERT_EQ(b["rows"].size(), 2u);
  for (const auto& row : b["rows"])
    EXPECT_NEAR(row["batch_mb_per_second"].get<double>(),
                row["read_mb_per_second"].get<double>() * (kBytes + 12.0 + 4.0) / kBytes,
                1e-9 * row["batch_mb_per_second"].get<double>());
  testing::expect_usage_error({"bench", "data", "--data", "synthetic"}, {"reads nothing"});
}

// An experiment names a shard folder relative to its file; a missing one is named by file, line,
// column and key path before anything runs.
TEST(Shards, ExperimentsReadShardFoldersBesideTheirFile) {
  TempDir t;
  write_set(t.str(), 23);
  // A network whose input is the pattern set's 3x5x4 samples: the file is read with the network
  // paired with it, and a network of another input shape is refused there.
  std::ofstream(t.file("tiny.yaml")) << "name: tiny\ninput: {shape: [3, 5, 4], classes: " << kClasses
                                     << "}\nlayers:\n"
                                        "  - {name: ip, type: InnerProduct, bottom: data, top: ip, num_output: ${classes}}\n"
                                        "  - {name: loss, type: SoftmaxWithLoss, bottom: [ip, label], top: loss}\n";
  auto experiment = [&](const std::string& folder, const std::string& network = "tiny.yaml") {
    std::ofstream(t.file("e.yaml")) << "name: s\ndevice: cpu\nseed: 1\ndataset: {name: \"hdf5:" << folder
                                    << "\"}\niterations: 2\nmatrix:\n  network: [" << network
                                    << "]\n  batch: [8]\n  gpus: [1]\n";
    return testing::run_cnnscale({"sweep", t.file("e.yaml"), "--dry-run", "--results", t.file("res")});
  };
  testing::CliResult r = experiment("set");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3 to run"), std::string::npos) << r.out;  // the default 3 repeats
  EXPECT_NE(r.out.find("whole_iters"), std::string::npos) << r.out;
  r = experiment("nothing");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("e.yaml:4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dataset.name: shard folder '" + t.file("nothing") + "' does not exist"), std::string::npos)
      << r.err;
  r = experiment("set", "lenet");  // 1x28x28 inputs: refused when the file is read, not when run
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("e.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3x5x4"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(t.file("res"))) << "nothing made before the refusal";
}

}  // namespace
}  // namespace cnnscale
