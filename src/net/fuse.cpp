// Epilogue fusion (fuse.hpp): the fused network's spec, as YAML text read back by the
// same loader as every network file.
#include "net/fuse.hpp"

#include <map>
#include <optional>
#include <set>

#include "net/net_spec_impl.hpp"

namespace cnnscale {

namespace {

// The one layer reading blob `top`, if exactly one does and it runs in `phase` and is of `type`.
std::optional<size_t> only_reader(const std::vector<SpecLayer>& layers, const BlobUse& use, const std::string& top,
                                  const std::optional<Phase>& phase, const char* type) {
  const std::optional<size_t> j = use.only_reader(top);
  if (!j || layers[*j].config.type != type || layers[*j].phase != phase || layers[*j].config.tops.size() != 1)
    return std::nullopt;
  return j;
}

bool plain_sum(const SpecLayer& eltwise) {
  const YAML::Node node = eltwise.config.node.yaml();
  if (eltwise.config.bottoms.size() != 2) return false;
  if (node["operation"] && node["operation"].as<std::string>() != "sum") return false;
  if (node["coeff"])
    for (const auto& c : node["coeff"])
      if (c.as<float>() != 1.0f) return false;
  return true;
}

struct Fusion {
  size_t bn;
  std::vector<size_t> absorbed;  // in network order
  std::string addend;            // "" for BN + ReLU
  std::string top;
};

std::optional<Fusion> fusion_of(const std::vector<SpecLayer>& layers, const BlobUse& use, size_t i) {
  const SpecLayer& bn = layers[i];  // the BatchNorm, a Convolution, or an InnerProduct (ReLU only)
  const std::string& type = bn.config.type;
  if ((type != "BatchNorm" && type != "Convolution" && type != "InnerProduct") || bn.config.bottoms.size() != 1 ||
      bn.config.tops.size() != 1)
    return std::nullopt;
  const YAML::Node node = bn.config.node.yaml();
  if (const YAML::Node relu = node["relu"]; relu && relu.as<bool>()) return std::nullopt;
  // A convolution takes a residual addend only with a bias (ConvolutionLayer adds both in one op).
  const bool relu_only = type == "InnerProduct" || (type == "Convolution" && node["bias"] && !node["bias"].as<bool>());
  const std::string& top = bn.config.tops[0];
  if (auto relu = only_reader(layers, use, top, bn.phase, "ReLU"))
    return Fusion{i, {*relu}, "", layers[*relu].config.tops[0]};
  if (relu_only) return std::nullopt;
  auto sum = only_reader(layers, use, top, bn.phase, "Eltwise");
  if (!sum || !plain_sum(layers[*sum])) return std::nullopt;
  const auto& sb = layers[*sum].config.bottoms;
  if (sb[0] == sb[1]) return std::nullopt;  // bn + bn: no addend
  auto relu = only_reader(layers, use, layers[*sum].config.tops[0], bn.phase, "ReLU");
  if (!relu) return std::nullopt;
  return Fusion{i, {*sum, *relu}, sb[0] == top ? sb[1] : sb[0], layers[*relu].config.tops[0]};
}

}  // namespace

FusedSpec fuse_epilogues(const NetSpec& spec) {
  const auto& layers = spec.impl().layers;
  const BlobUse use = blob_use(layers);
  std::map<size_t, Fusion> at;  // position in the fused network -> the fusion emitted there
  std::set<size_t> gone;        // the BatchNorms and absorbed layers, emitted at `at` instead
  for (size_t i = 0; i < layers.size(); ++i) {
    std::optional<Fusion> f = fusion_of(layers, use, i);
    if (!f || gone.count(i)) continue;
    bool free = true;  // each layer is absorbed at most once
    for (size_t j : f->absorbed) free = free && !gone.count(j) && !at.count(j);
    if (!free) continue;
    gone.insert(i);
    for (size_t j : f->absorbed) gone.insert(j);
    // The BatchNorm's own place, unless its addend is computed later (a projection shortcut
    // listed after the block's second BatchNorm): then the sum's place, after the addend.
    auto producer = use.producer.find(f->addend);
    const bool addend_later = !f->addend.empty() && producer != use.producer.end() && producer->second > i;
    at.emplace(addend_later ? f->absorbed.back() : i, *f);
  }
  std::vector<YAML::Node> nodes;
  std::vector<FusedEpilogue> fused;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (auto f = at.find(i); f != at.end()) {
      const Fusion& fu = f->second;
      YAML::Node node = YAML::Clone(layers[fu.bn].config.node.yaml());
      if (fu.addend.empty()) {
        node["bottom"] = layers[fu.bn].config.bottoms[0];
      } else {
        YAML::Node bottoms(YAML::NodeType::Sequence);
        bottoms.push_back(layers[fu.bn].config.bottoms[0]);
        bottoms.push_back(fu.addend);
        node["bottom"] = bottoms;
      }
      node["top"] = fu.top;
      node["relu"] = true;
      nodes.push_back(node);
      FusedEpilogue e{layers[fu.bn].config.name, {}};
      for (size_t j : fu.absorbed) e.absorbed.push_back(layers[j].config.name);
      fused.push_back(std::move(e));
      continue;
    }
    if (gone.count(i)) continue;
    nodes.push_back(YAML::Clone(layers[i].config.node.yaml()));
  }
  const std::string label = fmt::format("{} (epilogues fused)", spec.file());
  return FusedSpec{NetSpec::load_string(rewritten_net_yaml(spec, fmt::format("{} from {}, {} epilogue(s) "
                                                                             "fused",
                                                                             spec.name(), spec.file(), fused.size()),
                                                           nodes),
                                        label),
                   std::move(fused)};
}

}  // namespace cnnscale
