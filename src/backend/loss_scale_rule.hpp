// fp16 dynamic loss scaling's update rule (PyTorch GradScaler's), one step, on plain values: the
// one definition that Backend::update_loss_scale runs on the host and the CUDA backend's kernel
// runs on the device (compiled by nvcc there, hence the qualifiers).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define CNNSCALE_HOST_DEVICE __host__ __device__
#else
#define CNNSCALE_HOST_DEVICE
#endif

namespace cnnscale {

struct LossScaleState {
  float scale, inverse;     // the loss scale and 1 / scale (both exact: powers of two)
  int32_t clean, skipped;   // clean steps in a row, skipped steps so far
  int32_t skip;             // this step's update is skipped
  int32_t nonfinite;        // the divergence flag (0: none yet; else the first failing step's tag)
};

// After a step whose gradients overflowed (found_inf) or not. Halving a scale below 1 would mean
// that even unscaled gradients overflow: that is divergence, flagged with `tag`, not a skip.
CNNSCALE_HOST_DEVICE inline void loss_scale_step(LossScaleState& s, bool found_inf, int32_t tag,
                                                 int64_t growth_interval, float max_scale) {
  s.skip = 0;
  if (found_inf) {
    s.clean = 0;
    if (s.scale >= 2.0f) {
      s.scale *= 0.5f;
      s.skip = 1;
      ++s.skipped;
    } else if (s.nonfinite == 0) {
      s.nonfinite = tag;
    }
  } else if (++s.clean >= growth_interval) {
    s.clean = 0;
    s.scale = s.scale * 2.0f <= max_scale ? s.scale * 2.0f : max_scale;
  }
  s.inverse = 1.0f / s.scale;
}

}  // namespace cnnscale
