// The int8 form of a network (int8_spec.hpp), as YAML text read back by the network loader.
#include "net/int8_spec.hpp"

#include "core/error.hpp"
#include "net/net_spec_impl.hpp"

namespace cnnscale {

Int8Spec with_int8_scales(const NetSpec& spec, const std::map<std::string, double>& input_scales) {
  const auto& layers = spec.impl().layers;
  std::map<std::string, const SpecLayer*> by_name;
  for (const SpecLayer& l : layers) by_name[l.config.name] = &l;
  for (const auto& [name, scale] : input_scales) {
    auto it = by_name.find(name);
    if (it == by_name.end() || (it->second->config.type != "Convolution" && it->second->config.type != "InnerProduct"))
      throw_config("int8 scales name '{}', which is no convolution or fully connected layer of {}", name, spec.name());
    if (!(scale > 0)) throw_config("int8 scale of '{}' is {}: scales are positive", name, scale);
  }
  std::vector<std::string> int8, kept;
  std::vector<YAML::Node> nodes;
  for (const SpecLayer& l : layers) {
    YAML::Node node = YAML::Clone(l.config.node.yaml());
    const bool quantisable = l.config.type == "Convolution" && (!node["group"] || node["group"].as<int>() == 1);
    auto it = input_scales.find(l.config.name);
    if (quantisable && it != input_scales.end()) {
      node["int8_input_scale"] = it->second;
      int8.push_back(l.config.name);
    } else if (l.config.type == "Convolution" || l.config.type == "InnerProduct") {
      kept.push_back(l.config.name);
    }
    nodes.push_back(node);
  }
  const std::string comment =
      fmt::format("{} from {}, {} convolution(s) in int8", spec.name(), spec.file(), int8.size());
  return Int8Spec{NetSpec::load_string(rewritten_net_yaml(spec, comment, nodes), fmt::format("{} (int8)", spec.file())),
                  std::move(int8), std::move(kept)};
}

}  // namespace cnnscale
