// Training batch norm over channels-last tensors, cnnscale's own kernels: `rows` rows (N*H*W
// pixels) of `c` contiguous channels, statistics per channel over every row.
//
// Why not cuDNN alone: its channels-last training kernels are the persistent ones
// (CUDNN_BATCHNORM_SPATIAL_PERSISTENT), which assume the whole GPU. On an SM partition (a green
// context smaller than the device) they failed with CUDNN_STATUS_EXECUTION_FAILED, and the spatial
// kernels that remain ran ResNet-34's channels-last batch norms some 20x slower than the rest of
// its step (docs/measurements/2026-11-25-cuda-kernel-choices.md). These kernels size their grids to
// the SMs they are given, so a partition runs them as the whole GPU does; `--batchnorm` compares
// them with cuDNN's on the whole GPU.
//
// Forward: (1) each block sums a strided subset of rows per channel, shifted by a pivot (the
// channel's value in row 0), into partials; (2) one thread per channel adds its blocks' partials in
// double, in block order (deterministic), and derives the mean, the biased variance, 1/std, the
// running statistics and the affine coefficients; (3) y = ReLU((x - mean) * scale / std + shift [+
// z]) element-wise. Backward: (1) partial sums of the gated gradient g and of g * (x - mean); (2)
// per channel dshift, dscale and the coefficients of dx; (3) dx = k1 g + k2 + k3 (x - mean), and
// the addend's gradient g. All arithmetic is fp32 per element and per thread, double across blocks.
//
// The shifted sums keep the variance accurate when a channel's mean is far from zero: var = E[(x -
// K)^2] - E[x - K]^2 loses (mean - K)^2 / var of fp32's 24 bits to cancellation, and with K one of
// the channel's own values that ratio is of order one, where with K = 0 it is mean^2 / var.
//
// Geometry (BnRows): a row's channels are read as packs of V elements (16 bytes where c and every
// pointer allow, else one element); the packs of a row go to consecutive threads, so a warp reads
// contiguous memory, and a block of kThreads covers per_pass rows at once. Rows wider than kThreads
// packs split into channel slices (grid y). Each thread keeps its pack's channels for every row it
// visits, so no kernel divides an index.
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_launch.cuh"

namespace cnnscale::cuda {
namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Lanes {
  T v[V];
};

struct BnRows {
  int64_t rows;
  int c, packs;     // packs = c / V per row
  int slice_packs;  // packs per channel slice (grid y), at most kThreads
  int per_pass;     // rows a block covers at once: kThreads / slice_packs
  unsigned blocks;  // grid x
  unsigned slices;  // grid y
};

// Row blocks per SM of the grid: four 256-thread blocks keep 64 bytes in flight per thread (four
// 16-byte packs) times 1024 threads, several times what an SM needs to saturate its share of HBM.
constexpr int kBlocksPerSm = 4;

BnRows bn_rows(int64_t rows, int c, int v, int sms) {
  BnRows g{};
  g.rows = rows;
  g.c = c;
  g.packs = c / v;
  g.slice_packs = g.packs < kThreads ? g.packs : kThreads;
  g.slices = static_cast<unsigned>((g.packs + g.slice_packs - 1) / g.slice_packs);
  g.per_pass = kThreads / g.slice_packs;
  const int64_t want = (rows + g.per_pass - 1) / g.per_pass;
  int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 1) * kBlocksPerSm / g.slices;
  if (cap < 1) cap = 1;
  g.blocks = static_cast<unsigned>(want < cap ? (want < 1 ? 1 : want) : cap);
  return g;
}

// This thread's place in a BnRows grid: the pack column q (of the row), its first row and the row
// step; active is false for threads past the rows of a pass or the packs of the last slice.
struct BnThread {
  int q, j;
  int64_t first, step;
  bool active;
};

