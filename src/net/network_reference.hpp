// The network file reference: every key a network file, a block, a repeat, any layer and each
// registered layer type accepts, with its type, default and meaning, gathered from the lists the
// parsers check (KeyDoc, LayerTypeDoc). `cnnscale netinfo --layers` prints it; the reference part
// of docs/network-reference.md is that output, and a test holds the two equal.
#pragma once
#include <string>
#include <vector>

#include "core/key_doc.hpp"

namespace cnnscale {

// One table of the reference: the keys of one mapping, under `heading` within `section`.
struct KeyTable {
  std::string section;  // "Network file", "Blocks and repeat", "Layers", "Layer types", "Parameter settings"
  std::string heading;  // "`input`", "Convolution", ...; a layer type's heading is its `type:` name
  std::string text;     // what the mapping is, before its table
  std::vector<KeyDoc> keys;
};

inline constexpr const char* kLayerTypesSection = "Layer types";

// In reference order: the file's keys, blocks and repeat, the keys of every layer, each registered
// layer type (by name), fillers and `param` entries.
std::vector<KeyTable> network_key_tables();

// The tables as Markdown: `## section`, `### heading`, the text, then | key | type | default |
// meaning | rows (a table-less heading says that the mapping has no keys of its own).
std::string network_reference_markdown();

}  // namespace cnnscale
