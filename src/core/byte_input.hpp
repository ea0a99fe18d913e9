// Samples stored as bytes (Fashion-MNIST's IDX files, HDF5 shards) become the network's float input
// through one affine map per channel, x = byte * scale[c] + offset[c], with (byte / 255 - mean) / std
// folded into scale and offset. The host readers and the device decode both use this definition,
// and both round the product and the sum separately (the device through __fmul_rn/__fadd_rn, which
// a compiler may not fuse into one FMA; host code is built with -ffp-contract=off, CMakeLists.txt),
// so a batch decoded on the GPU equals the host's float batch bit for bit.
#pragma once
#include <cstdint>

#include "core/rng.hpp"  // CNNSCALE_HD

namespace cnnscale {

CNNSCALE_HD inline float byte_to_input(uint8_t byte, float scale, float offset) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(static_cast<float>(byte), scale), offset);
#else
  return static_cast<float>(byte) * scale + offset;
#endif
}

// A byte batch's augmentation, per sample three int32 (dy, dx, mirror) as data/augment.hpp draws
// them: output pixel (y, x) reads the stored pixel (y + dy, (mirror ? W - 1 - x : x) + dx), and is 0
// (the normalised mean) where that lies outside the image. Backend::decode_bytes applies them.
inline constexpr int64_t kDrawInts = 3;

// Optical-flow volumes (cnnscale data flow) store each flow component v (pixels per frame) as the
// byte b = clamp(round(128 + v * 127.5 / bound), 0, 255), which stands for v(b) = (b - 128) * bound
// / 127.5. A horizontal mirror reverses horizontal motion, so a mirrored volume's x-flow channels
// must hold -v(b) where they held v(b): that is the byte 256 - b exactly (v(256 - b) = -v(b)), a
// reflection about the zero point 128, which maps to itself (1..255 to 255..1). Byte 0 (a flow
// below -bound, clamped) has no byte for its negation (256) and becomes 255, where the converter
// clamps every flow from 126.5 / 127.5 bound up. The negation happens on the byte, before the
// channel's ordinary affine map, so every decode gives the float that the converter's byte for the
// negated flow gives, bit for bit on the host and the GPU. (Negating the normalised float instead
// would be wrong: its zero is (128 / 255 - mean) / std, not 0.)
inline constexpr int kFlowZeroByte = 128;
CNNSCALE_HD inline uint8_t negated_flow_byte(uint8_t b) {
  return b == 0 ? uint8_t{255} : static_cast<uint8_t>(2 * kFlowZeroByte - b);
}

// The stored pixel (sy, sx) that output pixel (y, x) of an h x w image reads under a draw, and
// whether it lies inside the image. One rule for the host's augmentation and both decodes.
CNNSCALE_HD inline bool drawn_source(int64_t y, int64_t x, int64_t h, int64_t w, int64_t dy, int64_t dx, bool mirror,
                                     int64_t& sy, int64_t& sx) {
  sy = y + dy;
  sx = (mirror ? w - 1 - x : x) + dx;
  return sy >= 0 && sy < h && sx >= 0 && sx < w;
}

// Output pixel (y, x) of one h x w channel `plane` of stored bytes under a draw, as the network's
// float: the drawn source byte through the channel's map (negated first when the sample is mirrored
// and the channel is one a mirror negates, the x-flow of a flow volume), 0 outside the image. The
// one definition the host's flow augmentation and both backends' decodes use.
CNNSCALE_HD inline float drawn_input(const uint8_t* plane, int64_t y, int64_t x, int64_t h, int64_t w, int64_t dy,
                                     int64_t dx, bool mirror, bool mirror_negates, float scale, float offset) {
  int64_t sy = 0, sx = 0;
  if (!drawn_source(y, x, h, w, dy, dx, mirror, sy, sx)) return 0.0f;
  const uint8_t b = plane[sy * w + sx];
  return byte_to_input(mirror && mirror_negates ? negated_flow_byte(b) : b, scale, offset);
}

}  // namespace cnnscale