__device__ __forceinline__ BnThread bn_thread(const BnRows& g) {
  BnThread t;
  t.j = static_cast<int>(threadIdx.x) / g.slice_packs;
  t.q = static_cast<int>(blockIdx.y) * g.slice_packs + static_cast<int>(threadIdx.x) % g.slice_packs;
  t.first = static_cast<int64_t>(blockIdx.x) * g.per_pass + t.j;
  t.step = static_cast<int64_t>(gridDim.x) * g.per_pass;
  t.active = t.j < g.per_pass && t.q < g.packs;
  return t;
}

// Adds the block's per-thread sums a[V] and b[V] over the rows of a pass, in row order, and writes
// them as partial[(blockIdx.x * c + channel) * 2 + {0, 1}].
template <int V>
__device__ void bn_block_partials(const BnRows& g, const float (&a)[V], const float (&b)[V], float* partial) {
  __shared__ float sums[2 * kThreads * V];
  const int lane = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    sums[lane * V + k] = a[k];
    sums[(kThreads + lane) * V + k] = b[k];
  }
  __syncthreads();
  // sums[(j * slice_packs + p) * V + k] holds row j of the pass, channel p * V + k of the slice.
  const int width = g.slice_packs * V;
  for (int ch = lane; ch < width; ch += kThreads) {
    const int channel = static_cast<int>(blockIdx.y) * width + ch;
    if (channel >= g.c) break;
    float ta = 0.0f, tb = 0.0f;
    for (int j = 0; j < g.per_pass; ++j) {
      ta += sums[j * width + ch];
      tb += sums[kThreads * V + j * width + ch];
    }
    float* out = partial + (static_cast<int64_t>(blockIdx.x) * g.c + channel) * 2;
    out[0] = ta;
    out[1] = tb;
  }
}

// Channel ch's two partial sums over the `blocks` row blocks, added in double in block order (the
// same on every run).
__device__ __forceinline__ double2 sum_partials(const float* partial, int blocks, int c, int ch) {
  double a = 0.0, b = 0.0;
  for (int k = 0; k < blocks; ++k) {
    const float* p = partial + (static_cast<int64_t>(k) * c + ch) * 2;
    a += p[0];
    b += p[1];
  }
  return make_double2(a, b);
}

// Forward pass (1): sums of x - K and (x - K)^2, K = row 0's value of the channel.
template <typename T, int V>
__global__ void bn_stats_kernel(BnRows g, const Lanes<T, V>* __restrict__ x, float* __restrict__ partial) {
  const BnThread t = bn_thread(g);
  float s[V] = {}, ss[V] = {};
  if (t.active) {
    const Lanes<T, V> p = x[t.q];
    float pivot[V];
#pragma unroll
    for (int k = 0; k < V; ++k) pivot[k] = to_float(p.v[k]);
    int64_t r = t.first;
    for (; r + 3 * t.step < g.rows; r += 4 * t.step) {
      Lanes<T, V> v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = x[(r + u * t.step) * g.packs + t.q];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = to_float(v[u].v[k]) - pivot[k];
          s[k] += d;
          ss[k] = fmaf(d, d, ss[k]);
        }
    }
    for (; r < g.rows; r += t.step) {
      const Lanes<T, V> v = x[r * g.packs + t.q];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = to_float(v.v[k]) - pivot[k];
        s[k] += d;
        ss[k] = fmaf(d, d, ss[k]);
      }
    }
  }
  bn_block_partials<V>(g, s, ss, partial);
}

