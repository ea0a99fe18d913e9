// Block and repeat expansion for network files (format: networks/README.md). A block instance's
// layers get the prefix `<prefix>_<i>_` (or `<prefix>_` when times is 1) on their names and on the
// blobs they produce; the last instance's `output` blob is named after the repeat itself.
#include "net/blocks.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace cnnscale::net {

namespace {

std::string first_top(const ConfigNode& layer) {
  auto tops = blob_name_nodes(layer, "top");
  return tops.empty() ? std::string() : tops.front().as<std::string>();
}

void require_layer_map(const ConfigNode& item) {
  if (!item.is_map()) item.fail("expected a layer mapping ({name: ..., type: ...}) or {repeat: ...}");
}

// One block definition from `blocks:`, validated once.
struct BlockDef {
  std::string name;
  ConfigNode node;
  std::vector<std::string> param_order;
  std::map<std::string, std::optional<std::string>> defaults;  // nullopt: argument required
  std::string output;
};

std::map<std::string, BlockDef> read_blocks(const ConfigNode& root) {
  std::map<std::string, BlockDef> blocks;
  auto section = root.child("blocks");
  if (!section) return blocks;
  section->require_map();
  for (const auto& name : section->keys()) {
    BlockDef def;
    def.name = name;
    def.node = (*section)[name];
    def.node.require_map();
    def.node.check_keys(key_names(block_keys()));
    if (auto params = def.node.child("params")) {
      params->require_map();
      for (const auto& p : params->keys()) {
        ConfigNode value = (*params)[p];
        if (value.yaml().IsNull()) {
          def.defaults[p] = std::nullopt;
        } else if (value.is_scalar()) {
          def.defaults[p] = value.as<std::string>();
        } else {
          value.fail("a block parameter's default must be a scalar (or ~ for a required parameter)");
        }
        def.param_order.push_back(p);
      }
    }
    def.output = def.node.get<std::string>("output");
    ConfigNode layers = def.node["layers"];
    if (!layers.is_sequence() || layers.size() == 0) layers.fail("expected a non-empty list of layers");
    for (const auto& item : layers.items()) {
      require_layer_map(item);
      if (item.has("repeat")) item["repeat"].fail("a block cannot contain a repeat (blocks do not nest)");
    }
    blocks.emplace(name, std::move(def));
  }
  return blocks;
}

class Expander {
 public:
  Expander(const ConfigNode& root, const std::string& text) : root_(root), text_(text), blocks_(read_blocks(root)) {}

  std::vector<ExpandedLayer> run(VarScope scope) {
    scope.set("last", "data");
    ConfigNode layers = root_["layers"];
    if (!layers.is_sequence() || layers.size() == 0) layers.fail("expected a non-empty list of layers");
    for (const auto& item : layers.items()) {
      require_layer_map(item);
      if (item.has("repeat")) {
        item.check_keys({"repeat"});  // a repeat item is `{repeat: {...}}` alone
        expand_repeat(item["repeat"], scope);
      } else {
        if (out_.size() >= kMaxNetworkLayers)
          item.fail(fmt::format("the network has more than {} layers", kMaxNetworkLayers));
        substitute_in_place(item, scope);
        out_.push_back({item, ""});
        std::string top = first_top(item);
        if (!top.empty()) scope.set("last", top);
      }
    }
    return std::move(out_);
  }

 private:
  const BlockDef& find_block(const ConfigNode& name_node) const {
    std::string name = name_node.as<std::string>();
    auto it = blocks_.find(name);
    if (it == blocks_.end()) {
      std::string known;
      for (const auto& kv : blocks_) known += (known.empty() ? "" : ", ") + kv.first;
      name_node.fail(fmt::format("unknown block '{}' (defined under blocks: {})", name,
                                 known.empty() ? "none" : known));
    }
    return it->second;
  }

