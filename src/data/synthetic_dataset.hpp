// Synthetic data for throughput and energy runs: any sample shape and class count, values either
// Gaussian noise or one non-zero constant, random labels. Every sample is a pure function of
// (seed, sample index), so batches are identical whatever the order, batch size or thread.
#pragma once
#include "data/dataset.hpp"

namespace cnnscale {

enum class SyntheticFill { Gaussian, Constant };

SyntheticFill parse_synthetic_fill(const std::string& text);  // "gaussian" | "constant"

class SyntheticDataset : public Dataset {
 public:
  // A non-zero constant keeps multipliers toggling, so power readings are not flattered by zeros.
  static constexpr float kDefaultConstant = 0.5f;

  SyntheticDataset(Shape sample_shape, int64_t classes, int64_t size, SyntheticFill fill, uint64_t seed,
                   float constant = kDefaultConstant);

  std::string name() const override;
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return sample_shape_; }
  int64_t classes() const override { return classes_; }
  void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const override;

  SyntheticFill fill_mode() const { return fill_; }

 private:
  Shape sample_shape_;
  int64_t classes_;
  int64_t size_;
  SyntheticFill fill_;
  uint64_t seed_;
  float constant_;
};

}  // namespace cnnscale
