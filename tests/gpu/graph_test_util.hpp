// What the CUDA graph tests share (test_cuda_graph.cpp, test_trainer_graph.cpp): bit-for-bit
// comparison of host floats and a tensor's raw bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"

namespace cnnscale::graph_test {

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline std::vector<uint8_t> raw_bytes(Backend& b, const Tensor& t) {
  std::vector<uint8_t> v(t.bytes());
  b.download(t, v.data());
  return v;
}

}  // namespace cnnscale::graph_test
