// The int8 form of a network (int8_spec.hpp), as YAML text read back by the network loader.
#include "net/int8_spec.hpp"

#include <optional>

#include "core/error.hpp"
#include "net/net_spec_impl.hpp"

namespace cnnscale {

namespace {

// Channels of a per-sample shape (C, H, W) or (1, C, H, W), as NetSpec's layer infos carry them.
int64_t channels(const Shape& s) {
  return s.rank() == 4 ? s[1] : s.rank() == 3 ? s[0] : s.numel();
}

}  // namespace

Int8Spec with_int8_scales(const NetSpec& spec, const std::map<std::string, double>& input_scales,
                          bool int8_activations) {
  const auto& layers = spec.impl().layers;
  const std::vector<LayerInfo>& infos = spec.layers();
  CNNSCALE_CHECK(infos.size() == layers.size(), "{} layer infos for {} layers", infos.size(), layers.size());
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < layers.size(); ++i) by_name[layers[i].config.name] = i;
  for (const auto& [name, scale] : input_scales) {
    auto it = by_name.find(name);
    const std::string type = it == by_name.end() ? std::string() : layers[it->second].config.type;
    if (type != "Convolution" && type != "InnerProduct")
      throw_config("int8 scales name '{}', which is no convolution or fully connected layer of {}", name, spec.name());
    if (!(scale > 0)) throw_config("int8 scale of '{}' is {}: scales are positive", name, scale);
  }
  std::vector<YAML::Node> nodes;
  for (const SpecLayer& l : layers) nodes.push_back(YAML::Clone(l.config.node.yaml()));

  // Which layers run in int8, with their input scales.
  std::vector<std::optional<double>> scale_of(layers.size());
  std::vector<std::string> int8, kept, outputs;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string& type = layers[i].config.type;
    if (type != "Convolution" && type != "InnerProduct") continue;
    auto it = input_scales.find(layers[i].config.name);
    const YAML::Node& node = nodes[i];
    const bool grouped = type == "Convolution" && node["group"] && node["group"].as<int>() != 1;
    const bool narrow = type == "Convolution" && !infos[i].bottom_shapes.empty() &&
                        channels(infos[i].bottom_shapes[0]) < kInt8MinInputChannels;
    if (it == input_scales.end() || grouped || narrow) {
      kept.push_back(layers[i].config.name);
      continue;
    }
    nodes[i]["int8_input_scale"] = it->second;
    scale_of[i] = it->second;
    int8.push_back(layers[i].config.name);
  }

  // Which int8 convolutions store their output as int8: every reader of it is an int8 convolution
  // (input or addend), the input readers share one scale (a table made from one histogram per
  // tensor gives them one), at least one reads it as input (an addend alone has no scale), the
  // output follows a ReLU and has a multiple of 16 channels (no padding for the readers' engines).
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> readers;  // blob -> (layer, bottom)
  std::map<std::string, int> writers;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (size_t b = 0; b < layers[i].config.bottoms.size(); ++b) readers[layers[i].config.bottoms[b]].push_back({i, b});
    for (const std::string& t : layers[i].config.tops) ++writers[t];
  }
  for (size_t i = 0; i < layers.size() && int8_activations; ++i) {
    if (!scale_of[i] || layers[i].config.type != "Convolution") continue;
    const YAML::Node& node = nodes[i];
    if (!(node["relu"] && node["relu"].as<bool>())) continue;
    if (layers[i].config.tops.size() != 1 || infos[i].top_shapes.empty()) continue;
    const std::string& top = layers[i].config.tops[0];
    if (writers[top] != 1 || channels(infos[i].top_shapes[0]) % 16 != 0) continue;
    std::optional<double> shared;
    bool ok = !readers[top].empty();
    for (const auto& [r, b] : readers[top]) {
      if (!scale_of[r] || layers[r].config.type != "Convolution") ok = false;
      if (!ok) break;
      if (b == 0) {
        if (shared && *shared != *scale_of[r]) ok = false;
        shared = scale_of[r];
      }
    }
    if (!ok || !shared) continue;
    nodes[i]["int8_output_scale"] = *shared;
    for (const auto& [r, b] : readers[top])
      if (b == 1) nodes[r]["int8_addend_scale"] = *shared;
    outputs.push_back(layers[i].config.name);
  }

  const std::string comment = fmt::format("{} from {}, {} layer(s) in int8, {} with int8 outputs", spec.name(),
                                          spec.file(), int8.size(), outputs.size());
  return Int8Spec{NetSpec::load_string(rewritten_net_yaml(spec, comment, nodes), fmt::format("{} (int8)", spec.file())),
                  std::move(int8), std::move(kept), std::move(outputs)};
}

bool int8_activations_run(const Backend& backend, DType compute) {
  return backend.device().is_cpu() || backend.activation_layout_for(compute) == Layout::NHWC;
}

}  // namespace cnnscale
