// Shards converted from other sources: Fashion-MNIST through shards against the IDX reader
// (identical batches, identical training loss), image lists through OpenCV and read directly, and
// optical flow volumes from a folder of frames.
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
  DatasetRequest request;
  request.name = name;
  const OpenedDatasets direct = open_datasets(request, {}, 0, 2);
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

}  // namespace
}  // namespace cnnscale
