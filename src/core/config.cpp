// ConfigNode implementation: typed access with file:line:col + key-path errors.
#include "core/config.hpp"

#include <fstream>
#include <sstream>

#include "core/text_file.hpp"
#include "core/yaml_unique_keys.hpp"

namespace cnnscale {

namespace {
std::string join_path(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}
}  // namespace

ConfigNode ConfigNode::load_file(const std::string& file) {
  return load_string(read_config_text(file, "configuration file"), file);
}

ConfigNode ConfigNode::load_string(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw_config("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  check_unique_keys(root, name);  // yaml-cpp keeps both pairs and a lookup would see only the first
  return ConfigNode(std::move(root), name, "");
}

std::string ConfigNode::where() const {
  std::string s = file_;
  if (node_.IsDefined()) {
    YAML::Mark m = node_.Mark();
    if (!m.is_null()) s += fmt::format(":{}:{}", m.line + 1, m.column + 1);
  }
  if (!path_.empty()) s += ": " + path_;
  return s;
}

void ConfigNode::fail(const std::string& message) const { throw ConfigError(where() + ": " + message); }

void ConfigNode::require_map() const {
  if (!node_.IsMap()) fail("expected a mapping");
}

ConfigNode ConfigNode::operator[](const std::string& key) const {
  require_map();
  YAML::Node c = node_[key];
  if (!c.IsDefined()) fail(fmt::format("missing required key '{}'", key));
  return ConfigNode(c, file_, join_path(path_, key));
}

std::optional<ConfigNode> ConfigNode::child(const std::string& key) const {
  if (!node_.IsMap()) return std::nullopt;
  YAML::Node c = node_[key];
  if (!c.IsDefined() || c.IsNull()) return std::nullopt;
  return ConfigNode(c, file_, join_path(path_, key));
}

ConfigNode ConfigNode::at(size_t index) const {
  if (!node_.IsSequence()) fail("expected a sequence");
  if (index >= node_.size()) fail(fmt::format("index {} out of range", index));
  return ConfigNode(node_[index], file_, fmt::format("{}[{}]", path_, index));
}

std::vector<ConfigNode> ConfigNode::items() const {
  if (!node_.IsSequence()) fail("expected a sequence");
  std::vector<ConfigNode> out;
  for (size_t i = 0; i < node_.size(); ++i) out.push_back(at(i));
  return out;
}

std::vector<std::string> ConfigNode::keys() const {
  require_map();
  std::vector<std::string> out;
  for (const auto& kv : node_) out.push_back(kv.first.as<std::string>());
  return out;
}

void ConfigNode::check_keys(const std::set<std::string>& allowed) const {
  require_map();
  for (const auto& kv : node_) {
    std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string options;
      for (const auto& a : allowed) options += (options.empty() ? "" : ", ") + a;
      ConfigNode(kv.first, file_, join_path(path_, key))
          .fail(fmt::format("unknown key '{}' (allowed: {})", key, options));
    }
  }
}

template <typename T>
T ConfigNode::as() const {
  if (!node_.IsScalar()) fail("expected a scalar value");
  try {
    return node_.as<T>();
  } catch (const YAML::Exception&) {
    const char* what = std::is_same_v<T, bool> ? "a boolean"
                       : std::is_integral_v<T> ? "an integer"
                       : std::is_floating_point_v<T> ? "a number"
                                                      : "a string";
    fail(fmt::format("expected {}, got '{}'", what, node_.Scalar()));
  }
}

template <typename T>
std::vector<T> ConfigNode::as_list() const {
  std::vector<T> out;
  if (node_.IsSequence()) {
    for (const auto& c : items()) out.push_back(c.as<T>());
  } else {
    out.push_back(as<T>());
  }
  return out;
}

template int ConfigNode::as<int>() const;
template int64_t ConfigNode::as<int64_t>() const;
template float ConfigNode::as<float>() const;
template double ConfigNode::as<double>() const;
template bool ConfigNode::as<bool>() const;
template std::string ConfigNode::as<std::string>() const;
template std::vector<int> ConfigNode::as_list<int>() const;
template std::vector<int64_t> ConfigNode::as_list<int64_t>() const;
template std::vector<float> ConfigNode::as_list<float>() const;
template std::vector<double> ConfigNode::as_list<double>() const;
template std::vector<std::string> ConfigNode::as_list<std::string>() const;

}  // namespace cnnscale
