// Conversions into HDF5 shards (cnnscale data ...): Fashion-MNIST's IDX files here; image lists
// and optical-flow volumes in shard_convert_opencv.cpp when OpenCV is present at configure time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "data/shards.hpp"

namespace cnnscale {

struct ShardConvertOptions {
  int64_t shard_samples = 10000;  // samples per shard file
  int64_t chunk_samples = 0;      // samples per HDF5 chunk; 0: about 1 MiB a chunk
};

// Writes a shard folder at `out` through `write(tmp)`, which fills the folder `tmp` (manifest
// included); `tmp` is renamed to `out` only when complete, so `out` is never half-written. `out`
// must not exist yet (ConfigError naming it); on failure `tmp` is removed.
void publish_shard_folder(const std::string& out, const std::function<void(const std::string& tmp)>& write);

// Fashion-MNIST's train and test splits from the IDX files in `idx_dir`, with the IDX reader's
// mean and standard deviation, so the shard path and the IDX path give identical batches.
ShardManifest convert_fashion_mnist(const std::string& idx_dir, const std::string& out, const ShardConvertOptions& o);

// Running per-channel mean and standard deviation of x / 255 over the bytes of (C, H, W) samples,
// in double: a conversion's normalisation.
class ChannelStats {
 public:
  explicit ChannelStats(std::vector<int64_t> sample_shape);
  void add(const uint8_t* sample);
  std::vector<float> mean() const;
  std::vector<float> stddev() const;  // population; 1 where a channel is constant

 private:
  std::vector<int64_t> shape_;
  std::vector<double> sum_, sum_sq_;
  int64_t count_ = 0;
};

// An image list (Caffe's ImageData / convert_imageset format: one "path label" line each, paths
// relative to `root`) or a folder of class subfolders (labels in sorted subfolder order), decoded,
// resized and converted to C x H x W bytes with OpenCV.
struct ImageListOptions {
  std::string list;       // the training list ...
  std::string folder;     // ... or a folder of class subfolders
  std::string test_list;  // optional: a test split from a second list
  std::string root;       // list paths relative to this (default: the list's folder)
  int64_t height = 0, width = 0;
  std::string fit = "crop";  // crop: scale the shorter side, centre-crop; warp: resize to exactly H x W
  int channels = 3;          // 3: RGB, 1: grey
  int64_t classes = 0;       // 0: the largest label + 1
};

// Gait sequences into optical-flow volumes, as the study built its 2D-CNN inputs: frames resized to
// `height` (aspect kept), Farneback flow between consecutive frames, the person located by
// background subtraction (OpenCV's MOG2) and each volume cropped `width` wide around the person's x
// in its central frame, `frames` flows stacked as (dx, dy) channel pairs (2 x frames channels), a
// new volume every `stride` flows (25 and 5: the study's 80 % overlap). Flow components are stored
// as bytes: round(128 + v * 127.5 / bound), clamped, v in pixels per frame.
struct FlowOptions {
  std::string list;       // "path label" lines: a video file or a folder of frame images
  std::string test_list;  // optional
  std::string root;       // list paths relative to this (default: the list's folder)
  int64_t height = 60, width = 60, frames = 25, stride = 5;
  double bound = 20.0;            // |v| mapped to the byte range, pixels per frame
  std::string locate = "motion";  // motion: MOG2's foreground; centre: the frame's middle
  int64_t classes = 0;
};
ShardManifest convert_flow_volumes(const FlowOptions& flow, const std::string& out, const ShardConvertOptions& o);

// Whether this build has OpenCV; without it the conversions below throw one ConfigError saying so.
bool shard_conversion_has_opencv();
ShardManifest convert_image_list(const ImageListOptions& images, const std::string& out, const ShardConvertOptions& o);

}  // namespace cnnscale
