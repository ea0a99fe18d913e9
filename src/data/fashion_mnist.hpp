// Fashion-MNIST (Zalando, 28x28 grey images, 10 classes) from the IDX files that Debian's
// dataset-fashion-mnist package installs under /usr/share/datasets/fashion-mnist/.
// Pixels are kept as bytes (47 MB for the training set) and normalised while filling a batch.
#pragma once
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace cnnscale {

class FashionMnistDataset : public Dataset {
 public:
  static constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kSide = 28;  // images are kSide x kSide, one channel
  static constexpr int64_t kClasses = 10;
  static constexpr int64_t kTrainSize = 60000;
  // Per-pixel mean and standard deviation of the training images (after scaling to [0, 1]).
  static constexpr float kMean = 0.2860f;
  static constexpr float kStd = 0.3530f;

  enum class Split { Train, Test };

  // Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same names without .gz).
  // Throws ConfigError naming the file and the defect.
  FashionMnistDataset(const std::string& dir, Split split);

  std::string name() const override;
  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return Shape{1, rows_, cols_}; }
  int64_t classes() const override { return kClasses; }
  void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const override;
  std::optional<ByteAffine> byte_affine() const override;
  void fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const override;

  // A sample's bytes (rows x cols) and label, as stored.
  const uint8_t* pixels(int64_t i) const { return pixels_.data() + i * rows_ * cols_; }
  int32_t label(int64_t i) const { return labels_[static_cast<size_t>(i)]; }

  // The file a split reads, as used in messages (the .gz name unless only the plain one exists).
  static std::string file_path(const std::string& dir, Split split, bool images);

 private:
  Split split_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  std::vector<uint8_t> pixels_;  // (count, rows, cols)
  std::vector<uint8_t> labels_;  // (count)
};

}  // namespace cnnscale
