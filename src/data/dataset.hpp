// Dataset: a fixed, indexable set of labelled samples. Readers (synthetic, IDX, later HDF5 shards)
// implement it; the Loader decides the order and fills host batches through fill().
// fill() must be thread-safe (the loader calls it from its prefetch thread) and deterministic.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/error.hpp"
#include "core/shape.hpp"

namespace cnnscale {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;    // "fashion-mnist/train", "synthetic(gaussian)"
  virtual int64_t size() const = 0;        // number of samples
  virtual Shape sample_shape() const = 0;  // per sample (C, H, W)
  virtual int64_t classes() const = 0;
  // Writes indices.size() samples: data (count, C, H, W) normalised f32, labels (count) in [0, classes).
  virtual void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const = 0;
};

// The first `count` samples of another dataset (quick experiments and tests on a subset).
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, int64_t count) : base_(std::move(base)), count_(count) {
    if (count_ <= 0 || count_ > base_->size())
      throw_config("{}: cannot take {} samples: the dataset has {}", base_->name(), count_, base_->size());
  }
  std::string name() const override { return base_->name() + "[:" + std::to_string(count_) + "]"; }
  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int64_t classes() const override { return base_->classes(); }
  void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const override {
    base_->fill(indices, data, labels);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t count_;
};

}  // namespace cnnscale
