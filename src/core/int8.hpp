// Symmetric int8 quantisation, the rules every int8 path shares (calibration's table and
// simulation, the backends' quantize_int8, an int8 convolution's filters): v is stored as
// q = round(v / scale), to nearest with ties to even, clamped to [-127, 127] (-128 unused, so that
// negation stays in range), and stands for q * scale; NaN maps to 0. The division is IEEE's, so
// host and device round alike. A weight row (one output channel's filter) has the scale of its
// largest |w| / 127, 1 for an all-zero row, whose weights quantise to 0 under any scale.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace cnnscale {

inline int8_t quantize_int8_value(float v, float scale) {
  if (std::isnan(v)) return 0;
  const float q = std::nearbyint(v / scale);  // the default rounding mode: to nearest, ties to even
  return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
}

inline float int8_weight_scale(const float* row, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(row[i]));
  return m > 0 ? m / 127.0f : 1.0f;
}

}  // namespace cnnscale
