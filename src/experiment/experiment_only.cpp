// --only: the sweep's selection of matrix points by key=value terms (OnlyFilter), over a run's
// matrix keys, train's settings (only where the setting applies to the run) and infer's keys.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/experiment.hpp"
#include "experiment/network_id_part.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale {

const std::vector<OnlyPointKey>& only_point_keys() {
  static const std::vector<OnlyPointKey> keys = {
      {"network"},       {"batch", true}, {"batch_per_gpu", true}, {"gpus"},        {"gpu_mix"},
      {"cpu_mix", true}, {"precision"},   {"allreduce", true},     {"split", true}, {"repeat"}};
  return keys;
}

OnlyFilter parse_only(const std::vector<std::string>& exprs) {
  std::set<std::string> keys;
  std::vector<std::string> listed;
  for (const OnlyPointKey& k : only_point_keys()) {
    keys.insert(k.name);
    listed.push_back(k.name);
  }
  OnlyFilter f;
  for (const auto& expr : exprs) {
    std::stringstream ss(expr);
    for (std::string term; std::getline(ss, term, ',');) {
      size_t eq = term.find('=');
      std::string key = term.substr(0, eq);
      if (eq == std::string::npos || eq + 1 == term.size())
        throw_config("--only '{}': expected key=value[,key=value...], got '{}'", expr, term);
      if (const TrainSetting* s = find_train_setting(key);
          !keys.count(key) && (!s || !s->part_of.empty() || !s->in_experiments()) && !infer_axis_keys().count(key))
        throw_config("--only '{}': unknown key '{}' ({}, a train setting such as lr, or an infer key such as seconds)",
                     expr, key, fmt::join(listed, ", "));
      std::stringstream alts(term.substr(eq + 1));
      auto& values = f.terms[key];
      std::vector<std::string> mine;
      for (std::string v; std::getline(alts, v, '|');) mine.push_back(v);
      // Two --only terms on one key must both hold: keep the values they share.
      if (f.terms.count(key) && !values.empty()) {
        std::vector<std::string> both;
        for (const auto& v : mine)
          if (std::find(values.begin(), values.end(), v) != values.end()) both.push_back(v);
        values = both.empty() ? std::vector<std::string>{"\x01none"} : both;
      } else {
        values = mine;
      }
    }
  }
  return f;
}

bool OnlyFilter::matches(const RunSpec& r) const {
  const std::string mix = GpuMix{r.gpu_mix, r.gpu_sms}.label();
  for (const auto& [key, values] : terms) {
    // One rank reduces and splits nothing: any mode and policy match.
    if ((key == "allreduce" || key == "split") && r.ranks == 1) continue;
    std::vector<std::string> mine;
    if (key == "network") mine = {r.network, network_id_part(r.network)};
    if (key == "batch") mine = {std::to_string(r.batch)};
    // The per-rank batch a weak-scaling matrix (batch_per_gpu) names: `batch` is always the global
    // one, so batch=64 leaves out the 4-rank runs of per-GPU 64 (global 256). A global batch that
    // does not divide evenly has no per-rank batch to match.
    if (key == "batch_per_gpu" && r.batch % r.ranks == 0) mine = {std::to_string(r.batch / r.ranks)};
    if (key == "gpus") mine = {std::to_string(r.ranks)};
    if (key == "gpu_mix") mine = {mix.empty() ? "none" : mix};
    if (key == "cpu_mix") mine = {r.slowdown.empty() ? "none" : cpu_mix_label(r.slowdown)};
    if (key == "split") mine = {r.split};
    if (key == "precision") mine = {r.precision};
    if (key == "allreduce")
      mine = {r.allreduce.label(), r.allreduce.long_label()};
    if (key == "repeat") mine = {std::to_string(r.repeat)};
    // An infer key of an inference run: its point's value, else the one the run records or its default.
    if (r.infer && infer_axis_keys().count(key)) {
      const Setting& s = *find_setting(infer_settings(), key);
      const nlohmann::json recorded = r.config.value("infer", nlohmann::json::object());
      mine = {s.text(r.settings.contains(key) ? r.settings[key] : recorded.value(key, s.default_value))};
    } else if (const TrainSetting* s = find_train_setting(key); s && s->part_of.empty()) {
      // A train setting: the point's value (matrix.seed: the point's seed, whichever the repeat's is).
      // A run it does not apply to has no value of it (auto_start=probe: the runs of split auto only).
      if (!r.infer && !s->applies_to(r.context)) {
        mine.clear();
      } else if (key == "seed") {
        mine = {std::to_string(r.seed_base)};
      } else if (s->section == "dataset") {
        const nlohmann::json& given = r.dataset.given;
        mine = {key == "name" ? r.dataset.name : s->text(given.contains(key) ? given[key] : s->default_value)};
      } else {
        const nlohmann::json& where = s->section.empty() ? r.config : r.config.value(s->section, nlohmann::json());
        mine = {s->text(where.is_object() && where.contains(key) ? where[key] : s->default_value)};
      }
    }
    bool any = false;
    for (const auto& v : values)
      if (std::find(mine.begin(), mine.end(), v) != mine.end()) any = true;
    if (!any) return false;
  }
  return true;
}

}  // namespace cnnscale
