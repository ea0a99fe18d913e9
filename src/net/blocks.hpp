// Expansion of a network file's `layers:` list into plain layer mappings: `${...}` variables are
// substituted and `repeat:` items instantiate named `blocks:` with prefixed layer and blob names.
// Every expanded mapping still points at its line in the file, so later errors stay precise.
#pragma once
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/key_doc.hpp"
#include "net/variables.hpp"

namespace cnnscale::net {

// The most layers a network may expand to. The deepest networks studied (ResNet-1001, about 3,000
// layers with its batch norms and ReLUs) stay well below; a repeat count beyond it is a typo, and
// would otherwise re-parse the file once per instance for hours before any layer is checked.
inline constexpr size_t kMaxNetworkLayers = 10000;

// The keys of a block under `blocks:`, of a `repeat:` and of its `first:`: what the expansion checks,
// and what the network reference lists.
const std::vector<KeyDoc>& block_keys();
const std::vector<KeyDoc>& repeat_keys();
const std::vector<KeyDoc>& repeat_first_keys();

struct ExpandedLayer {
  ConfigNode node;     // the layer mapping, substituted and renamed in place
  std::string origin;  // empty for top-level layers, else "block instance res2_3 (layers[5].repeat)"
};

// The scalar nodes of a layer's `bottom:`/`top:` entry, written as a string or a list of strings.
std::vector<ConfigNode> blob_name_nodes(const ConfigNode& layer, const std::string& key);

// Appends " [in <origin>]" to a ConfigError raised while handling a block instance's layer, so a
// message that points into `blocks:` also says which instance was being built.
[[noreturn]] void rethrow_with_origin(const ConfigError& e, const std::string& origin);

// `root` is the parsed file; `text` its source, re-parsed once per block instance so that every
// instance gets its own nodes (with marks) to rewrite. `scope` holds the global variables and
// receives `last` as items are expanded.
std::vector<ExpandedLayer> expand_layers(const ConfigNode& root, const std::string& text, VarScope scope);

}  // namespace cnnscale::net
