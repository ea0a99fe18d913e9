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

// The stored pixel (sy, sx) that output pixel (y, x) of an h x w image reads under a draw, and
// whether it lies inside the image. One rule for the host's augmentation and both decodes.
CNNSCALE_HD inline bool drawn_source(int64_t y, int64_t x, int64_t h, int64_t w, int64_t dy, int64_t dx, bool mirror,
                                     int64_t& sy, int64_t& sx) {
  sy = y + dy;
  sx = (mirror ? w - 1 - x : x) + dx;
  return sy >= 0 && sy < h && sx >= 0 && sx < w;
}

}  // namespace cnnscale
