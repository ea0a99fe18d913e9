// GradientPlan: how one training run's gradient buffers are written, exchanged and read, decided
// once (solver/gradient_planning.hpp) and then only read: the Net lays out and fills its gradients
// by it, GradientBuckets exchanges them by it, SgdSolver reads them by it, and the step checks them
// by it. Which combinations are legal is said in one place, check().
#pragma once
#include <cstdint>

#include "core/dtype.hpp"

namespace cnnscale {

// The one default gradient bucket size (--bucket-mb): 25 MiB, as PyTorch DDP's bucket_cap_mb.
inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

struct GradientPlan {
  // ---- The exchange across ranks (data parallel); without it none of these apply.
  bool exchange = false;
  bool overlap = true;  // buckets summed during backward, else one sum of the whole buffer after it
  int64_t bucket_bytes = kDefaultBucketBytes;
  DType exchange_dtype = DType::F32;  // f32, or bf16/f16: each bucket rounded for the sum, widened after
  // The compute (bf16) gradients are summed in place, where backward wrote them: the net keeps its
  // compute copies and their gradients at the masters' offsets, the exchange sums them there
  // (rounding only the unmirrored f32 ones, a bucket at a time), and the update reads them there.
  bool sum_compute_grads = false;
  // Layers whose gathered rows are fewer bytes than their parameter gradients form those gradients
  // from every rank's rows (Layer::gathers_gradients at gather_rows rows per rank), not summed.
  bool gather_gradients = false;
  int64_t gather_rows = 0;  // the largest rank's share when planned

  // ---- Loss scaling (fp16): the f32 gradients are checked and unscaled before the update, which a
  // step with an overflow skips.
  bool loss_scaling = false;

  // ---- The update.
  // It reads the mirrored parameters' gradients where backward left them (the compute copies'),
  // and backward no longer widens them into the f32 buffer (SgdMirrors::grads).
  bool update_reads_mirror_grads = false;
  // It checks the gradients for divergence as it reads them, instead of a pass of its own.
  bool update_checks_gradients = false;
  // Each bucket's parameters are updated as soon as the bucket is summed.
  bool update_per_bucket = false;

  // An internal error (CNNSCALE_CHECK) naming the first illegal combination: a plan is made by
  // code from settings checked before, never read from input.
  void check() const;
};

}  // namespace cnnscale