// Forward pass (2), one thread per channel. coef[ch] = (mean, scale / std, shift).
template <typename T>
__global__ void bn_finalize_forward_kernel(int blocks, int64_t rows, int c, const T* __restrict__ x,
                                           const float* __restrict__ partial, const float* __restrict__ scale,
                                           const float* __restrict__ shift, float momentum, double eps,
                                           float* running_mean, float* running_var, float* save_mean,
                                           float* save_inv_std, float4* coef) {
  const int ch = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (ch >= c) return;
  const double2 sums = sum_partials(partial, blocks, c, ch);  // of x - K and (x - K)^2
  const double m = static_cast<double>(rows), shifted_mean = sums.x / m;
  double var = sums.y / m - shifted_mean * shifted_mean;  // biased
  if (var < 0.0) var = 0.0;
  const double mean = static_cast<double>(to_float(x[ch])) + shifted_mean;
  const double inv_std = 1.0 / sqrt(var + eps);
  save_mean[ch] = static_cast<float>(mean);
  save_inv_std[ch] = static_cast<float>(inv_std);
  // cuDNN's contract (cuda_norm.cpp): running = (1 - momentum) running + momentum batch, with the
  // unbiased variance.
  const double f = momentum;
  running_mean[ch] = static_cast<float>((1.0 - f) * running_mean[ch] + f * mean);
  running_var[ch] = static_cast<float>((1.0 - f) * running_var[ch] + f * var * m / (m - 1.0));
  coef[ch] = make_float4(static_cast<float>(mean), static_cast<float>(scale[ch] * inv_std), shift[ch], 0.0f);
}

// Forward pass (3): y = ReLU?((x - mean) * a + shift [+ z]). In place (y == x or y == z) allowed:
// each element is read by the thread that then writes it, and read no more (no __restrict__ here).
template <typename T, int V>
__global__ void bn_apply_kernel(BnRows g, const Lanes<T, V>* x, const Lanes<T, V>* z, const float4* coef, bool relu,
                                Lanes<T, V>* y) {
  const BnThread t = bn_thread(g);
  if (!t.active) return;
  float mean[V], a[V], b[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float4 e = coef[t.q * V + k];
    mean[k] = e.x;
    a[k] = e.y;
    b[k] = e.z;
  }
  for (int64_t r = t.first; r < g.rows; r += t.step) {
    const int64_t i = r * g.packs + t.q;
    const Lanes<T, V> xv = x[i];
    Lanes<T, V> zv;
    if (z) zv = z[i];
    Lanes<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float v = fmaf(to_float(xv.v[k]) - mean[k], a[k], b[k]);
      if (z) v += to_float(zv.v[k]);
      if (relu) v = v > 0.0f ? v : 0.0f;  // as relu_forward: NaN gives 0
      out.v[k] = from_float<T>(v);
    }
    y[i] = out;
  }
}

// The gradient reaching bn(x): dy, gated by the fused ReLU's output where there is one.
template <typename T>
__device__ __forceinline__ float bn_gated(T dy, const T* y_pack_elem) {
  return y_pack_elem && !(to_float(*y_pack_elem) > 0.0f) ? 0.0f : to_float(dy);
}

// Backward pass (1): sums of g and of g * (x - mean).
template <typename T, int V>
__global__ void bn_grad_stats_kernel(BnRows g, const Lanes<T, V>* __restrict__ x, const Lanes<T, V>* __restrict__ dy,
                                     const Lanes<T, V>* __restrict__ y, const float* __restrict__ save_mean,
                                     float* __restrict__ partial) {
  const BnThread t = bn_thread(g);
  float sg[V] = {}, sgx[V] = {};
  if (t.active) {
    float mean[V];
#pragma unroll
    for (int k = 0; k < V; ++k) mean[k] = save_mean[t.q * V + k];
    for (int64_t r = t.first; r < g.rows; r += t.step) {
      const int64_t i = r * g.packs + t.q;
      const Lanes<T, V> xv = x[i], dv = dy[i];
      Lanes<T, V> yv;
      if (y) yv = y[i];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float gk = bn_gated(dv.v[k], y ? &yv.v[k] : static_cast<const T*>(nullptr));
        sg[k] += gk;
        sgx[k] = fmaf(gk, to_float(xv.v[k]) - mean[k], sgx[k]);
      }
    }
  }
  bn_block_partials<V>(g, sg, sgx, partial);
}

