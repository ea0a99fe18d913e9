// HDF5 shards: the round trip of bytes, labels and checksums; Fashion-MNIST through shards against
// the IDX reader (identical batches, identical training loss); damaged and truncated shards named
// with their file and chunk; the prefetching loader over shards keeping every sample once per
// epoch across ranks; manifest defects named by key path.
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

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Sample i of a (3, 5, 4) set: byte j is (7 i + j) mod 256, label i mod 6; its first two bytes
// also give i (i < 256 * 256) so an order can be read back from the images.
constexpr int64_t kC = 3, kH = 5, kW = 4, kBytes = kC * kH * kW, kClasses = 6;
std::vector<uint8_t> sample_bytes(int64_t i) {
  std::vector<uint8_t> b(kBytes);
  for (int64_t j = 0; j < kBytes; ++j) b[static_cast<size_t>(j)] = static_cast<uint8_t>((7 * i + j) % 256);
  b[0] = static_cast<uint8_t>(i / 256);
  b[1] = static_cast<uint8_t>(i % 256);
  return b;
}

// `n` samples in shards of 10 and chunks of 4: shards of 10, 10 and n - 20 samples.
std::string write_set(const std::string& root, int64_t n) {
  const std::string out = (fs::path(root) / "set").string();
  publish_shard_folder(out, [&](const std::string& tmp) {
    ShardManifest m;
    m.name = "pattern";
    m.sample_shape = {kC, kH, kW};
    m.classes = kClasses;
    m.mean = {0.25f, 0.5f, 0.75f};
    m.stddev = {0.5f, 0.25f, 0.125f};
    m.chunk_samples = 4;
    ShardWriter w(tmp, "train", m.sample_shape, 10, 4);
    for (int64_t i = 0; i < n; ++i) w.add(sample_bytes(i).data(), static_cast<int32_t>(i % kClasses));
    m.splits["train"] = w.finish();
    write_shard_manifest(tmp, m);
  });
  return out;
}

// The file offset of chunk `c` of a shard's images (HDF5 1.10.5's chunk query).
haddr_t chunk_offset(const std::string& file, hsize_t c) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "images", H5P_DEFAULT);
  hid_t s = H5Dget_space(d);
  hsize_t offset[4] = {};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  EXPECT_GE(H5Dget_chunk_info(d, s, c, offset, &mask, &addr, &size), 0);
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return addr;
}

