// Command-line overrides of experiment files: "a.b.c=<YAML value>" sets that key in the loaded tree
// (creating maps on the way) before validation, so an override is checked exactly like the file.
#include "experiment/experiment_reader.hpp"

#include <fmt/format.h>

#include <cmath>
#include <regex>

#include "core/yaml_unique_keys.hpp"

namespace cnnscale {

Override parse_override(const std::string& text) {
  static const std::regex form(R"(^([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)=(.*)$)");
  std::smatch m;
  if (!std::regex_match(text, m, form))
    throw_config("override '{}': expected key=value with a dotted key path (e.g. solver.lr=0.01)", text);
  return Override{text, m[1].str(), m[3].str()};
}

ExperimentReader::ExperimentReader(ConfigNode root, const std::vector<std::string>& overrides)
    : root_(std::move(root)) {
  YAML::Node tree = root_.yaml();
  if (!overrides.empty() && !tree.IsMap()) root_.fail("expected a mapping");
  for (const auto& text : overrides) {
    Override o = parse_override(text);
    YAML::Node value;
    try {
      value = YAML::Load(o.value);
    } catch (const YAML::Exception& e) {
      throw_config("command line '{}':{}:{}: YAML syntax error: {}", text, e.mark.line + 1, e.mark.column + 1, e.msg);
    }
    check_unique_keys(value, fmt::format("command line '{}'", text), o.path);  // solver={lr: 1, lr: 2}
    // Walk with reset(): assigning a YAML::Node to another would overwrite the referenced node.
    YAML::Node at;
    at.reset(tree);
    std::string path;
    size_t start = 0;
    while (true) {
      size_t dot = o.path.find('.', start);
      std::string key = o.path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      path += (path.empty() ? "" : ".") + key;
      if (dot == std::string::npos) {
        at[key] = value;
        break;
      }
      if (!at[key].IsMap()) {
        if (at[key].IsDefined() && !at[key].IsNull())
          throw_config("command line '{}': {}: is not a mapping, cannot set '{}' inside it", text, path, o.path);
        at[key] = YAML::Node(YAML::NodeType::Map);
      }
      YAML::Node next = at[key];
      at.reset(next);
      start = dot + 1;
    }
    overridden_[o.path] = text;
  }
}

const std::string* ExperimentReader::override_of(const std::string& p) const {
  // The longest overridden prefix of the node's path owns it (sequence indices count as inside).
  const std::string* owner = nullptr;
  size_t owner_length = 0;
  for (const auto& [path, text] : overridden_) {
    bool inside = p == path || (p.rfind(path, 0) == 0 && (p[path.size()] == '.' || p[path.size()] == '['));
    if (inside && path.size() >= owner_length) {
      owner = &text;
      owner_length = path.size();
    }
  }
  return owner;
}

ConfigNode ExperimentReader::relocate(const ConfigNode& node) const {
  const std::string* owner = override_of(node.path());
  return owner ? ConfigNode(node.yaml(), "command line '" + *owner + "'", node.path()) : node;
}

bool ExperimentReader::overridden(const ConfigNode& node) const {
  return override_of(node.path()) != nullptr;
}

std::optional<ConfigNode> ExperimentReader::child(const ConfigNode& parent, const std::string& key) const {
  auto c = parent.child(key);
  if (!c) return c;
  return relocate(*c);
}

ConfigNode ExperimentReader::get(const ConfigNode& parent, const std::string& key) const {
  return relocate(parent[key]);
}

void ExperimentReader::check_keys(const ConfigNode& node, const std::set<std::string>& allowed) const {
  node.require_map();
  for (const auto& kv : node.yaml()) {
    std::string key = kv.first.as<std::string>();
    if (allowed.count(key)) continue;
    std::string options;
    for (const auto& a : allowed) options += (options.empty() ? "" : ", ") + a;
    std::string path = node.path().empty() ? key : node.path() + "." + key;
    relocate(ConfigNode(kv.first, node.file(), path)).fail(fmt::format("unknown key '{}' (allowed: {})", key, options));
  }
}

std::string one_of(const ConfigNode& n, const std::set<std::string>& allowed) {
  std::string v = n.as<std::string>();
  if (!allowed.count(v)) {
    std::string list;
    for (const auto& a : allowed) list.append(list.empty() ? "" : ", ").append(a);
    n.fail(fmt::format("expected one of {}, got '{}'", list, v));
  }
  return v;
}

int64_t int_in(const ConfigNode& n, int64_t lo, int64_t hi) {
  int64_t v = n.as<int64_t>();
  if (v < lo || v > hi) n.fail(fmt::format("must be in [{}, {}], got {}", lo, hi, v));
  return v;
}

double number_in(const ConfigNode& n, double lo, double hi, bool lo_open) {
  double v = n.as<double>();
  if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
    n.fail(fmt::format("must be in {}{}, {}], got {}", lo_open ? "(" : "[", lo, hi, v));
  return v;
}

std::vector<ConfigNode> list_items(const ConfigNode& n) {
  if (n.is_sequence()) {
    if (n.size() == 0) n.fail("must not be empty");
    return n.items();
  }
  if (n.is_map()) n.fail("expected a value or a list of values");
  return {n};
}

}  // namespace cnnscale
