// Fashion-MNIST loading and validation (shape 28x28, image and label counts agree, labels < 10)
// and batch filling with (x / 255 - mean) / std.
#include "data/fashion_mnist.hpp"

#include <cstring>
#include <filesystem>

#include "core/byte_input.hpp"
#include "data/idx_file.hpp"

namespace cnnscale {

std::string FashionMnistDataset::file_path(const std::string& dir, Split split, bool images) {
  std::string base =
      std::string(split == Split::Train ? "train" : "t10k") + (images ? "-images-idx3-ubyte" : "-labels-idx1-ubyte");
  std::filesystem::path gz = std::filesystem::path(dir) / (base + ".gz");
  std::filesystem::path plain = std::filesystem::path(dir) / base;
  std::error_code ec;
  if (!std::filesystem::exists(gz, ec) && std::filesystem::exists(plain, ec)) return plain.string();
  return gz.string();
}

FashionMnistDataset::FashionMnistDataset(const std::string& dir, Split split) : split_(split) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw_config("Fashion-MNIST directory '{}' does not exist (install dataset-fashion-mnist or pass --data-dir)", dir);
  const std::string image_file = file_path(dir, split, true);
  const std::string label_file = file_path(dir, split, false);

  IdxArray images = read_idx_ubyte(image_file, 3, "image");
  if (images.dims[1] != kSide || images.dims[2] != kSide)
    throw_config("{}: images are {}x{}, expected {}x{}", image_file, images.dims[1], images.dims[2], kSide, kSide);
  IdxArray labels = read_idx_ubyte(label_file, 1, "label");
  if (labels.dims[0] != images.dims[0])
    throw_config("{}: {} labels, but {} has {} images", label_file, labels.dims[0], image_file, images.dims[0]);
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= kClasses)
      throw_config("{}: label {} of sample {} is not in 0..{}", label_file, labels.data[i], i, kClasses - 1);

  count_ = images.dims[0];
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  pixels_ = std::move(images.data);
  labels_ = std::move(labels.data);
}

std::string FashionMnistDataset::name() const {
  return split_ == Split::Train ? "fashion-mnist/train" : "fashion-mnist/test";
}

std::optional<ByteAffine> FashionMnistDataset::byte_affine() const {
  return ByteAffine::from_stats({kMean}, {kStd});
}

void FashionMnistDataset::fill(std::span<const int64_t> indices, float* data, int32_t* labels) const {
  const int64_t per_sample = rows_ * cols_;
  const ByteAffine a = *byte_affine();
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t idx = indices[s];
    CNNSCALE_CHECK(idx >= 0 && idx < count_, "Fashion-MNIST sample index {} out of range [0, {})", idx, count_);
    const uint8_t* src = pixels_.data() + idx * per_sample;
    float* dst = data + static_cast<int64_t>(s) * per_sample;
    for (int64_t i = 0; i < per_sample; ++i) dst[i] = byte_to_input(src[i], a.scale[0], a.offset[0]);
    labels[s] = labels_[static_cast<size_t>(idx)];
  }
}

void FashionMnistDataset::fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const {
  const int64_t per_sample = rows_ * cols_;
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t idx = indices[s];
    CNNSCALE_CHECK(idx >= 0 && idx < count_, "Fashion-MNIST sample index {} out of range [0, {})", idx, count_);
    std::memcpy(data + static_cast<int64_t>(s) * per_sample, pixels_.data() + idx * per_sample,
                static_cast<size_t>(per_sample));
    labels[s] = labels_[static_cast<size_t>(idx)];
  }
}

}  // namespace cnnscale
