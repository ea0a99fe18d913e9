// The experiment schema of train's settings, made from their table (train_settings.hpp): each setting
// is a fixed key (solver.lr, seed) and a matrix axis (matrix.lr: [0.1, 0.01]), its values checked
// as the table declares, every error at its own "file:line:col: key.path". An axis is read the same
// way for infer's settings (infer_experiment.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/datasets.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale {

nlohmann::json read_setting(const TrainSetting& s, const ConfigNode& n) {
  switch (s.type) {
    case SettingType::Integer:
      return int_in(n, static_cast<int64_t>(s.min), static_cast<int64_t>(s.max));
    case SettingType::Number:
      return number_in(n, s.min, s.max, s.min_open);
    case SettingType::Choice:
      return one_of(n, std::set<std::string>(s.choices.begin(), s.choices.end()));
    case SettingType::NumberList: {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& m : list_items(n)) list.push_back(number_in(m, s.min, s.max, s.min_open));
      return list;
    }
    case SettingType::IntegerList: {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& m : list_items(n))
        list.push_back(int_in(m, static_cast<int64_t>(s.min), static_cast<int64_t>(s.max)));
      return list;
    }
    case SettingType::Switch:
      return n.as<bool>();
    case SettingType::Boolean:
      // Words for false and true where the experiment names them (update: after_exchange | per_bucket).
      if (s.choices.size() == 2) return one_of(n, {s.choices[0], s.choices[1]}) == s.choices[1];
      return n.as<bool>();
    case SettingType::Text:
      return n.as<std::string>();
    case SettingType::TextList: {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& m : list_items(n)) list.push_back(m.as<std::string>());
      return list;
    }
  }
  return nullptr;
}

std::set<std::string> setting_keys(const std::string& section) {
  std::set<std::string> keys;
  for (const TrainSetting& s : train_settings())
    if (s.section == section && s.part_of.empty() && s.in_experiments()) keys.insert(s.name);
  return keys;
}

std::set<std::string> setting_axis_keys() {
  std::set<std::string> keys;
  for (const TrainSetting& s : train_settings())
    if (s.part_of.empty() && s.in_experiments()) keys.insert(s.name);
  return keys;
}

void refuse_null_settings(const ExperimentReader& r, const ConfigNode& n, const SettingTable& table,
                          const std::set<std::string>& keys) {
  if (!n.is_map()) return;
  for (const auto& kv : n.yaml()) {
    const std::string key = kv.first.as<std::string>();
    const Setting* s = keys.count(key) ? find_setting(table, key) : nullptr;
    if (!s || !kv.second.IsNull() || !s->null_means.empty()) continue;
    const nlohmann::json def = s->experiment_value(s->default_value);
    r.get(n, key).fail(def == "" || def.empty()
                           ? fmt::format("no value (null): give {} a value", key)
                           : fmt::format("no value (null): give {} a value, or leave the key out for its default ({})",
                                         key, s->text(def)));
  }
}

void read_settings_section(const ExperimentReader& r, const ConfigNode& n, const std::string& section,
                           nlohmann::json& values) {
  r.check_keys(n, setting_keys(section));
  refuse_null_settings(r, n, train_settings(), setting_keys(section));
  for (const TrainSetting& s : train_settings())
    if (s.section == section)
      if (auto c = r.child(n, s.name)) values[s.name] = read_setting(s, *c);
}

Experiment::SettingAxis read_setting_axis(const Setting& s, const ConfigNode& c,
                                          const std::optional<ConfigNode>& fixed) {
  // One value per run: a fixed key beside the axis would be overruled by it without a word.
  if (fixed)
    c.fail(fmt::format("{} is given twice (also as '{}'): keep the axis or the fixed value", s.name, fixed->path()));
  // A list of lists for a list-valued setting ([[30, 60], [20, 40]]); a single list is one value.
  const bool one_list = (s.type == SettingType::NumberList || s.type == SettingType::IntegerList) && c.is_sequence() &&
                        (c.size() == 0 || !c.items().front().is_sequence());
  const std::vector<ConfigNode> items = one_list ? std::vector<ConfigNode>{c} : list_items(c);
  Experiment::SettingAxis axis{s.name, {}};
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < items.size(); ++i) {
    axis.values.push_back(read_setting(s, items[i]));
    // Two values that spell alike would be one run twice (one id).
    const std::string spelt = s.text(axis.values.back());
    if (const auto [at, fresh] = first.emplace(spelt, i); !fresh)
      items[i].fail(fmt::format("{} is listed twice (also matrix.{}[{}]): both would be one run, of one run id", spelt,
                                s.name, at->second));
  }
  return axis;
}

