// Parsing helpers shared by the layer files (see layer_params.hpp).
#include "layers/layer_params.hpp"

#include "core/checked_math.hpp"

namespace cnnscale {

Extent2 parse_extent2(const ConfigNode& layer, const std::string& key, std::optional<Extent2> fallback, int min_value) {
  auto node = layer.child(key);
  if (!node) {
    if (!fallback) layer[key];  // fails with "missing required key"
    return *fallback;
  }
  std::vector<int> values = node->as_list<int>();
  if (values.size() != 1 && values.size() != 2)
    node->fail(fmt::format("expected an integer or [height, width], got {} values", values.size()));
  Extent2 e{values[0], values.size() == 2 ? values[1] : values[0]};
  if (e.h < min_value || e.w < min_value) node->fail(fmt::format("must be >= {}, got [{}, {}]", min_value, e.h, e.w));
  return e;
}

int parse_int_at_least(const ConfigNode& layer, const std::string& key, int fallback, int min_value) {
  auto node = layer.child(key);
  if (!node) return fallback;
  int v = node->as<int>();
  if (v < min_value) node->fail(fmt::format("must be >= {}, got {}", min_value, v));
  return v;
}

int parse_required_int_at_least(const ConfigNode& layer, const std::string& key, int min_value) {
  ConfigNode node = layer[key];
  int v = node.as<int>();
  if (v < min_value) node.fail(fmt::format("must be >= {}, got {}", min_value, v));
  return v;
}

Filler constant_filler(float value) {
  Filler f;
  f.type = "constant";
  f.value = value;
  return f;
}

Filler parse_filler_or(const ConfigNode& layer, const std::string& key, const Filler& fallback) {
  auto node = layer.child(key);
  return node ? Filler::parse(*node) : fallback;
}

const std::vector<KeyDoc>& param_entry_keys() {
  static const std::vector<KeyDoc> k = {
      {"lr_mult", "number >= 0", "1", "this parameter's learning rate is the solver's times lr_mult (0 freezes it)"},
      {"decay_mult", "number >= 0", "1", "this parameter's weight decay is the solver's times decay_mult"},
  };
  return k;
}

std::vector<ParamMults> parse_param_mults(const ConfigNode& layer, size_t max_count) {
  std::vector<ParamMults> out(max_count);
  auto node = layer.child("param");
  if (!node) return out;
  std::vector<ConfigNode> items = node->items();
  if (items.size() > max_count)
    node->fail(fmt::format("this layer has {} parameter(s), got {} entries", max_count, items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].check_keys(key_names(param_entry_keys()));
    out[i].lr_mult = items[i].get_or<float>("lr_mult", 1.0f);
    out[i].decay_mult = items[i].get_or<float>("decay_mult", 1.0f);
    if (out[i].lr_mult < 0.0f) items[i]["lr_mult"].fail("must be >= 0");
    if (out[i].decay_mult < 0.0f) items[i]["decay_mult"].fail("must be >= 0");
  }
  return out;
}

WeightedKeys parse_weighted_keys(const ConfigNode& layer) {
  WeightedKeys w;
  w.bias = layer.get_or<bool>("bias", true);
  w.relu = layer.get_or<bool>("relu", false);
  w.int8_input_scale = layer.get_or<double>("int8_input_scale", 0.0);
  if (layer.has("int8_input_scale") && !(w.int8_input_scale > 0))
    layer["int8_input_scale"].fail(fmt::format("an input scale is positive, got {}", w.int8_input_scale));
  // Caffe's default weight filler is constant 0, which cannot train; xavier is the common choice.
  Filler xavier;
  xavier.type = "xavier";
  w.weight_filler = parse_filler_or(layer, "weight_filler", xavier);
  w.bias_filler = parse_filler_or(layer, "bias_filler", constant_filler(0.0f));
  w.mults = parse_param_mults(layer, w.bias ? 2 : 1);
  w.mults.resize(2);
  return w;
}

std::vector<KeyDoc> weighted_key_docs(const std::string& weights) {
  return {{"bias", "boolean", "true", "whether the layer has a bias (Caffe's bias_term)"},
          {"weight_filler", "filler", "xavier",
           "the " + weights + "' initialisation (Caffe's default, constant 0, cannot train)"},
          {"bias_filler", "filler", "{type: constant, value: 0}", "the bias's initialisation"},
          {"param", "list of up to 2 {lr_mult, decay_mult}", "all 1",
           "the " + weights + "' then the bias's learning-rate and weight-decay multipliers"},
          {"relu", "boolean", "false",
           "y = max(0, y) in the same layer (written by the training rewrite for a ReLU that alone reads y)"}};
}

std::vector<KeyDoc> joined_keys(std::vector<KeyDoc> first, const std::vector<KeyDoc>& shared,
                                const std::vector<KeyDoc>& last) {
  first.insert(first.end(), shared.begin(), shared.end());
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

void require_output_extents(const ConfigNode& layer, const std::string& key, int64_t out_h, int64_t out_w,
                            const std::string& window) {
  if (out_h <= kMaxExtent && out_w <= kMaxExtent) return;
  (layer.has(key) ? layer[key] : layer)
      .fail(fmt::format("{} gives an output of {}x{}, more than {} a side", window, out_h, out_w, kMaxExtent));
}

void require_rank(const ConfigNode& layer, const Shape& shape, int rank, const std::string& what) {
  if (shape.rank() != rank)
    layer.fail(fmt::format("expected {} input of rank {}, got {}", what, rank, shape.to_string()));
}

}  // namespace cnnscale
