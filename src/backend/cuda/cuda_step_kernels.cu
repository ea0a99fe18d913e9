// cnnscale's kernels of the training step around the layers: the SGD update (whole and by segment,
// with mirrors), loss scaling and the non-finite check, the cross-entropy loss, its gradient and the
// top-k accuracy. Formulas use explicitly rounded intrinsics (__fmul_rn, __fadd_rn) so nvcc does not
// contract them into FMAs, rounding exactly as the CPU reference's expressions do.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/loss_scale_rule.hpp"
#include "core/byte_input.hpp"
#include "core/rng.hpp"

namespace cnnscale::cuda {
namespace {

__global__ void sgd_update_kernel(int64_t n, float* w, const float* dw, float* history, float lr, float momentum,
                                  float weight_decay) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    float g = __fadd_rn(dw[i], __fmul_rn(weight_decay, w[i]));
    float h = __fadd_rn(__fmul_rn(momentum, history[i]), __fmul_rn(lr, g));
    history[i] = h;
    w[i] = __fsub_rn(w[i], h);
  }
}

// Every parameter in one launch. Each element finds its segment by binary search over the segment
// starts (a few hundred at most, cached), then applies exactly sgd_update_kernel's arithmetic.
// lr_at != null: the learning rate is read from there when the kernel runs. mirror != null: the
// updated value is also written, rounded once to D, to its place in the segment's compute copy
// (SgdMirrors' map: offset, channels, pixels, reordered) -- the conversion the next forward would
// otherwise make, without reading the master a second time. mirror_grads != null: a mirrored
// element's gradient is read at that same place of the copies' gradients and widened (exactly: the
// pass it replaces multiplied the widened value by 1). flag != null: *tag_at goes to *flag (if 0)
// when a gradient read here is NaN or +-inf, one compare-and-swap per thread that saw one.
template <typename D>
__global__ void sgd_segments_kernel(int64_t n, float* w, const float* dw, float* history, const int32_t* ranges,
                                    const float* mults, int segments, float lr, const float* lr_at, float momentum,
                                    float weight_decay, const int32_t* skip_at, D* mirror, const int32_t* map,
                                    const D* mirror_grads, int32_t* flag, const int32_t* tag_at) {
  if (skip_at && *skip_at != 0) return;
  if (lr_at) lr = *lr_at;
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int lo = 0, hi = segments - 1;
    while (lo < hi) {  // the last segment whose start is <= i
      const int mid = (lo + hi + 1) / 2;
      if (ranges[2 * mid] <= i) lo = mid; else hi = mid - 1;
    }
    if (i < ranges[2 * lo] || i >= ranges[2 * lo + 1]) continue;
    // The element's place in its compute copy, or -1. Within a segment (< 2^31 elements: the flat
    // buffer is indexed by i32 ranges) 32-bit arithmetic.
    int copy = -1;
    if (mirror) {
      const int32_t* m = map + 4 * lo;
      if (m[0] >= 0) {
        int j = static_cast<int>(i - ranges[2 * lo]);
        if (m[3] != 0) {  // (K, C, P) -> (K, P, C)
          const int channels = m[1], pixels = m[2], per_filter = channels * pixels;
          const int k = j / per_filter, rest = j - k * per_filter, c = rest / pixels, p = rest - c * pixels;
          j = k * per_filter + p * channels + c;
        }
        copy = m[0] + j;
      }
    }
    const float grad = mirror_grads && copy >= 0 ? to_float(mirror_grads[copy]) : dw[i];
    bad |= !isfinite(grad);
    const float seg_lr = lr * mults[2 * lo], seg_decay = weight_decay * mults[2 * lo + 1];
    float g = __fadd_rn(grad, __fmul_rn(seg_decay, w[i]));
    float h = __fadd_rn(__fmul_rn(momentum, history[i]), __fmul_rn(seg_lr, g));
    history[i] = h;
    const float updated = __fsub_rn(w[i], h);
    w[i] = updated;
    if (copy >= 0) mirror[copy] = from_float<D>(updated);
  }
  if (flag && bad) atomicCAS(flag, 0, *tag_at);
}