// Runs a conversion that needs OpenCV. True when it ran and succeeded; false when it failed (a test
// failure) or when this build has no OpenCV, after checking the one-line refusal that gives.
bool converts_with_opencv(const std::vector<std::string>& args) {
  if (!shard_conversion_has_opencv()) {
    testing::expect_usage_error(args, {"no OpenCV", "libopencv-dev"});
    return false;
  }
  const testing::CliResult r = testing::run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

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

// Fashion-MNIST converted by the command: the same bytes, labels and normalised batches as the IDX
// reader, and training from either gives the identical loss.
TEST(Shards, FashionMnistShardsMatchTheIdxPathBatchForBatch) {
  TempDir t;
  const std::string out = t.file("fm");
  testing::CliResult r = testing::run_cnnscale({"data", "fashion-mnist", "--out", out, "--shard-samples", "25000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("train: 60000 samples in 3 shard(s)"), std::string::npos) << r.out;
  using Split = FashionMnistDataset::Split;
  const FashionMnistDataset idx(FashionMnistDataset::kDefaultDir, Split::Test);
  const ShardDataset shards(out, "test");
  ASSERT_EQ(shards.size(), idx.size());
  const std::vector<int64_t> some = {0, 1, 9999, 4242, 1337, 1336};
  std::vector<float> a(some.size() * 784), b(some.size() * 784);
  std::vector<int32_t> la(some.size()), lb(some.size());
  idx.fill(some, a.data(), la.data());
  shards.fill(some, b.data(), lb.data());
  EXPECT_EQ(a, b);  // bit for bit
  EXPECT_EQ(la, lb);

  const DatasetInfo info = dataset_info("hdf5:" + out);
  EXPECT_EQ(info.train_samples, 60000);
  EXPECT_TRUE(info.has_test);
  EXPECT_EQ(info.sample_shape, (std::vector<int64_t>{1, 28, 28}));
  auto loss = [&](const std::string& data, const std::string& threads = "1") {
    testing::CliResult run =
        testing::run_cnnscale({"train", "--net", "lenet", "--data", data, "--iterations", "6", "--batch", "32",
                               "--test-samples", "256", "--no-results", "--data-threads", threads, "--json"});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return nlohmann::json::parse(run.out);
  };
  const nlohmann::json from_idx = loss("fashion-mnist"), from_shards = loss("hdf5:" + out);
  EXPECT_EQ(from_idx["final_loss"], from_shards["final_loss"]);
  EXPECT_EQ(from_idx["test_loss"], from_shards["test_loss"]);
  EXPECT_EQ(loss("hdf5:" + out, "3")["final_loss"], from_shards["final_loss"]);  // threads change nothing
  testing::expect_usage_error({"train", "--net", "lenet", "--data", "hdf5:" + t.file("none"), "--iterations", "1"},
                              {"--data", "shard folder", "does not exist"});
}

// Two hand-written PPM images (an 8x6 red one, a 4x4 gradient) through `cnnscale data images`: a
// list and a folder, the centre-cropped bytes in RGB channel order, the train split's mean; list
// defects named by file and line before any image is decoded. Without OpenCV: the one message.
TEST(Shards, ImageListsThroughOpenCv) {
  TempDir t;
  auto ppm = [&](const std::string& name, int w, int h, const std::function<std::array<uint8_t, 3>(int, int)>& px) {
    fs::create_directories(fs::path(t.file(name)).parent_path());
    std::ofstream f(t.file(name), std::ios::binary);
    f << "P6\n" << w << " " << h << "\n255\n";
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const auto p = px(x, y);
        f.write(reinterpret_cast<const char*>(p.data()), 3);
      }
  };
  ppm("img/red/r.ppm", 8, 6, [](int, int) { return std::array<uint8_t, 3>{200, 10, 20}; });
  ppm("img/ramp/g.ppm", 4, 4, [](int x, int y) {
    const int i = 4 * y + x;
    return std::array<uint8_t, 3>{static_cast<uint8_t>(10 * i), static_cast<uint8_t>(5 * i),
                                  static_cast<uint8_t>(255 - i)};
  });
  std::ofstream(t.file("img/list.txt")) << "# class 0 red, 1 ramp\nred/r.ppm 0\n\nramp/g.ppm 1\n";
  const std::vector<std::string> list_args = {"data",   "images", "--list", t.file("img/list.txt"),
                                              "--size", "4x4",    "--out",  t.file("s1")};
  if (!converts_with_opencv(list_args)) return;
  const ShardDataset ds(t.file("s1"), "train");
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.sample_shape(), Shape({3, 4, 4}));
  std::vector<uint8_t> raw(48);
  int32_t label = -1;
  ds.read_raw(0, raw.data(), &label);  // 8x6 scaled to 5x4 (covering 4x4) and centre-cropped: still red
  EXPECT_EQ(label, 0);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(raw[static_cast<size_t>(i)], 200);
    EXPECT_EQ(raw[static_cast<size_t>(16 + i)], 10);
    EXPECT_EQ(raw[static_cast<size_t>(32 + i)], 20);
  }
  ds.read_raw(1, raw.data(), &label);  // already 4x4: untouched, planes R, G, B
  EXPECT_EQ(label, 1);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(raw[static_cast<size_t>(i)], 10 * i);
    EXPECT_EQ(raw[static_cast<size_t>(16 + i)], 5 * i);
    EXPECT_EQ(raw[static_cast<size_t>(32 + i)], 255 - i);
  }
  // Mean of x / 255 over both images, per channel: red (200 + 75) / 2 / 255.
  EXPECT_NEAR(ds.manifest().mean[0], (200.0 + 75.0) / 2 / 255, 1e-6);
  // The folder form: classes in sorted subfolder order (ramp 0, red 1).
  const testing::CliResult r =
      testing::run_cnnscale({"data", "images", "--folder", t.file("img"), "--size", "4x4", "--out", t.file("s2")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const ShardDataset folder(t.file("s2"), "train");
  folder.read_raw(0, raw.data(), &label);
  EXPECT_EQ(label, 0);
  EXPECT_EQ(raw[1], 10);
  EXPECT_EQ(folder.manifest().source["class_names"], (nlohmann::json{"ramp", "red"}));
  // Defects: named by list and line, nothing written.
  std::ofstream(t.file("img/bad.txt")) << "red/r.ppm 0\nmissing.ppm 1\n";
  testing::expect_usage_error(
      {"data", "images", "--list", t.file("img/bad.txt"), "--size", "4x4", "--out", t.file("s3")},
      {"bad.txt:2: ", "missing.ppm: no such file"});
  std::ofstream(t.file("img/bad2.txt")) << "red/r.ppm zero\n";
  testing::expect_usage_error(
      {"data", "images", "--list", t.file("img/bad2.txt"), "--size", "4x4", "--out", t.file("s3")},
      {"bad2.txt:1: label 'zero'"});
  EXPECT_FALSE(fs::exists(t.file("s3")));
}

// An image list read directly (list:FILE?...) gives the bytes, labels and normalisation of the
// same list converted to shards (cnnscale data images), so the two paths train alike; its test list
// is normalised with the training list's statistics; defects are named by list and line, or by the
// option; without OpenCV one line says what to do instead.
TEST(Shards, ImageListsReadDirectlyMatchTheirShards) {
  TempDir t;
  auto ppm = [&](const std::string& name, int w, int h, int seed) {
    std::ofstream f(t.file(name), std::ios::binary);
    f << "P6\n" << w << " " << h << "\n255\n";
    for (int i = 0; i < w * h * 3; ++i) f.put(static_cast<char>((seed * 37 + i * 11) % 256));
  };
  std::string list;
  for (int i = 0; i < 7; ++i) {
    ppm("a" + std::to_string(i) + ".ppm", i == 3 ? 9 : 6, i == 3 ? 7 : 5, i);  // one to scale and crop
    list += "a" + std::to_string(i) + ".ppm " + std::to_string(i % 3) + "\n";
  }
  std::ofstream(t.file("train.txt")) << list;
  std::ofstream(t.file("test.txt")) << "a1.ppm 2\na5.ppm 0\n";
  const std::string name = "list:" + t.file("train.txt") + "?size=5x6&test=" + t.file("test.txt");
  if (!images_decodable()) {
    testing::expect_usage_error({"train", "--net", "lenet", "--data", name, "--iterations", "1"},
                                {"needs OpenCV", "libopencv-dev", "hdf5:DIR"});
    return;
  }
  ASSERT_EQ(testing::run_cnnscale({"data", "images", "--list", t.file("train.txt"), "--test-list", t.file("test.txt"),
                                   "--size", "5x6", "--out", t.file("s")})
                .exit_code,
            0);
  const DatasetInfo info = dataset_info(name);
  EXPECT_EQ(info.sample_shape, (std::vector<int64_t>{3, 5, 6}));
  EXPECT_EQ(info.classes, 3);
  EXPECT_EQ(info.train_samples, 7);
  EXPECT_TRUE(info.has_test);
  const OpenedDatasets direct = open_datasets({.name = name}, {}, 0, 2);
  for (const std::string split : {"train", "test"}) {
    const Dataset& d = split == "train" ? *direct.train : *direct.test;
    const ShardDataset shards(t.file("s"), split);
    ASSERT_EQ(d.size(), shards.size());
    std::vector<int64_t> all(static_cast<size_t>(d.size()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    const size_t n = all.size() * 90;
    std::vector<uint8_t> a(n), b(n);
    std::vector<int32_t> la(all.size()), lb(all.size());
    d.fill_bytes(all, a.data(), la.data());
    shards.fill_bytes(all, b.data(), lb.data());
    EXPECT_EQ(a, b) << split;
    EXPECT_EQ(la, lb) << split;
    std::vector<float> fa(n), fb(n);
    d.fill(all, fa.data(), la.data());
    shards.fill(all, fb.data(), lb.data());
    EXPECT_EQ(fa, fb) << split << ": the list's normalisation differs from the converted folder's";
  }
  // Defects, each one line naming where.
  auto error = [](const std::string& n) { return error_of([&] { dataset_info(n); }); };
  EXPECT_NE(error("list:" + t.file("train.txt")).find("gives no size"), std::string::npos);
  EXPECT_NE(error("list:" + t.file("train.txt") + "?size=5x6&colour=1").find("unknown list option 'colour'"),
            std::string::npos);
  EXPECT_NE(error("list:" + t.file("train.txt") + "?size=5by6").find("size=5by6"), std::string::npos);
  std::ofstream(t.file("bad.txt")) << "a0.ppm 0\nmissing.ppm 1\n";
  EXPECT_NE(error("list:" + t.file("bad.txt") + "?size=5x6").find("bad.txt:2: "), std::string::npos);
  testing::expect_usage_error(
      {"train", "--net", "lenet", "--data", "list:" + t.file("bad.txt") + "?size=28x28", "--iterations", "1"},
      {"bad.txt:2: ", "missing.ppm: no such file"});
  const testing::CliResult unknown =
      testing::run_cnnscale({"train", "--net", "lenet", "--data", "nosuch", "--iterations", "1"});
  EXPECT_NE(unknown.err.find("--data: unknown dataset 'nosuch'"), std::string::npos) << unknown.err;
  EXPECT_EQ(unknown.err.find("--data: --data"), std::string::npos) << "the option named twice: " << unknown.err;
}

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

// A smooth texture moving (2, 1) pixels a frame, 31 frames of 80x60 in a folder, through `cnnscale
// data flow` with the study's defaults: volumes of 25 flows x (dx, dy) at 60x60, the 2D-CNN's input
// (networks/cnn2d_gait.yaml), a new one every 5 flows (2 volumes from 30 flows); the flow read back
// recovers the shift. Without OpenCV: the one message.
TEST(Shards, OpticalFlowVolumesRecoverAKnownShift) {
  TempDir t;
  fs::create_directories(t.file("gait/seq"));
  const int w = 80, h = 60;
  const double shift_x = 2, shift_y = 1;
  auto texture = [](double x, double y) {
    const double pi = 3.14159265358979;
    return 128 + 50 * std::sin(2 * pi * x / 17) + 40 * std::sin(2 * pi * y / 13) + 30 * std::sin(2 * pi * (x + y) / 23);
  };
  for (int f = 0; f < 31; ++f) {
    std::ofstream out(t.file(fmt::format("gait/seq/{:03d}.pgm", f)), std::ios::binary);
    out << "P5\n" << w << " " << h << "\n255\n";
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) out.put(static_cast<char>(std::lround(texture(x - shift_x * f, y - shift_y * f))));
  }
  std::ofstream(t.file("gait/list.txt")) << "seq 4\n";
  const std::vector<std::string> args = {"data", "flow", "--list", t.file("gait/list.txt"), "--out", t.file("flow")};
  if (!converts_with_opencv(args)) return;
  const ShardDataset ds(t.file("flow"), "train");
  EXPECT_EQ(ds.sample_shape(), Shape({50, 60, 60}));
  EXPECT_EQ(ds.sample_shape().dims(),
            NetSpec::load(std::string(CNNSCALE_SOURCE_DIR) + "/networks/cnn2d_gait.yaml").input_shape());
  ASSERT_EQ(ds.size(), 2);
  const double bound = ds.manifest().source["bound"].get<double>();
  std::vector<uint8_t> raw(50 * 60 * 60);
  int32_t label = -1;
  for (int64_t v = 0; v < 2; ++v) {
    ds.read_raw(v, raw.data(), &label);
    EXPECT_EQ(label, 4);
    for (int f = 0; f < 25; ++f) {
      // The mean flow over the volume's interior (10 pixels in from each side, where Farneback's
      // 15-pixel window sees no image border). Bytes are round(128 + v 127.5 / bound): a step of
      // bound / 127.5 = 0.16 px. The polynomial expansion fits this texture (periods 13 to 23 px,
      // smooth against the 5-pixel neighbourhood) closely and the shift is well inside one pyramid
      // level's reach, so the interior mean is within a quarter pixel of the truth: an error of
      // 10 % of the 2-pixel shift, far below what a wrong sign, axis or channel order would give
      // (a whole pixel or more).
      double sum[2] = {0, 0};
      int n = 0;
      for (int y = 10; y < 50; ++y)
        for (int x = 10; x < 50; ++x, ++n)
          for (int c = 0; c < 2; ++c)
            sum[c] += (raw[static_cast<size_t>((2 * f + c) * 3600 + y * 60 + x)] - 128.0) * bound / 127.5;
      EXPECT_NEAR(sum[0] / n, shift_x, 0.25) << "volume " << v << " flow " << f;
      EXPECT_NEAR(sum[1] / n, shift_y, 0.25) << "volume " << v << " flow " << f;
    }
  }
  EXPECT_EQ(ds.manifest().source["farneback"]["winsize"], 15);  // the parameters travel with the data
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
