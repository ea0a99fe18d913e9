// Parameter initialisation on the host: the net fills each parameter with fill_param from one
// seeded std::mt19937_64 (in network order) and uploads, so CPU and GPU runs start identically.
#pragma once
#include <random>

#include "layers/layer.hpp"

namespace cnnscale {

// Writes spec.shape.numel() values to host_out according to spec.filler:
//   constant: value; gaussian: N(mean, std); uniform: U(min, max);
//   xavier: U(-sqrt(3 / n), sqrt(3 / n)); msra: N(0, sqrt(2 / n)), as Caffe's fillers, with
//   n = fan_in, fan_out or their average by variance_norm.
void fill_param(const ParamSpec& spec, std::mt19937_64& rng, float* host_out);

}  // namespace cnnscale
