// Filler parsing ({type: gaussian, std: 0.01}) and host-side parameter initialisation.
#include "layers/filler.hpp"

#include <cmath>

namespace cnnscale {

namespace {
const std::set<std::string> kFillerTypes = {"constant", "gaussian", "uniform", "xavier", "msra"};
const std::set<std::string> kVarianceNorms = {"fan_in", "fan_out", "average"};

std::string joined(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

const std::vector<KeyDoc>& Filler::keys() {
  static const std::vector<KeyDoc> k = {
      {"type", "constant | gaussian | uniform | xavier | msra", "required",
       "the distribution; a filler written as a bare word (`weight_filler: msra`) is this type alone"},
      {"value", "number", "0", "constant: every element's value"},
      {"mean", "number", "0", "gaussian: the mean"},
      {"std", "number >= 0", "0.01", "gaussian: the standard deviation"},
      {"min", "number", "0", "uniform: the lower bound"},
      {"max", "number >= min", "1", "uniform: the upper bound"},
      {"variance_norm", "fan_in | fan_out | average", "fan_in",
       "xavier and msra: n, their variance's divisor (U(-sqrt(3/n), sqrt(3/n)), N(0, sqrt(2/n))), is the "
       "fan-in, the fan-out or their average (Caffe's)"},
  };
  return k;
}

Filler Filler::parse(const ConfigNode& node) {
  Filler f;
  // Shorthand `weight_filler: xavier` for a filler with only a type.
  if (node.is_scalar()) {
    f.type = node.as<std::string>();
    if (!kFillerTypes.count(f.type))
      node.fail(fmt::format("unknown filler type '{}' (known: {})", f.type, joined(kFillerTypes)));
    return f;
  }
  node.check_keys(key_names(keys()));
  f.type = node.get<std::string>("type");
  if (!kFillerTypes.count(f.type))
    node["type"].fail(fmt::format("unknown filler type '{}' (known: {})", f.type, joined(kFillerTypes)));
  f.value = node.get_or<float>("value", f.value);
  f.mean = node.get_or<float>("mean", f.mean);
  f.std = node.get_or<float>("std", f.std);
  f.min = node.get_or<float>("min", f.min);
  f.max = node.get_or<float>("max", f.max);
  f.variance_norm = node.get_or<std::string>("variance_norm", f.variance_norm);
  if (!kVarianceNorms.count(f.variance_norm))
    node["variance_norm"].fail(
        fmt::format("unknown variance_norm '{}' (known: {})", f.variance_norm, joined(kVarianceNorms)));
  if (f.std < 0.0f) node["std"].fail("std must be >= 0");
  if (f.min > f.max) node.fail(fmt::format("uniform filler needs min <= max, got [{}, {}]", f.min, f.max));
  return f;
}

void fill_param(const ParamSpec& spec, std::mt19937_64& rng, float* host_out) {
  const Filler& f = spec.filler;
  const int64_t count = spec.shape.numel();
  double n = static_cast<double>(spec.fan_in);
  if (f.variance_norm == "fan_out") n = static_cast<double>(spec.fan_out);
  if (f.variance_norm == "average") n = (static_cast<double>(spec.fan_in) + static_cast<double>(spec.fan_out)) / 2.0;
  CNNSCALE_CHECK(n > 0, "parameter '{}': fan {} must be positive", spec.name, n);

  if (f.type == "constant") {
    for (int64_t i = 0; i < count; ++i) host_out[i] = f.value;
  } else if (f.type == "gaussian" || f.type == "msra") {
    float stddev = f.type == "msra" ? static_cast<float>(std::sqrt(2.0 / n)) : f.std;
    float mean = f.type == "msra" ? 0.0f : f.mean;
    std::normal_distribution<float> dist(mean, stddev);
    for (int64_t i = 0; i < count; ++i) host_out[i] = stddev > 0.0f ? dist(rng) : mean;
  } else if (f.type == "uniform" || f.type == "xavier") {
    float lo = f.min, hi = f.max;
    if (f.type == "xavier") {
      hi = static_cast<float>(std::sqrt(3.0 / n));
      lo = -hi;
    }
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < count; ++i) host_out[i] = dist(rng);
  } else {
    throw_runtime("parameter '{}': unknown filler type '{}'", spec.name, f.type);
  }
}

}  // namespace cnnscale
