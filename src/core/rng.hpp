// Random numbers. Init and shuffling use a seeded std::mt19937_64 whose state is checkpointed.
// Dropout masks use a counter-based hash (seed, stream, element index) so that the CPU and CUDA
// backends draw the same mask and a resumed run draws the same masks as an uninterrupted one.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define CNNSCALE_HD __host__ __device__
#else
#define CNNSCALE_HD
#endif

namespace cnnscale {

// SplitMix64 finaliser: a strong 64-bit mix, cheap on both CPU and GPU.
CNNSCALE_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) for element `index` of draw `stream` under `seed`.
CNNSCALE_HD inline float counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = mix64(seed ^ mix64(stream ^ mix64(index)));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // 24 random bits
}

// The draw of one dropout layer in one iteration: distinct for every (iteration, layer) pair with
// fewer than 2^20 layers and 2^44 iterations; counter_uniform hashes it, so neighbouring streams are
// uncorrelated.
CNNSCALE_HD inline uint64_t dropout_stream(uint64_t iteration, uint64_t layer) {
  return (iteration << 20) | (layer & 0xFFFFFull);
}

}  // namespace cnnscale
