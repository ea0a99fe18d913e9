// Layer registry: YAML type name -> factory and doc (keys), filled before main by each layer file's
// CNNSCALE_REGISTER_LAYER; and the default per-sample cost estimate every layer starts from.
#include <cstdio>
#include <cstdlib>
#include <map>

#include "layers/layer.hpp"

namespace cnnscale {

namespace {
struct RegisteredLayer {
  LayerFactory factory;
  LayerTypeDoc doc;
};

std::map<std::string, RegisteredLayer>& registry() {
  static std::map<std::string, RegisteredLayer> r;  // constructed on first use: safe during static init
  return r;
}
}  // namespace

void register_layer(const std::string& type, LayerFactory factory, LayerTypeDoc doc) {
  if (!registry().emplace(type, RegisteredLayer{factory, std::move(doc)}).second)
    throw_runtime("layer type '{}' is registered twice", type);
}

LayerRegistrar::LayerRegistrar(const char* type, LayerFactory factory, LayerTypeDoc (*doc)()) {
  try {
    register_layer(type, factory, doc());
  } catch (const Error& e) {
    std::fprintf(stderr, "cnnscale: error: %s\n", e.what());
    std::abort();
  }
}

std::vector<std::string> registered_layer_types() {
  std::vector<std::string> out;
  for (const auto& kv : registry()) out.push_back(kv.first);
  return out;
}

std::unique_ptr<Layer> create_layer(LayerConfig cfg) {
  auto it = registry().find(cfg.type);
  if (it == registry().end()) {
    std::string known;
    for (const auto& kv : registry()) known += (known.empty() ? "" : ", ") + kv.first;
    auto type_node = cfg.node.child("type");
    (type_node ? *type_node : cfg.node).fail(fmt::format("unknown layer type '{}' (known: {})", cfg.type, known));
  }
  return it->second.factory(std::move(cfg));
}

const LayerTypeDoc& layer_type_doc(const std::string& type) {
  auto it = registry().find(type);
  if (it == registry().end()) throw_runtime("layer type '{}' is not registered", type);
  return it->second.doc;
}

std::pair<int, int> Layer::bottom_count() const { return layer_type_doc(cfg_.type).bottoms; }
std::pair<int, int> Layer::top_count() const { return layer_type_doc(cfg_.type).tops; }

LayerCost Layer::cost(const std::vector<Shape>& bottoms, const std::vector<Shape>& tops) const {
  LayerCost c;
  const int64_t activation_bytes = dtype_size(cfg_.activation_dtype);
  for (const auto& s : bottoms) c.bytes_read += s.sample_numel() * activation_bytes;
  for (const auto& s : tops) c.bytes_written += s.sample_numel() * activation_bytes;
  // Parameters are read once per batch; report them per sample at batch 1 (netinfo's convention).
  for (const auto& p : param_specs()) c.bytes_read += p.shape.numel() * dtype_size(p.dtype);
  return c;
}

}  // namespace cnnscale