// One thread: a handful of scalars, the rule of loss_scale_rule.hpp.
__global__ void update_loss_scale_kernel(const int32_t* found_inf, float* scale, int32_t* state, const int32_t* tag,
                                         int32_t* nonfinite, int64_t growth_interval, float max_scale) {
  LossScaleState s{scale[0], scale[1], state[0], state[1], state[2], *nonfinite};
  loss_scale_step(s, *found_inf != 0, *tag, growth_interval, max_scale);
  scale[0] = s.scale;
  scale[1] = s.inverse;
  state[0] = s.clean;
  state[1] = s.skipped;
  state[2] = s.skip;
  *nonfinite = s.nonfinite;
}

// A read of every element (bandwidth-bound: docs/measurements/2026-11-25-cuda-kernel-choices.md);
// one compare-and-swap per thread that saw a non-finite value, and none at all in a healthy step.
__global__ void flag_nonfinite_kernel(int64_t n, const float* x, int32_t tag, const int32_t* tag_at, int32_t* flag) {
  if (*flag != 0) return;  // already flagged: the first tag stays
  if (tag_at) tag = *tag_at;
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += global_stride()) bad |= !isfinite(x[i]);
  if (bad) atomicCAS(flag, 0, tag);
}

// One block: the loss is a device scalar, so the step needs no host round trip. Partial sums in
// double keep the result independent of the thread count to well below fp32 resolution.
constexpr int kLossThreads = 512;
__global__ void cross_entropy_kernel(const float* prob, const int32_t* labels, int64_t n, int64_t c, float* loss) {
  __shared__ double partial[kLossThreads];
  double acc = 0.0;
  int bad = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int32_t label = labels[i];
    if (label < 0 || label >= c) {
      bad = 1;
    } else {
      acc += static_cast<double>(logf(fmaxf(prob[i * c + label], FLT_MIN)));
    }
  }
  partial[threadIdx.x] = acc;
  bad = __syncthreads_or(bad);
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = bad ? NAN : static_cast<float>(-partial[0] / static_cast<double>(n));
}

__global__ void softmax_ce_backward_kernel(const float* prob, const int32_t* labels, int64_t n, int64_t c,
                                           float scale, float* dx) {
  for (int64_t i = global_index(); i < n * c; i += global_stride()) {
    int64_t row = i / c;
    int32_t label = labels[row];
    if (label < 0 || label >= c) {
      dx[i] = NAN;
    } else {
      float onehot = (i - row * c == label) ? 1.0f : 0.0f;
      dx[i] = __fmul_rn(scale, __fsub_rn(prob[i], onehot));
    }
  }
}

struct TopKList {
  int k[kMaxTopK];
  int count;
};

// One block of warps; a warp ranks one sample at a time (lanes stride over its row, so reads are
// coalesced), lane 0 keeps hit counts, and the block reduces them into `out`.
constexpr int kAccuracyThreads = 1024;
template <typename T>
__global__ void accuracy_kernel(const T* scores, const int32_t* labels, int64_t n, int64_t c, TopKList ks,
                                float* out) {
  constexpr int kWarps = kAccuracyThreads / 32;
  __shared__ long long warp_hits[kMaxTopK][kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long hits[kMaxTopK] = {0};
  int bad = 0;
  for (int64_t s = warp; s < n; s += kWarps) {
    int32_t label = labels[s];  // same for the whole warp: the branch below is warp-uniform
    if (label < 0 || label >= c) {
      bad = 1;
      continue;
    }
    const T* row = scores + s * c;
    const float label_score = to_float(row[label]);
    int above = 0;  // other classes scoring >= the label: ties count against the label
    for (int64_t j = lane; j < c; j += 32) above += (j != label && to_float(row[j]) >= label_score) ? 1 : 0;
    for (int off = 16; off > 0; off >>= 1) above += __shfl_down_sync(0xffffffffu, above, off);
    if (lane == 0)
      for (int t = 0; t < ks.count; ++t) hits[t] += above < ks.k[t] ? 1 : 0;
  }
  if (lane == 0)
    for (int t = 0; t < kMaxTopK; ++t) warp_hits[t][warp] = hits[t];
  bad = __syncthreads_or(bad);
  if (threadIdx.x < ks.count) {
    long long total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_hits[threadIdx.x][w];
    out[threadIdx.x] = bad ? NAN : static_cast<float>(static_cast<double>(total) / static_cast<double>(n));
  }
}


}  // namespace