// Backward pass (2), one thread per channel: dshift = sum g, dscale = sum g x_hat, and
// dx = scale/std (g - dshift/m - x_hat dscale/m) = k1 g + k2 + k3 (x - mean): coef[ch] = (mean, k1,
// k2, k3).
__global__ void bn_finalize_backward_kernel(int blocks, int64_t rows, int c, const float* __restrict__ partial,
                                            const float* __restrict__ scale, const float* __restrict__ save_mean,
                                            const float* __restrict__ save_inv_std, float* dscale, float* dshift,
                                            float4* coef) {
  const int ch = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (ch >= c) return;
  const double2 sums = sum_partials(partial, blocks, c, ch);
  const double sg = sums.x, sgx = sums.y;  // of g and g (x - mean)
  const double m = static_cast<double>(rows), inv_std = save_inv_std[ch];
  const double k1 = scale[ch] * inv_std;
  dshift[ch] = static_cast<float>(sg);
  dscale[ch] = static_cast<float>(sgx * inv_std);
  coef[ch] = make_float4(save_mean[ch], static_cast<float>(k1), static_cast<float>(-k1 * sg / m),
                         static_cast<float>(-k1 * inv_std * inv_std * sgx / m));
}

// Backward pass (3): dx, and dz = g for a fused addend. dx may be dy, x or y (in place), as in pass
// (3) of the forward; dz may be dy, not dx.
template <typename T, int V>
__global__ void bn_dx_kernel(BnRows g, const Lanes<T, V>* x, const Lanes<T, V>* dy, const Lanes<T, V>* y,
                             const float4* coef, Lanes<T, V>* dx, Lanes<T, V>* dz) {
  const BnThread t = bn_thread(g);
  if (!t.active) return;
  float4 e[V];
#pragma unroll
  for (int k = 0; k < V; ++k) e[k] = coef[t.q * V + k];
  for (int64_t r = t.first; r < g.rows; r += t.step) {
    const int64_t i = r * g.packs + t.q;
    const Lanes<T, V> xv = x[i], dv = dy[i];
    Lanes<T, V> yv;
    if (y) yv = y[i];
    Lanes<T, V> out, gz;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gk = bn_gated(dv.v[k], y ? &yv.v[k] : static_cast<const T*>(nullptr));
      out.v[k] = from_float<T>(fmaf(e[k].w, to_float(xv.v[k]) - e[k].x, fmaf(e[k].y, gk, e[k].z)));
      gz.v[k] = from_float<T>(gk);
    }
    dx[i] = out;
    if (dz) dz[i] = gz;
  }
}

// f(std::integral_constant<int, V>) with V = the 16-byte pack's count when c and every pointer
// allow it, else 1.
template <typename T, typename F>
void with_lanes(int64_t c, std::initializer_list<const void*> pointers, F&& f) {
  constexpr int kPack = Pack<T>::kCount;
  bool packed = c % kPack == 0;
  for (const void* p : pointers)
    if (p && !aligned16(p)) packed = false;
  if (packed)
    f(std::integral_constant<int, kPack>{});
  else
    f(std::integral_constant<int, 1>{});
}

// The workspace of a launch: the partial sums (a pair per channel per row block), then the
// per-channel coefficients at the next 16-byte boundary. bn_rows_workspace_bytes sizes it for the
// largest grid any pack width gives.
struct BnWorkspace {
  float* partial;
  float4* coef;
};
int64_t partials_bytes(int64_t blocks, int64_t c) {
  return blocks * c * 2 * static_cast<int64_t>(sizeof(float));
}
BnWorkspace bn_workspace(void* workspace, const BnRows& g) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(workspace);
  return {static_cast<float*>(workspace),
          reinterpret_cast<float4*>((base + static_cast<uintptr_t>(partials_bytes(g.blocks, g.c)) + 15) / 16 * 16)};
}

unsigned channel_blocks(int c) {
  return static_cast<unsigned>((c + kThreads - 1) / kThreads);
}

}  // namespace

