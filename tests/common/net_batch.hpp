// A random training batch for a whole-network test: inputs from N(mean, 1) and labels uniform over
// the classes, drawn in that order from one mt19937_64(seed), uploaded, and waited for.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "net/net.hpp"

namespace cnnscale::testing {

inline void feed_random_batch(Net& net, int64_t classes, uint64_t seed, float mean = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> value(mean, 1.0f);
  std::vector<float> data(static_cast<size_t>(net.input().numel()));
  for (auto& v : data) v = value(rng);
  std::vector<int32_t> labels(static_cast<size_t>(net.labels().numel()));
  for (auto& l : labels) l = static_cast<int32_t>(rng() % static_cast<uint64_t>(classes));
  net.backend().upload(data.data(), net.input());
  net.backend().upload(labels.data(), net.labels());
  net.backend().synchronize();  // the host vectors die here
}

}  // namespace cnnscale::testing
