// NetSpec's internals, shared by net_spec.cpp (which fills them) and net.cpp (which builds a Net
// from them). Not part of the public API.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "net/net.hpp"

namespace cnnscale {

struct SpecLayer {
  LayerConfig config;          // name, type, bottoms, tops, node (expanded), layer_index
  std::optional<Phase> phase;  // nullopt: runs in both phases
  float loss_weight = 1.0f;    // loss layers only: weight of its top in Net::loss()
  std::string origin;          // block instance it came from ("" for top-level layers)
};

struct NetSpec::Impl {
  std::string name;
  std::string file;
  std::vector<int64_t> input_shape;  // (C, H, W)
  int64_t classes = 0;
  std::vector<SpecLayer> layers;
  std::vector<LayerInfo> infos;  // one per layer, same order
  std::string resolved_yaml;
};

// Whether a layer configured for `layer_phase` runs in `phase`.
inline bool runs_in(const std::optional<Phase>& layer_phase, Phase phase) {
  return !layer_phase || *layer_phase == phase;
}

}  // namespace cnnscale