int64_t bn_rows_workspace_bytes(int64_t rows, int64_t c, int sms) {
  // Each of a launch's row blocks writes a partial pair for every channel (its slice's): the most
  // blocks any pack width V gives, times c pairs, then the per-channel coefficients (16-byte aligned).
  int64_t blocks = 0;
  for (int v : {1, 4, 8})
    if (c % v == 0) {
      const BnRows g = bn_rows(rows, static_cast<int>(c), v, sms);
      if (g.blocks > blocks) blocks = g.blocks;
    }
  return partials_bytes(blocks, c) + c * static_cast<int64_t>(sizeof(float4)) + 16;  // + alignment
}

void launch_bn_rows_forward_train(DType t, int64_t rows, int64_t c, int sms, const void* x, const void* z,
                                  const float* scale, const float* shift, float momentum, double eps,
                                  float* running_mean, float* running_var, float* save_mean, float* save_inv_std,
                                  bool relu, void* y, void* workspace, cudaStream_t stream) {
  if (rows <= 0 || c <= 0) return;
  dispatch_float(t, "batchnorm_forward_train", [&](auto e) {
    using T = decltype(e);
    with_lanes<T>(c, {x, z, y}, [&](auto lanes) {
      constexpr int V = decltype(lanes)::value;
      using L = Lanes<T, V>;
      const BnRows g = bn_rows(rows, static_cast<int>(c), V, sms);
      const auto [partial, coef] = bn_workspace(workspace, g);
      const dim3 grid(g.blocks, g.slices);
      bn_stats_kernel<T, V><<<grid, kThreads, 0, stream>>>(g, static_cast<const L*>(x), partial);
      CUDA_CHECK_LAUNCH("bn_stats_kernel");
      bn_finalize_forward_kernel<T><<<channel_blocks(g.c), kThreads, 0, stream>>>(
          static_cast<int>(g.blocks), rows, g.c, static_cast<const T*>(x), partial, scale, shift, momentum, eps,
          running_mean, running_var, save_mean, save_inv_std, coef);
      CUDA_CHECK_LAUNCH("bn_finalize_forward_kernel");
      bn_apply_kernel<T, V><<<grid, kThreads, 0, stream>>>(g, static_cast<const L*>(x), static_cast<const L*>(z), coef,
                                                           relu, static_cast<L*>(y));
      CUDA_CHECK_LAUNCH("bn_apply_kernel");
    });
  });
}

void launch_bn_rows_backward(DType t, int64_t rows, int64_t c, int sms, const void* x, const void* dy, const void* y,
                             const float* scale, const float* save_mean, const float* save_inv_std, void* dx,
                             float* dscale, float* dshift, void* dz, void* workspace, cudaStream_t stream) {
  if (rows <= 0 || c <= 0) return;
  dispatch_float(t, "batchnorm_backward", [&](auto e) {
    using T = decltype(e);
    with_lanes<T>(c, {x, dy, y, dx, dz}, [&](auto lanes) {
      constexpr int V = decltype(lanes)::value;
      using L = Lanes<T, V>;
      const BnRows g = bn_rows(rows, static_cast<int>(c), V, sms);
      const auto [partial, coef] = bn_workspace(workspace, g);
      const dim3 grid(g.blocks, g.slices);
      bn_grad_stats_kernel<T, V><<<grid, kThreads, 0, stream>>>(g, static_cast<const L*>(x), static_cast<const L*>(dy),
                                                                static_cast<const L*>(y), save_mean, partial);
      CUDA_CHECK_LAUNCH("bn_grad_stats_kernel");
      bn_finalize_backward_kernel<<<channel_blocks(g.c), kThreads, 0, stream>>>(
          static_cast<int>(g.blocks), rows, g.c, partial, scale, save_mean, save_inv_std, dscale, dshift, coef);
      CUDA_CHECK_LAUNCH("bn_finalize_backward_kernel");
      bn_dx_kernel<T, V><<<grid, kThreads, 0, stream>>>(g, static_cast<const L*>(x), static_cast<const L*>(dy),
                                                        static_cast<const L*>(y), coef, static_cast<L*>(dx),
                                                        static_cast<L*>(dz));
      CUDA_CHECK_LAUNCH("bn_dx_kernel");
    });
  });
}

}  // namespace cnnscale::cuda
