// Training-time augmentation: a random crop with zero padding (a shift of up to `crop_pad` pixels
// on each axis, the study's +-5-pixel displacements) and a horizontal mirror, drawn per sample from
// a counter-based hash of (seed, epoch, sample index): the same for any batch size, rank count,
// thread count or resume, and computable on a GPU from the same function.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "data/dataset.hpp"

namespace cnnscale {

struct AugmentOptions {
  int64_t crop_pad = 0;  // shift of up to this many pixels on each axis; the uncovered border is 0
  bool mirror = false;   // flip left-right with probability 1/2
  bool any() const { return crop_pad > 0 || mirror; }
  std::string describe() const;  // "crop pad 4, mirror"; "none"
};

// ConfigError unless the options fit (channels, height, width) samples (a crop pad below both sides).
void check_augment(const AugmentOptions& a, const std::vector<int64_t>& sample_shape);

struct AugmentDraw {
  int64_t dy = 0, dx = 0;  // output(y, x) = input(y + dy, x + dx)
  bool mirror = false;
};

CNNSCALE_HD inline AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t index, int64_t crop_pad,
                                            bool mirror) {
  // Three uniform draws of one stream per (epoch, sample): 2^40 samples and 2^24 epochs are distinct.
  const uint64_t stream = (static_cast<uint64_t>(epoch) << 40) ^ static_cast<uint64_t>(index);
  AugmentDraw d;
  const int64_t span = 2 * crop_pad + 1;
  if (crop_pad > 0) {
    d.dy = static_cast<int64_t>(counter_uniform(seed, stream, 0) * static_cast<float>(span)) - crop_pad;
    d.dx = static_cast<int64_t>(counter_uniform(seed, stream, 1) * static_cast<float>(span)) - crop_pad;
    if (d.dy > crop_pad) d.dy = crop_pad;  // a draw of 1 - 2^-24 rounded up: stay in range
    if (d.dx > crop_pad) d.dx = crop_pad;
  }
  d.mirror = mirror && counter_uniform(seed, stream, 2) < 0.5f;
  return d;
}

// Applies a draw to one (channels, height, width) sample in place; `scratch` is reused.
void augment_sample(float* x, int64_t channels, int64_t height, int64_t width, const AugmentDraw& d,
                    std::vector<float>& scratch);

// One stored (channels, height, width) sample of bytes into `x`, normalised by `map` and augmented
// by a draw, negating the channels map.mirror_negates names when it mirrors (an optical-flow
// volume's x-flow): what Backend::decode_bytes gives, through the same drawn_input. The host path
// of a dataset whose mirror negates channels, which augment_sample, moving floats, cannot do.
void decode_augmented(const uint8_t* bytes, float* x, int64_t channels, int64_t height, int64_t width,
                      const ByteAffine& map, const AugmentDraw& d);

}  // namespace cnnscale
