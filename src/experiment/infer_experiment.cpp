// An inference experiment's infer: section, from infer's settings table (command_settings.hpp): each
// entry of section "infer" is a key there or a matrix axis (matrix.seconds: [1, 3]), read and checked
// as its entry declares, passed on each run's `cnnscale infer` command line and recorded in the run's
// configuration by its entry's rule. The batch list and the int8 tables have readers of their own
// (max comes last; a table per network, checked to exist) and are no axes: every run sweeps the whole
// batch list, and an int8 run takes its network's table.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "experiment/command_settings.hpp"
#include "experiment/experiment.hpp"
#include "experiment/experiment_reader.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

namespace {

// The infer: entries read, passed and recorded the common way.
bool common_entry(const Setting& s) { return s.section == "infer" && s.name != "batch" && s.name != "calibration"; }

// An experiment's input is constant by default, for honest power readings (infer's own: gaussian).
nlohmann::json experiment_default(const Setting& s) {
  return s.name == "fill" ? nlohmann::json("constant") : s.default_value;
}

bool ends_with_max(const InferSpec& s) {
  return !s.batches.empty() && s.batches.back() == "max";
}
constexpr const char* kMemoryLimitOnly = "is the budget of a batch list ending with max (infer.batch)";

void read_batches(const ConfigNode& c, InferSpec& s) {
  s.batches.clear();
  for (const auto& b : list_items(c)) {
    if (!s.batches.empty() && s.batches.back() == "max") b.fail("max is the largest batch that fits, so it comes last");
    if (b.is_scalar() && b.as<std::string>() == "max") {
      s.batches.push_back("max");
      continue;
    }
    const std::string size = std::to_string(int_in(b, 1, 1 << 24));
    if (std::find(s.batches.begin(), s.batches.end(), size) != s.batches.end())
      b.fail(fmt::format("batch {} is listed twice", size));
    s.batches.push_back(size);
  }
}

// int8's tables: one for every network (a scalar), or one per network (a map); each a table file,
// checked to exist here, or "synthetic".
void read_calibration(const ExperimentReader& r, const ConfigNode& c, InferSpec& s) {
  auto one = [&](const ConfigNode& v, const std::string& net) {
    const std::string written = v.as<std::string>();
    s.calibration[net] = written;
    if (written == "synthetic") {
      s.calibration_paths[net] = written;
      return;
    }
    const fs::path file = experiment_path(r, v, written);
    std::error_code ec;
    if (!fs::is_regular_file(file, ec))
      v.fail(fmt::format("no calibration table {} (write one with cnnscale calibrate --out, or give synthetic)",
                         file.string()));
    s.calibration_paths[net] = fs::absolute(file).lexically_normal().string();
  };
  if (c.is_scalar()) {
    one(c, "*");
  } else {
    c.require_map();
    for (const auto& net : c.keys()) one(r.get(c, net), net);
  }
}

}  // namespace

nlohmann::json infer_experiment_defaults() {
  nlohmann::json values = nlohmann::json::object();
  for (const Setting& s : infer_settings())
    if (common_entry(s)) values[s.name] = experiment_default(s);
  return values;
}

void read_infer(const ExperimentReader& r, const ConfigNode& n, Experiment& e) {
  std::set<std::string> keys;
  for (const Setting& s : infer_settings())
    if (s.section == "infer") keys.insert(s.name);
  r.check_keys(n, keys);
  refuse_null_settings(r, n, infer_settings(), keys);
  InferSpec& s = e.infer;
  if (auto c = r.child(n, "batch")) read_batches(*c, s);
  for (const Setting& t : infer_settings())
    if (common_entry(t))
      if (auto c = r.child(n, t.name)) {
        s.settings[t.name] = read_setting(t, *c);
        s.given.insert(t.name);
      }
  if (s.given.count("memory_limit") && !ends_with_max(s)) r.get(n, "memory_limit").fail(kMemoryLimitOnly);
  if (auto c = r.child(n, "calibration")) read_calibration(r, *c, s);
}

std::set<std::string> infer_axis_keys() {
  std::set<std::string> keys;
  for (const Setting& s : infer_settings())
    if (common_entry(s)) keys.insert(s.name);
  return keys;
}

void read_infer_axes(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& m, Experiment& e) {
  const std::optional<ConfigNode> section = r.child(root, "infer");
  refuse_null_settings(r, m, infer_settings(), infer_axis_keys());
  for (const Setting& s : infer_settings()) {
    const std::optional<ConfigNode> c = common_entry(s) ? r.child(m, s.name) : std::nullopt;
    if (!c) continue;
    if (s.name == "memory_limit" && !ends_with_max(e.infer)) c->fail(kMemoryLimitOnly);
    e.setting_axes.push_back(read_setting_axis(s, *c, section ? r.child(*section, s.name) : std::nullopt));
  }
}

nlohmann::json InferSpec::to_json() const {
  nlohmann::json j = {{"batch", batches}};
  for (const Setting& s : infer_settings())
    if (common_entry(s) && s.records(settings.at(s.name))) j[s.name] = settings.at(s.name);
  return j;  // calibration: in the int8 runs' own configurations (make_infer_run)
}

std::vector<std::string> InferSpec::arguments(const nlohmann::json& point) const {
  std::vector<std::string> a;
  for (const Setting& s : infer_settings()) {
    if (!common_entry(s)) continue;
    const bool swept = point.contains(s.name);
    const nlohmann::json& v = swept ? point.at(s.name) : settings.at(s.name);
    // A value recorded always is passed always (as runs always had it); another only where given,
    // as the fixed key or the run's point of its axis.
    if (s.record != Record::Always && !given.count(s.name) && !swept) continue;
    for (const std::string& w : s.arguments(v)) a.push_back(w);
  }
  return a;
}

std::map<std::string, std::string> InferSpec::flags_set() const {
  std::map<std::string, std::string> flags;
  for (const Setting& s : infer_settings()) {
    if (s.section != "infer") continue;
    if (common_entry(s) && s.record != Record::Always && !given.count(s.name)) continue;  // not passed
    flags[s.flag] = s.experiment_key();
  }
  return flags;
}

}  // namespace cnnscale
