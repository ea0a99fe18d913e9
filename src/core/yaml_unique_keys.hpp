// Duplicate keys in YAML mappings: yaml-cpp keeps both pairs of `a: 1` / `a: 2` and a lookup
// returns the first, so a repeated key in a network or experiment file would be silently ignored.
// Every YAML text the tool reads is checked with this right after it is parsed.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>

namespace cnnscale {

// ConfigError "<name>:L:C: <key path>: duplicate key 'k' (first at <name>:L:C)" for the first
// mapping (in document order) that holds one key twice, at any depth; `path` is the root's own key
// path (an override's value sits at its key, e.g. "solver").
void check_unique_keys(const YAML::Node& root, const std::string& name, const std::string& path = "");

}  // namespace cnnscale
