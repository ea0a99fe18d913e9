// Element types of the backend's own kernels: f32, bf16 and f16 storage, always computed in float.
// to_float/from_float convert one element (from_float rounds to nearest even), and dispatch_float
// runs a templated launcher for the storage type a tensor has. The conversions are host and device
// code: launchers convert fill values on the host.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_kernels.hpp"
#include "core/dtype.hpp"

namespace cnnscale::cuda {

__host__ __device__ __forceinline__ float to_float(float v) { return v; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__host__ __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__host__ __device__ __forceinline__ T from_float(float v);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__host__ __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// 16 bytes of one storage type, moved by one vector load or store (ld/st.global.v4): element-wise
// kernels over large activations need that many bytes in flight per thread to approach HBM
// bandwidth; 2-byte accesses to bf16/f16 tensors reached about half of it
// (docs/measurements/2026-11-25-cuda-kernel-choices.md).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kCount = 16 / static_cast<int>(sizeof(T));
  T v[kCount];
};

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f(T{}) with T the storage of `t`; anything but f32/bf16/f16 is an error naming `op`.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F16: f(__half{}); return;
    default: throw_no_kernel(op, t);
  }
}

}  // namespace cnnscale::cuda
