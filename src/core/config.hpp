// ConfigNode: a YAML node that knows its file and key path, so every error can say
// "networks/x.yaml:12:7: layers[3].kernel: expected an integer, got 'abc'".
// Used by the network builder, every layer's parameter parsing and (later) experiment files.
#pragma once
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/error.hpp"

namespace cnnscale {

class ConfigNode {
 public:
  ConfigNode() = default;
  ConfigNode(YAML::Node node, std::string file, std::string path)
      : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}

  // Parse a file or a string; syntax errors become ConfigError with file:line:col.
  static ConfigNode load_file(const std::string& file);
  static ConfigNode load_string(const std::string& text, const std::string& name);

  const YAML::Node& yaml() const { return node_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  // "file:line:col: path" for error messages (line/column 1-based when the node has a mark).
  std::string where() const;
  [[noreturn]] void fail(const std::string& message) const;

  bool is_map() const { return node_.IsMap(); }
  bool is_sequence() const { return node_.IsSequence(); }
  bool is_scalar() const { return node_.IsScalar(); }
  bool has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined(); }
  size_t size() const { return node_.size(); }

  ConfigNode operator[](const std::string& key) const;  // fails if missing
  ConfigNode at(size_t index) const;                     // sequence element
  std::optional<ConfigNode> child(const std::string& key) const;
  std::vector<ConfigNode> items() const;                 // sequence elements
  std::vector<std::string> keys() const;                 // map keys, in file order

  // Every key must be one of `allowed`; otherwise "unknown key 'x'" naming its path.
  void check_keys(const std::set<std::string>& allowed) const;
  void require_map() const;

  template <typename T>
  T as() const;
  template <typename T>
  T get(const std::string& key) const { return (*this)[key].as<T>(); }
  template <typename T>
  T get_or(const std::string& key, const T& fallback) const {
    auto c = child(key);
    return c ? c->as<T>() : fallback;
  }
  // A scalar or a sequence of scalars, as a vector (kernel: 3 or kernel: [3, 5]).
  template <typename T>
  std::vector<T> as_list() const;

 private:
  YAML::Node node_;
  std::string file_;
  std::string path_;
};

}  // namespace cnnscale
