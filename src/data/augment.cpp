// See augment.hpp.
#include "data/augment.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/byte_input.hpp"
#include "core/error.hpp"

namespace cnnscale {

std::string AugmentOptions::describe() const {
  if (!any()) return "none";
  std::string s = crop_pad > 0 ? fmt::format("random crop, pad {}", crop_pad) : "";
  if (mirror) s += s.empty() ? "mirror" : ", mirror";
  return s;
}

void check_augment(const AugmentOptions& a, const std::vector<int64_t>& s) {
  if (a.crop_pad < 0) throw_config("--crop-pad must be >= 0, got {}", a.crop_pad);
  if (!a.any()) return;
  if (s.size() != 3) throw_config("augmentation needs (C, H, W) samples, not {}-d ones", s.size());
  if (a.crop_pad >= std::min(s[1], s[2]))
    throw_config("--crop-pad {}: must be below the samples' height and width ({}x{})", a.crop_pad, s[1], s[2]);
}

void augment_sample(float* x, int64_t channels, int64_t height, int64_t width, const AugmentDraw& d,
                    std::vector<float>& scratch) {
  if (d.dy == 0 && d.dx == 0 && !d.mirror) return;
  const int64_t plane = height * width;
  scratch.assign(x, x + channels * plane);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t ox = 0; ox < width; ++ox) {
        int64_t sy = 0, sx = 0;
        x[c * plane + y * width + ox] = drawn_source(y, ox, height, width, d.dy, d.dx, d.mirror, sy, sx)
                                            ? scratch[static_cast<size_t>(c * plane + sy * width + sx)]
                                            : 0.0f;
      }
}

void decode_augmented(const uint8_t* bytes, float* x, int64_t channels, int64_t height, int64_t width,
                      const ByteAffine& map, const AugmentDraw& d) {
  const int64_t plane = height * width;
  for (int64_t c = 0; c < channels; ++c) {
    const auto k = static_cast<size_t>(c);
    const bool negates = k < map.mirror_negates.size() && map.mirror_negates[k];
    for (int64_t y = 0; y < height; ++y)
      for (int64_t ox = 0; ox < width; ++ox)
        x[c * plane + y * width + ox] = drawn_input(bytes + c * plane, y, ox, height, width, d.dy, d.dx, d.mirror,
                                                    negates, map.scale[k], map.offset[k]);
  }
}

}  // namespace cnnscale
