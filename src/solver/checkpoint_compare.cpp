// Identities of runs for checkpoints (see checkpoint_compare.hpp): the network YAML becomes JSON
// (mappings, sequences, scalars as text) so that one recursive walk compares everything; list
// items that carry a name (layers) are addressed by it, so that a difference names the layer.
#include "solver/checkpoint_compare.hpp"

#include <yaml-cpp/yaml.h>

#include "core/error.hpp"

namespace cnnscale {

namespace {

// Run options whose change makes a checkpoint meaningless for this run; the rest of the run
// configuration (device, rank count, precision, timing switches) may change across a resume.
const char* const kMustMatch[] = {"net",           "data",           "batch",       "seed",
                                  "train_samples", "synthetic_fill", "input_shape", "classes"};

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : node) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& item : node) j.push_back(yaml_to_json(item));
      return j;
    }
    case YAML::NodeType::Scalar:
      return node.Scalar();
    default:
      return nullptr;
  }
}

// "[pool1]" for a list item with a unique string name, else "[i]".
std::string item_label(const nlohmann::json& list, size_t i) {
  const nlohmann::json& item = list[i];
  if (item.is_object() && item.contains("name") && item["name"].is_string()) {
    const std::string name = item["name"].get<std::string>();
    int same = 0;
    for (const auto& other : list)
      if (other.is_object() && other.value("name", nlohmann::json()) == item["name"]) ++same;
    if (same == 1) return "[" + name + "]";
  }
  return "[" + std::to_string(i) + "]";
}

const nlohmann::json* find_named(const nlohmann::json& list, const nlohmann::json& item) {
  if (!item.is_object() || !item.contains("name")) return nullptr;
  for (const auto& other : list)
    if (other.is_object() && other.value("name", nlohmann::json()) == item["name"]) return &other;
  return nullptr;
}

void diff(const nlohmann::json& a, const nlohmann::json& b, const std::string& key,
          std::vector<IdentityDifference>& out) {
  if (a == b) return;
  const auto dotted = [&](const std::string& k) { return key.empty() ? k : key + "." + k; };
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (b.contains(k))
        diff(v, b[k], dotted(k), out);
      else
        out.push_back({dotted(k), v.dump(), "(absent)"});
    }
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) out.push_back({dotted(k), "(absent)", v.dump()});
    return;
  }
  if (a.is_array() && b.is_array()) {
    // Same length and the same names in the same places: compare item by item, by name.
    bool aligned = a.size() == b.size();
    for (size_t i = 0; aligned && i < a.size(); ++i) aligned = item_label(a, i) == item_label(b, i);
    if (aligned) {
      for (size_t i = 0; i < a.size(); ++i) diff(a[i], b[i], key + item_label(a, i), out);
      return;
    }
    // Layers added, removed or reordered: name the first item that differs.
    for (size_t i = 0; i < a.size(); ++i) {
      const nlohmann::json* other = find_named(b, a[i]);
      if (!other) {
        out.push_back({key + item_label(a, i), a[i].dump(), "(absent)"});
        return;
      }
    }
    for (size_t i = 0; i < b.size(); ++i)
      if (!find_named(a, b[i])) {
        out.push_back({key + item_label(b, i), "(absent)", b[i].dump()});
        return;
      }
    out.push_back({key, a.dump(), b.dump()});  // the same items in another order
    return;
  }
  out.push_back({key, a.dump(), b.dump()});
}

}  // namespace

nlohmann::json solver_settings(const SolverConfig& c) {
  return {{"lr", c.lr},
          {"momentum", c.momentum},
          {"weight_decay", c.weight_decay},
          {"lr_policy", lr_policy_name(c.policy)},
          {"gamma", c.gamma},
          {"step", c.step_epochs},
          {"milestones", c.milestones},
          {"power", c.power},
          {"warmup", c.warmup_epochs},
          {"warmup_iterations", c.warmup_iterations},
          {"warmup_start_factor", c.warmup_start_factor},
          {"lr_scaling", c.lr_scaling},
          {"lr_base_batch", c.lr_base_batch}};
}

nlohmann::json checkpoint_identity(const std::string& run_config, const std::string& solver,
                                   const std::string& network_yaml, const std::string& where) {
  nlohmann::json config, id = nlohmann::json::object();
  try {
    config = nlohmann::json::parse(run_config.empty() ? "{}" : run_config);
    for (const char* key : kMustMatch) id[key] = config.value(key, nlohmann::json());
    id["solver"] = solver.empty() ? config.value("solver", nlohmann::json()) : nlohmann::json::parse(solver);
  } catch (const nlohmann::json::exception& e) {
    throw_config("{}: unreadable run configuration: {}", where, e.what());
  }
  if (!network_yaml.empty()) {
    try {
      id["network"] = yaml_to_json(YAML::Load(network_yaml));
    } catch (const YAML::Exception& e) {
      throw_config("{}: unreadable network definition: {}", where, e.what());
    }
  }
  return id;
}

std::vector<IdentityDifference> identity_differences(const nlohmann::json& saved, const nlohmann::json& now) {
  nlohmann::json a = saved, b = now;
  // A network on one side only (a checkpoint written without one) is not a difference.
  if (!a.contains("network") || !b.contains("network")) {
    a.erase("network");
    b.erase("network");
  }
  // An older checkpoint holds the solver's one-line summary: compare like with like.
  if (a.contains("solver") && b.contains("solver") && a["solver"].is_string() != b["solver"].is_string()) {
    a.erase("solver");
    b.erase("solver");
  }
  std::vector<IdentityDifference> out;
  diff(a, b, "", out);
  return out;
}

std::string more_differences(const std::vector<IdentityDifference>& diffs) {
  if (diffs.size() < 2) return "";
  return fmt::format(" (and {} more difference{})", diffs.size() - 1, diffs.size() == 2 ? "" : "s");
}

std::string describe_difference(const IdentityDifference& d, const std::string& was_label,
                                const std::string& now_label) {
  return fmt::format("{} {}={}, {} {}={}", was_label, d.key, d.was, now_label, d.key, d.is_now);
}

}  // namespace cnnscale
