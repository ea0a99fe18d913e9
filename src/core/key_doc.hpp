// KeyDoc: one key a configuration mapping accepts, with what a reader needs to write it. Each
// parser declares its keys once as a list of KeyDoc and checks a mapping against key_names() of that
// list, so the keys it accepts and the keys its reference lists (`cnnscale netinfo --layers`,
// docs/network-reference.md) are one list.
#pragma once
#include <set>
#include <string>
#include <vector>

namespace cnnscale {

struct KeyDoc {
  std::string name;
  std::string type;           // what a value looks like: "integer >= 1", "filler", "train | test"
  std::string default_value;  // YAML text of the value taken when absent; "required" or "none"
  std::string meaning;
};

inline std::set<std::string> key_names(const std::vector<KeyDoc>& keys) {
  std::set<std::string> names;
  for (const auto& k : keys) names.insert(k.name);
  return names;
}

}  // namespace cnnscale
