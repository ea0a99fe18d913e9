// NetSpec's internals, shared by net_spec.cpp (which fills them) and net.cpp (which builds a Net
// from them). Not part of the public API.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

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
  int64_t values_per_sample = 0;  // the input, the label and every top, at batch 1 (at most 2^40)
};

// ConfigError naming the batch where `batch` samples of the net's activations pass the one-tensor
// bound (core/checked_math.hpp): such a net cannot be allocated, so it is refused before trying.
void check_batch_fits(const NetSpec::Impl& spec, int64_t batch);

// Whether a layer configured for `layer_phase` runs in `phase`.
inline bool runs_in(const std::optional<Phase>& layer_phase, Phase phase) {
  return !layer_phase || *layer_phase == phase;
}

// The index of the layer that produces each blob, and the layer of each bottom that reads it (a
// layer reading a blob twice is listed twice). NetSpec admits no in-place layers (each blob has one
// producer), so these say exactly who computes a blob and who sees it (the network rewrites,
// fold.cpp and fuse.cpp, rely on that).
struct BlobUse {
  std::map<std::string, size_t> producer;
  std::map<std::string, std::vector<size_t>> readers;
  // The layer reading `blob` when exactly one bottom reads it.
  std::optional<size_t> only_reader(const std::string& blob) const {
    auto r = readers.find(blob);
    if (r == readers.end() || r->second.size() != 1) return std::nullopt;
    return r->second.front();
  }
};

inline BlobUse blob_use(const std::vector<SpecLayer>& layers) {
  BlobUse use;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const auto& b : layers[i].config.bottoms) use.readers[b].push_back(i);
    for (const auto& t : layers[i].config.tops) use.producer.emplace(t, i);
  }
  return use;
}

// A rewritten network as YAML text that NetSpec::load_string reads back: `from`'s name and input
// (after command-line overrides), then `layers` (plain layer mappings, blocks already expanded).
std::string rewritten_net_yaml(const NetSpec& from, const std::string& comment,
                               const std::vector<YAML::Node>& layers);

}  // namespace cnnscale
