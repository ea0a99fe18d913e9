// Dataset: a fixed, indexable set of labelled samples. Readers (synthetic, IDX, later HDF5 shards)
// implement it; the Loader decides the order and fills host batches through fill().
// fill() must be thread-safe (the loader calls it from its prefetch thread) and deterministic.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/shape.hpp"

namespace cnnscale {

// Byte-stored datasets: fill()'s floats are byte_to_input(byte, scale[c], offset[c]) of the stored
// bytes (core/byte_input.hpp), per channel c.
struct ByteAffine {
  std::vector<float> scale, offset;
  // Per channel, whether a horizontal mirror negates it (the x-flow channels of an optical-flow
  // volume, core/byte_input.hpp's negated_flow_byte); empty: none, an ordinary image.
  std::vector<bool> mirror_negates;
  bool negates_any() const {
    for (bool n : mirror_negates)
      if (n) return true;
    return false;
  }
  // From the per-channel mean and standard deviation of byte / 255, so that
  // byte_to_input(byte, scale, offset) = (byte / 255 - mean) / std; one formula for every reader, so
  // the same statistics give the same floats whichever reader holds them.
  static ByteAffine from_stats(const std::vector<float>& mean, const std::vector<float>& stddev) {
    ByteAffine a;
    for (size_t c = 0; c < mean.size(); ++c) {
      a.scale.push_back(1.0f / (255.0f * stddev[c]));
      a.offset.push_back(-mean[c] / stddev[c]);
    }
    return a;
  }
  // The scales, then the offsets, then where a channel negates under a mirror 1 or 0 per channel:
  // Backend::decode_bytes' affine tensor.
  std::vector<float> packed() const {
    std::vector<float> p = scale;
    p.insert(p.end(), offset.begin(), offset.end());
    if (negates_any())
      for (bool n : mirror_negates) p.push_back(n ? 1.0f : 0.0f);
    return p;
  }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;    // "fashion-mnist/train", "synthetic(gaussian)"
  virtual int64_t size() const = 0;        // number of samples
  virtual Shape sample_shape() const = 0;  // per sample (C, H, W)
  virtual int64_t classes() const = 0;
  // Writes indices.size() samples: data (count, C, H, W) normalised f32, labels (count) in [0, classes).
  virtual void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const = 0;

  // A dataset stored as bytes also hands out the bytes themselves and the map fill() applies to
  // them, so a GPU run moves a quarter of the floats' bytes over the bus and normalises (and
  // augments) on the device. Others return nullopt; fill_bytes() is then not called.
  virtual std::optional<ByteAffine> byte_affine() const { return std::nullopt; }
  // Writes indices.size() samples (count, C, H, W) as stored, and their labels; thread-safe.
  virtual void fill_bytes(std::span<const int64_t> /*indices*/, uint8_t* /*data*/, int32_t* /*labels*/) const {
    throw_runtime("{}: samples are not stored as bytes", name());
  }
};

// Samples [begin, begin + count) of another dataset: the first `count` (quick experiments and
// tests on a subset), or a data-parallel rank's contiguous shard of the test set.
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, int64_t count, int64_t begin = 0)
      : base_(std::move(base)), count_(count), begin_(begin) {
    if (count_ <= 0 || begin_ < 0 || begin_ + count_ > base_->size())
      throw_config("{}: cannot take {} samples from {}: the dataset has {}", base_->name(), count_, begin_,
                   base_->size());
  }
  std::string name() const override {
    return base_->name() + "[" + (begin_ ? std::to_string(begin_) : std::string()) + ":" +
           std::to_string(begin_ + count_) + "]";
  }
  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int64_t classes() const override { return base_->classes(); }
  void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const override {
    if (begin_ == 0) return base_->fill(indices, data, labels);
    base_->fill(in_base(indices), data, labels);
  }
  std::optional<ByteAffine> byte_affine() const override { return base_->byte_affine(); }
  void fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const override {
    if (begin_ == 0) return base_->fill_bytes(indices, data, labels);
    base_->fill_bytes(in_base(indices), data, labels);
  }

 private:
  // The base's indices of ours.
  std::vector<int64_t> in_base(std::span<const int64_t> indices) const {
    std::vector<int64_t> shifted(indices.begin(), indices.end());
    for (int64_t& i : shifted) i += begin_;
    return shifted;
  }

  std::shared_ptr<const Dataset> base_;
  int64_t count_, begin_;
};

}  // namespace cnnscale
