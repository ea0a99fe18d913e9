// The walk behind check_unique_keys: depth first, in document order, with an explicit stack (a
// deeply nested file cannot overflow the call stack) and each collection visited once (aliases
// share one node: `*a` used a thousand times is checked once, not a thousand times).
#include "core/yaml_unique_keys.hpp"

#include <fmt/format.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace cnnscale {

namespace {
std::string at(const std::string& name, const YAML::Mark& m) {
  if (m.is_null()) return name;
  return fmt::format("{}:{}:{}", name, m.line + 1, m.column + 1);
}

// A mapping key as text: scalars as written; a collection key (`? [a, b]`) by its emitted form,
// so that two equal collection keys also count as one key given twice.
std::string key_text(const YAML::Node& key) {
  if (key.IsScalar()) return key.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << key;
  return out.c_str();
}
}  // namespace

void check_unique_keys(const YAML::Node& root, const std::string& name, const std::string& path) {
  struct Item {
    YAML::Node node;
    std::string path;
  };
  std::vector<Item> stack{{root, path}};
  // A collection's start in the text identifies it: two distinct mappings or sequences never start
  // at one offset, while an alias yields the node of its anchor (same offset).
  std::set<size_t> visited;
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    const YAML::Node& node = item.node;
    if (!node.IsMap() && !node.IsSequence()) continue;
    const YAML::Mark mark = node.Mark();
    if (!mark.is_null() && !visited.insert(static_cast<size_t>(mark.pos)).second) continue;
    std::vector<Item> children;
    if (node.IsMap()) {
      std::map<std::string, YAML::Mark> seen;
      for (const auto& kv : node) {
        const std::string key = key_text(kv.first);
        const std::string key_path = item.path.empty() ? key : item.path + "." + key;
        auto [first, fresh] = seen.emplace(key, kv.first.Mark());
        if (!fresh)
          throw_config("{}: {}: duplicate key '{}' (first at {})", at(name, kv.first.Mark()), key_path, key,
                       at(name, first->second));
        children.push_back({kv.second, key_path});
      }
    } else {
      for (size_t i = 0; i < node.size(); ++i) children.push_back({node[i], fmt::format("{}[{}]", item.path, i)});
    }
    // Pushed in reverse so that the first duplicate in document order is the one reported.
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back(std::move(*it));
  }
}

}  // namespace cnnscale
