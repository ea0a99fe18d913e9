// Layer registry: type name -> factory, filled explicitly by ensure_layers_registered() so a
// static library link cannot drop a layer.
#include <map>
#include <mutex>

#include "layers/layer.hpp"
#include "layers/layer_list.hpp"

namespace cnnscale {

namespace {
std::map<std::string, LayerFactory>& registry() {
  static std::map<std::string, LayerFactory> r;
  return r;
}
}  // namespace

void register_layer(const std::string& type, LayerFactory factory) { registry()[type] = factory; }

void ensure_layers_registered() {
  static std::once_flag once;
  std::call_once(once, [] { register_all_layers(); });
}

std::vector<std::string> registered_layer_types() {
  ensure_layers_registered();
  std::vector<std::string> out;
  for (const auto& kv : registry()) out.push_back(kv.first);
  return out;
}

std::unique_ptr<Layer> create_layer(LayerConfig cfg) {
  ensure_layers_registered();
  auto it = registry().find(cfg.type);
  if (it == registry().end()) {
    std::string known;
    for (const auto& kv : registry()) known += (known.empty() ? "" : ", ") + kv.first;
    auto type_node = cfg.node.child("type");
    (type_node ? *type_node : cfg.node).fail(fmt::format("unknown layer type '{}' (known: {})", cfg.type, known));
  }
  return it->second(std::move(cfg));
}

LayerCost Layer::cost(const std::vector<Shape>& bottoms, const std::vector<Shape>& tops) const {
  LayerCost c;
  for (const auto& s : bottoms) c.bytes_read += s.sample_numel() * 4;
  for (const auto& s : tops) c.bytes_written += s.sample_numel() * 4;
  int64_t param_elems = 0;
  for (const auto& p : param_specs()) param_elems += p.shape.numel();
  // Parameters are read once per batch; report them per sample at batch 1 (netinfo's convention).
  c.bytes_read += param_elems * 4;
  return c;
}

}  // namespace cnnscale
