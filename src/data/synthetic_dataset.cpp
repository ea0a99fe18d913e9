// Synthetic samples from a counter-based generator: N(0, 1) by Box-Muller on counter_uniform, or a
// constant; labels from a hash of (seed, index). No state, so any thread may fill any sample.
#include "data/synthetic_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/rng.hpp"

namespace cnnscale {

namespace {
// Streams of counter_uniform: sample i uses stream 2i for its values and 2i+1 for its label, so the
// two never share random numbers.
constexpr uint64_t kSyntheticSalt = 0x53594E5448455449ull;  // "SYNTHETI"
}  // namespace

SyntheticFill parse_synthetic_fill(const std::string& text) {
  if (text == "gaussian") return SyntheticFill::Gaussian;
  if (text == "constant") return SyntheticFill::Constant;
  throw_config("synthetic fill '{}': expected gaussian or constant", text);
}

SyntheticDataset::SyntheticDataset(Shape sample_shape, int64_t classes, int64_t size, SyntheticFill fill, uint64_t seed,
                                   float constant)
    : sample_shape_(std::move(sample_shape)),
      classes_(classes),
      size_(size),
      fill_(fill),
      seed_(seed),
      constant_(constant) {
  if (sample_shape_.rank() == 0 || sample_shape_.numel() <= 0)
    throw_config("synthetic data: invalid sample shape {}", sample_shape_.to_string());
  if (classes_ < 1) throw_config("synthetic data: classes must be >= 1, got {}", classes_);
  if (size_ < 1) throw_config("synthetic data: size must be >= 1, got {}", size_);
}

std::string SyntheticDataset::name() const {
  return fmt::format("synthetic({})", fill_ == SyntheticFill::Gaussian ? "gaussian" : "constant");
}

void SyntheticDataset::fill(std::span<const int64_t> indices, float* data, int32_t* labels) const {
  const int64_t per_sample = sample_shape_.numel();
  const uint64_t seed = seed_ ^ kSyntheticSalt;
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t idx = indices[s];
    CNNSCALE_CHECK(idx >= 0 && idx < size_, "synthetic sample index {} out of range [0, {})", idx, size_);
    float* out = data + static_cast<int64_t>(s) * per_sample;
    if (fill_ == SyntheticFill::Constant) {
      std::fill(out, out + per_sample, constant_);
    } else {
      const uint64_t stream = 2 * static_cast<uint64_t>(idx);
      for (int64_t i = 0; i < per_sample; i += 2) {
        // 1 - u lies in (0, 1], so the log is finite.
        float u1 = 1.0f - counter_uniform(seed, stream, static_cast<uint64_t>(i));
        float u2 = counter_uniform(seed, stream, static_cast<uint64_t>(i + 1));
        float r = std::sqrt(-2.0f * std::log(u1));
        float theta = 2.0f * std::numbers::pi_v<float> * u2;
        out[i] = r * std::cos(theta);
        if (i + 1 < per_sample) out[i + 1] = r * std::sin(theta);
      }
    }
    uint64_t h = mix64(seed ^ mix64(2 * static_cast<uint64_t>(idx) + 1));
    labels[s] = static_cast<int32_t>(h % static_cast<uint64_t>(classes_));
  }
}

}  // namespace cnnscale
