// Image lists (Caffe's ImageData / convert_imageset format: one "path label" line per image) read
// directly, for users who do not convert to shards first: every image is decoded with OpenCV when
// its sample is filled, on the loader's threads (--data-threads), every epoch, as Caffe's ImageData
// layer reads them. A converted shard folder (cnnscale data images) reads faster; this needs no copy.
//
// The dataset is named by one string, so train, calibrate and experiments take it as they take
// "hdf5:DIR":  list:FILE?size=HxW[&fit=crop|warp][&channels=3|1][&test=FILE][&root=DIR][&classes=N]
// Normalisation: the mean and standard deviation of x / 255 per channel over up to 1,024 training
// images evenly spaced through the list (measured when the dataset opens, and logged). Paths holding
// '?' or '&' cannot be given in this form (convert such a list to shards, or link it elsewhere).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace cnnscale {

inline constexpr const char* kImageListPrefix = "list:";

// One listed image: the file as opened, its label, and where it was listed ("list.txt:12").
struct ImageEntry {
  std::string path;
  int32_t label = 0;
  std::string where;
};

// Every entry of a list, checked before any image is decoded: syntax, a non-negative integer label
// as the last field (so paths may hold spaces), the file exists (`folders`: or is a folder). Paths
// are relative to `root`, by default the list's folder. ConfigError naming the list and line.
std::vector<ImageEntry> read_image_list(const std::string& list, const std::string& root, bool folders = false);

// How an image becomes a C x H x W sample of bytes.
struct ImageFit {
  int64_t height = 0, width = 0;
  std::string fit = "crop";  // crop: scale the shorter side to cover, centre-crop; warp: resize to exactly H x W
  int channels = 3;          // 3: RGB planes, 1: grey
};
// Throws ConfigError for an invalid fit (naming the option as `what` spells it).
void check_image_fit(const ImageFit& f, const std::string& what);

// Whether this build has OpenCV to decode images.
bool images_decodable();
// Decodes `e` into channels x height x width bytes at `out`; ConfigError naming e.where if OpenCV
// cannot read it, or if this build has no OpenCV.
void decode_image(const ImageEntry& e, const ImageFit& f, uint8_t* out);

struct ImageListSpec {
  std::string list, test_list, root;
  ImageFit fit;
  int64_t classes = 0;  // 0: the largest label of the lists + 1
};
// Parses "list:FILE?key=value&..." (above); ConfigError naming `what` (the flag or key path).
ImageListSpec parse_image_list_spec(const std::string& name, const std::string& what);
// The name of a spec, every option spelled out (an experiment's paths made absolute, then named again).
std::string image_list_name(const ImageListSpec& spec);

// What a list fixes before any image is decoded: its entries and the classes.
struct ImageListContents {
  std::vector<ImageEntry> train, test;
  int64_t classes = 0;
};
// Reads both lists (ConfigError naming list and line); refuses, in one line, a build without OpenCV.
ImageListContents read_image_lists(const ImageListSpec& spec, const std::string& what);

class ImageListDataset : public Dataset {
 public:
  // `entries` of one split; `normalisation`: the training split's (the test split is normalised as
  // the training split is), or nullopt to measure it from these entries.
  ImageListDataset(std::string name, std::vector<ImageEntry> entries, const ImageFit& fit, int64_t classes,
                   std::optional<ByteAffine> normalisation = std::nullopt);
  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  Shape sample_shape() const override { return Shape{fit_.channels, fit_.height, fit_.width}; }
  int64_t classes() const override { return classes_; }
  void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const override;
  std::optional<ByteAffine> byte_affine() const override { return affine_; }
  void fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const override;

  static constexpr int64_t kStatsImages = 1024;

 private:
  std::string name_;
  std::vector<ImageEntry> entries_;
  ImageFit fit_;
  int64_t classes_ = 0;
  ByteAffine affine_;
};

}  // namespace cnnscale
