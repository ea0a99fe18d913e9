// ExperimentReader: the experiment's YAML tree with command-line overrides (key=value) applied, and
// ConfigNode access that locates an overridden value in its command-line text instead of the file
// ("command line 'solver.lr=-1':1:1: solver.lr: ..."), so every error still says where it came from.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "experiment/experiment.hpp"

namespace cnnscale {

class ExperimentReader {
 public:
  ExperimentReader(ConfigNode root, const std::vector<std::string>& overrides);

  const ConfigNode& root() const { return root_; }
  std::optional<ConfigNode> child(const ConfigNode& parent, const std::string& key) const;
  ConfigNode get(const ConfigNode& parent, const std::string& key) const;  // fails when missing
  // Like ConfigNode::check_keys, but an unknown key that came from an override names the override.
  void check_keys(const ConfigNode& node, const std::set<std::string>& allowed) const;
  // Whether `node` (or a key above it) was set by a command-line override, whose relative paths
  // mean the current directory rather than the experiment file's.
  bool overridden(const ConfigNode& node) const;

 private:
  ConfigNode relocate(const ConfigNode& node) const;
  const std::string* override_of(const std::string& path) const;
  ConfigNode root_;
  std::map<std::string, std::string> overridden_;  // key path -> the override's text
};

}  // namespace cnnscale