void launch_sgd_update(int64_t n, float* w, const float* dw, float* history, float lr, float momentum,
                       float weight_decay, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_update_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, w, dw, history, lr, momentum, weight_decay);
  CUDA_CHECK_LAUNCH("sgd_update_kernel");
}

void launch_sgd_segments(int64_t n, float* w, const float* dw, float* history, const int32_t* ranges,
                         const float* mults, int segments, float lr, const float* lr_at, float momentum,
                         float weight_decay, cudaStream_t stream, const int32_t* skip_at, const SegmentMirror& mirror,
                         int32_t* flag, const int32_t* tag_at) {
  if (n <= 0 || segments <= 0) return;
  if (!mirror.data) {
    sgd_segments_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(n, w, dw, history, ranges, mults, segments,
                                                                       lr, lr_at, momentum, weight_decay, skip_at,
                                                                       nullptr, nullptr, nullptr, flag, tag_at);
  } else {
    dispatch_float(mirror.dtype, "sgd_update_segments mirror", [&](auto d) {
      using D = decltype(d);
      sgd_segments_kernel<D><<<blocks_for(n), kThreads, 0, stream>>>(
          n, w, dw, history, ranges, mults, segments, lr, lr_at, momentum, weight_decay, skip_at,
          static_cast<D*>(mirror.data), mirror.map, static_cast<const D*>(mirror.grads), flag, tag_at);
    });
  }
  CUDA_CHECK_LAUNCH("sgd_segments_kernel");
}

void launch_update_loss_scale(const int32_t* found_inf, float* scale, int32_t* state, const int32_t* tag,
                              int32_t* nonfinite, int64_t growth_interval, float max_scale, cudaStream_t stream) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(found_inf, scale, state, tag, nonfinite, growth_interval, max_scale);
  CUDA_CHECK_LAUNCH("update_loss_scale_kernel");
}

void launch_flag_nonfinite(int64_t n, const float* x, int32_t tag, const int32_t* tag_at, int32_t* flag,
                           cudaStream_t stream) {
  if (n <= 0) return;
  flag_nonfinite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, x, tag, tag_at, flag);
  CUDA_CHECK_LAUNCH("flag_nonfinite_kernel");
}

void launch_cross_entropy_loss(const float* prob, const int32_t* labels, int64_t n, int64_t c, float* loss,
                               cudaStream_t stream) {
  cross_entropy_kernel<<<1, kLossThreads, 0, stream>>>(prob, labels, n, c, loss);
  CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

void launch_softmax_cross_entropy_backward(const float* prob, const int32_t* labels, int64_t n, int64_t c,
                                           float scale, float* dx, cudaStream_t stream) {
  if (n * c <= 0) return;
  softmax_ce_backward_kernel<<<blocks_for(n * c), kThreads, 0, stream>>>(prob, labels, n, c, scale, dx);
  CUDA_CHECK_LAUNCH("softmax_ce_backward_kernel");
}

void launch_accuracy_topk(DType t, const void* scores, const int32_t* labels, int64_t n, int64_t c, const int* ks,
                          int num_k, float* out, cudaStream_t stream) {
  TopKList list{};
  for (int i = 0; i < num_k && i < kMaxTopK; ++i) list.k[i] = ks[i];
  list.count = num_k < kMaxTopK ? num_k : kMaxTopK;
  dispatch_float(t, "accuracy_topk", [&](auto e) {
    using T = decltype(e);
    accuracy_kernel<T><<<1, kAccuracyThreads, 0, stream>>>(static_cast<const T*>(scores), labels, n, c, list, out);
  });
  CUDA_CHECK_LAUNCH("accuracy_kernel");
}


}  // namespace cnnscale::cuda
