// What the shard tests share: a small pattern set whose bytes give back each sample's index,
// written as shards; a chunk's file offset, to damage it; conversions that need OpenCV; the message
// of a refused configuration.
#pragma once

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

namespace cnnscale::shards_test {

namespace fs = std::filesystem;
using testing::TempDir;

// Sample i of a (3, 5, 4) set: byte j is (7 i + j) mod 256, label i mod 6; its first two bytes
// also give i (i < 256 * 256) so an order can be read back from the images.
constexpr int64_t kC = 3, kH = 5, kW = 4, kBytes = kC * kH * kW, kClasses = 6;
inline std::vector<uint8_t> sample_bytes(int64_t i) {
  std::vector<uint8_t> b(kBytes);
  for (int64_t j = 0; j < kBytes; ++j) b[static_cast<size_t>(j)] = static_cast<uint8_t>((7 * i + j) % 256);
  b[0] = static_cast<uint8_t>(i / 256);
  b[1] = static_cast<uint8_t>(i % 256);
  return b;
}

// `n` samples in shards of 10 and chunks of 4: shards of 10, 10 and n - 20 samples.
inline std::string write_set(const std::string& root, int64_t n) {
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
inline haddr_t chunk_offset(const std::string& file, hsize_t c) {
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
inline bool converts_with_opencv(const std::vector<std::string>& args) {
  if (!shard_conversion_has_opencv()) {
    testing::expect_usage_error(args, {"no OpenCV", "libopencv-dev"});
    return false;
  }
  const testing::CliResult r = testing::run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace cnnscale::shards_test
