// An inference experiment's infer: section, from infer's settings table (command_settings.hpp): each
// entry of section "infer" is a key there, read and checked as its entry declares, passed on each
// run's `cnnscale infer` command line and recorded in the run's configuration by its entry's rule.
// The batch list and the int8 tables have readers of their own (max comes last; a table per network,
// checked to exist).
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
  InferSpec& s = e.infer;
  if (auto c = r.child(n, "batch")) read_batches(*c, s);
  for (const Setting& t : infer_settings())
    if (common_entry(t))
      if (auto c = r.child(n, t.name)) {
        s.settings[t.name] = read_setting(t, *c);
        s.given.insert(t.name);
      }
  if (s.given.count("memory_limit") && (s.batches.empty() || s.batches.back() != "max"))
    r.get(n, "memory_limit").fail("is the budget of a batch list ending with max (infer.batch)");
  if (auto c = r.child(n, "calibration")) read_calibration(r, *c, s);
}

nlohmann::json InferSpec::to_json() const {
  nlohmann::json j = {{"batch", batches}};
  for (const Setting& s : infer_settings())
    if (common_entry(s) && s.records(settings.at(s.name))) j[s.name] = settings.at(s.name);
  return j;  // calibration: in the int8 runs' own configurations (make_infer_run)
}

std::vector<std::string> InferSpec::arguments() const {
  std::vector<std::string> a;
  for (const Setting& s : infer_settings()) {
    if (!common_entry(s)) continue;
    const nlohmann::json& v = settings.at(s.name);
    // A value recorded always is passed always (as runs always had it); another only where given.
    if (s.record != Record::Always && !given.count(s.name)) continue;
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