  // Parameter values for one instance: defaults, then the repeat's args, then (first instance)
  // the `first:` args; each argument must be a declared parameter.
  std::map<std::string, std::string> bind_args(const BlockDef& def, const ConfigNode& repeat,
                                               const std::vector<ConfigNode>& arg_maps) const {
    std::map<std::string, std::optional<std::string>> values = def.defaults;
    for (const auto& args : arg_maps) {
      args.require_map();
      for (const auto& key : args.keys()) {
        ConfigNode value = args[key];
        if (!def.defaults.count(key)) {
          std::string declared;
          for (const auto& p : def.param_order) declared += (declared.empty() ? "" : ", ") + p;
          value.fail(fmt::format("block '{}' has no parameter '{}' (parameters: {})", def.name, key,
                                 declared.empty() ? "none" : declared));
        }
        if (!value.is_scalar()) value.fail("a block argument must be a scalar");
        values[key] = value.as<std::string>();
      }
    }
    std::map<std::string, std::string> bound;
    for (const auto& [key, value] : values) {
      if (!value) repeat.fail(fmt::format("block '{}' needs argument '{}' (no default)", def.name, key));
      bound[key] = *value;
    }
    return bound;
  }

  void expand_repeat(const ConfigNode& repeat, VarScope& scope) {
    repeat.require_map();
    repeat.check_keys(key_names(repeat_keys()));
    substitute_in_place(repeat, scope);
    const BlockDef& main_def = find_block(repeat["block"]);
    int times = repeat.get_or<int>("times", 1);
    if (times < 1) repeat["times"].fail("expected a positive integer");
    std::string prefix = repeat.get<std::string>("prefix");
    std::string input = repeat.get_or<std::string>("input", *scope.find("last"));
    std::string output = repeat.get_or<std::string>("output", prefix);
    auto args = repeat.child("args");
    auto first = repeat.child("first");
    if (first) first->check_keys(key_names(repeat_first_keys()));
    // Counted before any instance is made: each one re-parses the file.
    size_t per_instance = main_def.node["layers"].size();
    if (auto b = first ? first->child("block") : std::nullopt)
      per_instance = std::max(per_instance, find_block(*b).node["layers"].size());
    if (static_cast<size_t>(times) > (kMaxNetworkLayers - out_.size()) / per_instance)
      repeat["times"].fail(fmt::format("{} instances of block '{}' ({} layer(s) each) make the network more than {} "
                                       "layers",
                                       times, main_def.name, per_instance, kMaxNetworkLayers));
    std::string where_repeat = repeat.path();

    std::string in = input;
    for (int i = 1; i <= times; ++i) {
      const BlockDef* def = &main_def;
      std::vector<ConfigNode> arg_maps;
      if (args) arg_maps.push_back(*args);
      if (i == 1 && first) {
        if (auto b = first->child("block")) def = &find_block(*b);
        if (auto a = first->child("args")) arg_maps.push_back(*a);
      }
      VarScope inst = scope;
      for (const auto& [k, v] : bind_args(*def, repeat, arg_maps)) inst.set(k, v);
      inst.set("in", in);
      inst.set("last", in);
      inst.set("index", std::to_string(i));
      std::string tag = times == 1 ? prefix : fmt::format("{}_{}", prefix, i);
      std::string origin = fmt::format("block '{}' instance {} ({})", def->name, tag, where_repeat);
      in = expand_instance(*def, tag + "_", i == times ? output : "", inst, origin);
    }
    scope.set("last", in);
  }

