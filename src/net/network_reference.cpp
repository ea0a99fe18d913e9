// The network file reference (network_reference.hpp) from the parsers' key lists and the layer
// registry: nothing here names a key, so a key a parser accepts is listed and one it drops is gone.
#include "net/network_reference.hpp"

#include <climits>

#include "layers/layer_params.hpp"
#include "net/blocks.hpp"
#include "net/net.hpp"

namespace cnnscale {

namespace {

// "1", "2", "1 to 16", "2 or more": a layer type's bottom or top count as Layer declares it.
std::string count_text(std::pair<int, int> range) {
  if (range.first == range.second) return std::to_string(range.first);
  if (range.second == INT_MAX) return fmt::format("{} or more", range.first);
  return fmt::format("{} to {}", range.first, range.second);
}

// A Markdown table cell: a `|` inside it would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

KeyTable layer_type_table(const std::string& type) {
  const LayerTypeDoc& doc = layer_type_doc(type);
  const std::string counts = fmt::format("Bottoms: {}; tops: {}.", count_text(doc.bottoms), count_text(doc.tops));
  return {kLayerTypesSection, type, doc.summary + " " + counts, doc.keys};
}

}  // namespace

std::vector<KeyTable> network_key_tables() {
  std::vector<KeyTable> tables = {
      {"Network file", "Top-level keys", "The keys of the file's top-level mapping; any other key is an error.",
       network_file_keys()},
      {"Network file", "`input`", "One sample and the number of classes.", network_input_keys()},
      {"Blocks and repeat", "A block (`blocks: {NAME: {...}}`)",
       "A named, parameterised list of layers, defined once under `blocks:`.", net::block_keys()},
      {"Blocks and repeat", "`repeat`",
       "An item `{repeat: {...}}` of `layers:` instantiates a block `times` times in a chain.", net::repeat_keys()},
      {"Blocks and repeat", "`repeat.first`", "What differs for a repeat's first instance.", net::repeat_first_keys()},
      {"Layers", "Keys of every layer",
       "Every layer mapping takes these keys besides its type's own (below); any other key is an error that "
       "names the keys allowed.",
       common_layer_keys()},
  };
  for (const auto& type : registered_layer_types()) tables.push_back(layer_type_table(type));
  tables.push_back({"Parameter settings", "Fillers",
                    "A `*_filler` key's value: a mapping with these keys, or a bare type (`weight_filler: msra`).",
                    Filler::keys()});
  tables.push_back({"Parameter settings", "`param` entries",
                    "One entry of a layer's `param:` list per learnable parameter, in the layer's order.",
                    param_entry_keys()});
  return tables;
}

std::string network_reference_markdown() {
  std::string out;
  std::string section;
  for (const auto& t : network_key_tables()) {
    if (t.section != section) {
      section = t.section;
      out += fmt::format("## {}\n\n", section);
    }
    out += fmt::format("### {}\n\n{}\n\n", t.heading, t.text);
    if (t.keys.empty()) {
      out += "No keys of its own.\n\n";
      continue;
    }
    out += "| key | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& k : t.keys)
      out += fmt::format("| `{}` | {} | {} | {} |\n", k.name, cell(k.type), cell(k.default_value), cell(k.meaning));
    out += "\n";
  }
  return out;
}

}  // namespace cnnscale
