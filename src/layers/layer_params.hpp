// Parsing helpers shared by the layer files: two-axis integers (`kernel: 3` or `kernel: [3, 5]`),
// fillers, Caffe-style `param: [{lr_mult, decay_mult}, ...]` lists, and bounded scalars. Every
// error names the file, line and key path of the offending value.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace cnnscale {

struct Extent2 {
  int h = 0, w = 0;
};

// `key: 3` or `key: [3, 5]` (height, width); each value must be >= min_value. Missing key:
// `fallback`, or an error when there is none.
Extent2 parse_extent2(const ConfigNode& layer, const std::string& key, std::optional<Extent2> fallback, int min_value);

// An integer `key` >= min_value, `fallback` when absent.
int parse_int_at_least(const ConfigNode& layer, const std::string& key, int fallback, int min_value);
// A required integer `key` >= min_value.
int parse_required_int_at_least(const ConfigNode& layer, const std::string& key, int min_value);

Filler constant_filler(float value);
Filler parse_filler_or(const ConfigNode& layer, const std::string& key, const Filler& fallback);

// Learning-rate and decay multipliers per parameter, in param_specs() order.
struct ParamMults {
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
};
// The keys of one `param:` entry, which parse_param_mults checks.
const std::vector<KeyDoc>& param_entry_keys();
// `param:` as a list of at most `max_count` maps with keys lr_mult and decay_mult; missing entries
// default to 1. Always returns `max_count` entries.
std::vector<ParamMults> parse_param_mults(const ConfigNode& layer, size_t max_count);

// The learned weights and bias of a Convolution or InnerProduct layer, and the keys that set them
// alike in both: bias, weight_filler, bias_filler, param, relu (a ReLU fused into the layer) and
// int8_input_scale, parsed by parse_weighted_keys and declared by weighted_key_docs.
struct WeightedKeys {
  bool bias = true;
  bool relu = false;
  Filler weight_filler, bias_filler;
  std::vector<ParamMults> mults;  // two: the weights', then the bias's
  double int8_input_scale = 0;    // > 0: an int8 layer at inference, its input quantised with this scale
};
WeightedKeys parse_weighted_keys(const ConfigNode& layer);
// The docs of bias, weight_filler, bias_filler, param and relu, in that order, `weights` naming the
// weights ("filters", "weights"); int8_input_scale's doc is each layer's own (what it quantises how).
std::vector<KeyDoc> weighted_key_docs(const std::string& weights);
// A layer's key docs: its own first keys, shared ones (weighted_key_docs), then its own last keys.
std::vector<KeyDoc> joined_keys(std::vector<KeyDoc> first, const std::vector<KeyDoc>& shared,
                                const std::vector<KeyDoc>& last);

// An output plane of out_h x out_w (from a window's pad, kernel, stride and dilation) must have
// 32-bit extents (core/checked_math.hpp); otherwise fail at `key` (pad, the one value that makes an
// output larger than its input), describing the window as `window`.
void require_output_extents(const ConfigNode& layer, const std::string& key, int64_t out_h, int64_t out_w,
                            const std::string& window);

// "expected (N, C, H, W) input, got (4, 10)"-style check of a bottom's rank, failing at the layer node.
void require_rank(const ConfigNode& layer, const Shape& shape, int rank, const std::string& what);

}  // namespace cnnscale
