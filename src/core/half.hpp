// Host conversions between float and the 16-bit formats (bf16: fp32's 8-bit exponent with 7
// mantissa bits; fp16: IEEE binary16, 5-bit exponent, 10 mantissa bits), rounding to nearest even
// as the GPU's conversions do, so host-made references round exactly like device data.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"

namespace cnnscale {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // stay a (quiet) NaN
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is the right result
  // (up to infinity for the largest finite values).
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past 65504: infinity
  if (abs < 0x38800000) {
    // Subnormal in fp16 (below 2^-14): the value in units of 2^-24, rounded to nearest even. The
    // float's own product with 2^24 is exact, so nearbyint (ties to even by default) does it.
    const float scaled = bits_float(abs) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t v = abs - (112u << 23);
  v += 0xfff + ((v >> 13) & 1);
  return static_cast<uint16_t>(sign | (v >> 13));
}
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000 | (man << 13));
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

// float <-> the storage of `t` (F32, BF16 or F16); other types are a caller's error.
inline void store_float(DType t, float v, void* dst, int64_t i) {
  if (t == DType::F32) {
    static_cast<float*>(dst)[i] = v;
  } else {
    static_cast<uint16_t*>(dst)[i] = t == DType::BF16 ? float_to_bf16(v) : float_to_f16(v);
  }
}
inline float load_float(DType t, const void* src, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(src)[i];
  const uint16_t h = static_cast<const uint16_t*>(src)[i];
  return t == DType::BF16 ? bf16_to_float(h) : f16_to_float(h);
}
// The value `v` becomes when stored in `t` and read back.
inline float round_to(DType t, float v) {
  if (t == DType::F32) return v;
  return t == DType::BF16 ? bf16_to_float(float_to_bf16(v)) : f16_to_float(float_to_f16(v));
}

}  // namespace cnnscale
