// Symmetric int8 quantisation of one value, the rule every int8 path shares (calibration's
// simulation, the backends' quantize_int8): v is stored as q = round(v / scale), to nearest with
// ties to even, clamped to [-127, 127] (-128 unused, so that negation stays in range), and stands
// for q * scale; NaN maps to 0. The division is IEEE's, so host and device round alike.
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

}  // namespace cnnscale