  // Instantiates one block on a fresh parse of the file; returns its output blob's global name.
  std::string expand_instance(const BlockDef& def, const std::string& pfx, const std::string& output_name,
                              VarScope& scope, const std::string& origin) {
    ConfigNode fresh = ConfigNode::load_string(text_, root_.file())["blocks"][def.name]["layers"];
    std::map<std::string, std::string> local;  // blob name inside the block -> global name
    for (const auto& layer : fresh.items()) {
      try {
        // Bottoms written with ${...} name network blobs (e.g. ${in}); literal ones that match a
        // blob produced earlier in this block name that block-local blob.
        std::vector<ConfigNode> bottoms = blob_name_nodes(layer, "bottom");
        std::vector<bool> literal;
        for (const auto& b : bottoms) literal.push_back(!has_reference(b.yaml().Scalar()));
        substitute_in_place(layer, scope);
        for (size_t i = 0; i < bottoms.size(); ++i) {
          auto it = local.find(bottoms[i].as<std::string>());
          if (literal[i] && it != local.end()) set_scalar(bottoms[i], it->second);
        }
        if (auto name = layer.child("name")) set_scalar(*name, pfx + name->as<std::string>());
        for (const auto& t : blob_name_nodes(layer, "top")) {
          std::string top = t.as<std::string>();
          std::string global = (!output_name.empty() && top == def.output) ? output_name : pfx + top;
          local[top] = global;
          set_scalar(t, global);
        }
        std::string top = first_top(layer);
        if (!top.empty()) scope.set("last", top);
      } catch (const ConfigError& e) {
        rethrow_with_origin(e, origin);
      }
      out_.push_back({layer, origin});
    }
    auto it = local.find(def.output);
    if (it == local.end())
      def.node["output"].fail(fmt::format("output '{}' is not a top of any layer of block '{}'", def.output, def.name));
    return it->second;
  }

  const ConfigNode& root_;
  const std::string& text_;
  std::map<std::string, BlockDef> blocks_;
  std::vector<ExpandedLayer> out_;
};

}  // namespace

const std::vector<KeyDoc>& block_keys() {
  static const std::vector<KeyDoc> k = {
      {"params", "mapping of parameter to default", "none",
       "the block's parameters, `${name}` inside it; a default of ~ makes the argument required"},
      {"output", "blob name", "required", "the block-local blob the block hands on (its instance's output)"},
      {"layers", "non-empty list of layer mappings", "required",
       "the block's layers; `${in}` is the instance's input; no repeat inside (blocks do not nest)"},
  };
  return k;
}

const std::vector<KeyDoc>& repeat_keys() {
  static const std::vector<KeyDoc> k = {
      {"block", "block name", "required", "the block to instantiate"},
      {"times", "integer >= 1", "1", "instances, chained: each one's `${in}` is the previous one's output"},
      {"prefix", "string", "required",
       "instance i's layer and blob names start with `<prefix>_<i>_` (`<prefix>_` when times is 1)"},
      {"input", "blob name", "${last}", "the first instance's `${in}`"},
      {"args", "mapping of parameter to scalar", "none", "the block's arguments, for every instance"},
      {"first", "{block, args}", "none",
       "for the first instance only: another block and/or further arguments (a stage's projection block)"},
      {"output", "blob name", "the prefix", "the name of the last instance's output blob"},
  };
  return k;
}

const std::vector<KeyDoc>& repeat_first_keys() {
  static const std::vector<KeyDoc> k = {
      {"block", "block name", "the repeat's block", "the block of the first instance"},
      {"args", "mapping of parameter to scalar", "none", "arguments of the first instance, over the repeat's"},
  };
  return k;
}

std::vector<ConfigNode> blob_name_nodes(const ConfigNode& layer, const std::string& key) {
  std::vector<ConfigNode> out;
  auto c = layer.child(key);
  if (!c) return out;
  if (c->is_sequence()) {
    out = c->items();
  } else {
    out.push_back(*c);
  }
  for (const auto& n : out)
    if (!n.is_scalar()) n.fail("expected a blob name");
  return out;
}

void rethrow_with_origin(const ConfigError& e, const std::string& origin) {
  if (origin.empty()) throw e;
  throw ConfigError(fmt::format("{} [in {}]", e.what(), origin));
}

std::vector<ExpandedLayer> expand_layers(const ConfigNode& root, const std::string& text, VarScope scope) {
  return Expander(root, text).run(std::move(scope));
}

}  // namespace cnnscale::net