void read_setting_axes(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& m, Experiment& e) {
  refuse_null_settings(r, m, train_settings(), setting_axis_keys());
  for (const TrainSetting& s : train_settings()) {
    auto c = s.part_of.empty() && s.in_experiments() ? r.child(m, s.name) : std::nullopt;
    if (!c) continue;
    if (!s.no_axis.empty())
      c->fail(fmt::format("{} is a fixed key ({}), no axis: {}", s.name, s.experiment_key(), s.no_axis));
    std::optional<ConfigNode> fixed = s.section.empty() ? r.child(root, s.name) : std::nullopt;
    if (!s.section.empty())
      if (auto section = r.child(root, s.section)) fixed = r.child(*section, s.name);
    e.setting_axes.push_back(read_setting_axis(s, *c, fixed));
  }
}

RunContext run_context(const Experiment& e, const RunSpec& run) {
  const bool gpu = e.device == "gpu";
  // The step may replay a CUDA graph unless the run turns it off (train.cuda_graph, or its axis).
  auto value = [&](const char* name, const nlohmann::json& def) {
    return run.settings.contains(name) ? run.settings[name] : e.train.value(name, def);
  };
  const nlohmann::json graph = value("cuda_graph", true);
  return {.gpu = gpu,
          .world_size = run.ranks,
          .exchanges = run.ranks > 1,
          .graph = gpu && graph != false,
          .precision = run.precision,
          .split = run.split,
          .auto_start = value("auto_start", "probe").get<std::string>(),
          .measure = e.measure,
          .mfu = value("mfu", false) == true,
          .synthetic = !run.infer && dataset_info(run.dataset.name).synthetic,
          .global_batch = run.batch};
}

nlohmann::json applying_point(const nlohmann::json& point, const RunContext& c) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : point.items())
    if (find_train_setting(name)->applies_to(c)) out[name] = value;
  return out;
}

namespace {

// A value train takes on GPU runs only, in an experiment on the CPU: refused at its key or axis value.
void check_gpu_only(const ExperimentReader& r, const ConfigNode& root, const Experiment& e, const TrainSetting& s) {
  if (e.device != "cpu" || !s.gpu_only) return;
  std::vector<ConfigNode> given;
  const std::optional<ConfigNode> section = s.section.empty() ? root : r.child(root, s.section);
  if (section && section->is_map())
    if (auto c = r.child(*section, s.name)) given.push_back(*c);
  if (auto matrix = r.child(root, "matrix"); matrix && matrix->is_map())
    if (auto c = r.child(*matrix, s.name)) given = list_items(*c);
  for (const ConfigNode& n : given)
    if (const nlohmann::json v = read_setting(s, n); s.gpu_only(v))
      n.fail(fmt::format("train takes {} only on GPU runs, and this experiment runs on the CPU",
                         fmt::format("{}", fmt::join(s.arguments(v), " "))));
}

}  // namespace

void check_settings_apply(const ExperimentReader& r, const ConfigNode& root, const Experiment& e) {
  if (e.mode == "infer") return;  // train's settings: no keys of an inference experiment
  std::vector<RunSpec> runs;
  for (const TrainSetting& s : train_settings()) {
    check_gpu_only(r, root, e, s);
    if (!s.refused_elsewhere()) continue;
    std::optional<ConfigNode> given;
    const std::optional<ConfigNode> section = s.section.empty() ? root : r.child(root, s.section);
    if (section && section->is_map()) given = r.child(*section, s.name);
    if (auto matrix = r.child(root, "matrix"); !given && matrix && matrix->is_map()) given = r.child(*matrix, s.name);
    if (!given) continue;
    if (runs.empty()) runs = expand_runs(e);
    if (std::any_of(runs.begin(), runs.end(), [&](const RunSpec& run) { return s.applies_to(run_context(e, run)); }))
      continue;
    given->fail(fmt::format("train takes {} only on {}, and this experiment has none", s.flag, s.applies_only_to));
  }
}

}  // namespace cnnscale
