// What every settings table shares (settings_table.hpp): a value's text, its command-line words,
// look-ups and the common ways of making an entry.
#include "experiment/settings_table.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace cnnscale {

std::string Setting::text(const nlohmann::json& value) const {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::vector<std::string> parts;
    for (const auto& v : value) parts.push_back(text(v));
    return fmt::format("{}", fmt::join(parts, ","));
  }
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number()) return fmt::format("{}", value.get<double>());
  return value.dump();
}

namespace {
std::string bound_text(const Setting& s, double v) {
  return s.type == SettingType::Integer ? std::to_string(static_cast<int64_t>(v)) : fmt::format("{}", v);
}
}  // namespace

std::string Setting::range_text() const {
  if (type != SettingType::Integer && type != SettingType::Number) return "";
  if (max >= kUnbounded) return min_open ? "> " + bound_text(*this, min) : "at least " + bound_text(*this, min);
  return fmt::format("in {}{}, {}]", min_open ? "(" : "[", bound_text(*this, min), bound_text(*this, max));
}

std::string Setting::range_error(double value) const {
  if (type != SettingType::Integer && type != SettingType::Number) return "";
  if (std::isfinite(value) && value >= min && value <= max && !(min_open && value == min)) return "";
  return fmt::format("must be {}, got {}", range_text(), bound_text(*this, value));
}

std::string Setting::help_text() const {
  std::vector<std::string> parts;
  if (!unit.empty()) parts.push_back(unit);
  if (const std::string range = range_text(); !range.empty()) parts.push_back(range);
  if (parts.empty()) return help;
  return fmt::format("{} ({})", help, fmt::join(parts, ", "));
}

std::vector<std::string> Setting::arguments(const nlohmann::json& value) const {
  if (type == SettingType::Switch) return value == default_value ? std::vector<std::string>{} : std::vector{flag};
  if (type == SettingType::Boolean && !false_flag.empty() && value == false) return {false_flag};
  return {flag, text(value)};
}

nlohmann::json Setting::experiment_value(const nlohmann::json& value) const {
  if (type == SettingType::Boolean && choices.size() == 2 && value.is_boolean()) return choices[value.get<bool>() ? 1 : 0];
  return value;
}

std::string Setting::id_piece(const nlohmann::json& given, bool long_form) const {
  const std::string spelt = text(given.is_null() ? default_value : given);
  if (long_form)
    if (const auto it = id_long_words.find(spelt); it != id_long_words.end()) return it->second;
  if (const auto it = id_words.find(spelt); it != id_words.end()) return it->second;
  return given.is_null() ? "" : "-" + id_prefix + spelt;
}

nlohmann::json Setting::id_value(const nlohmann::json& given) const {
  return given.is_null() ? id_absent : experiment_value(given);
}

std::string Setting::experiment_place() const {
  if (!own_key.empty()) return own_key;
  if (part_of == name) return "matrix." + name;
  if (!part_of.empty()) return "matrix." + part_of + "'s " + name;
  if (!no_axis.empty()) return experiment_key();
  return experiment_key() + " (or matrix." + name + ")";
}

const Setting* find_setting(const SettingTable& table, const std::string& name) {
  for (const Setting& s : table)
    if (s.name == name) return &s;
  return nullptr;
}

const Setting* find_setting_by_flag(const SettingTable& table, const std::string& flag) {
  for (const Setting& s : table)
    if (s.flag == flag) return &s;
  return nullptr;
}

std::string default_flag(const std::string& name) {
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

Setting number_setting(std::string name, double def, std::string help, double min, double max, bool min_open) {
  Setting s;
  s.flag = default_flag(name);
  s.name = std::move(name);
  s.type = SettingType::Number;
  s.default_value = def;
  s.help = std::move(help);
  s.min = min;
  s.max = max;
  s.min_open = min_open;
  return s;
}

Setting integer_setting(std::string name, int64_t def, std::string help, double min, double max) {
  Setting s = number_setting(std::move(name), 0, std::move(help), min, max);
  s.type = SettingType::Integer;
  s.default_value = def;
  return s;
}

Setting choice_setting(std::string name, std::string def, std::string help, std::vector<std::string> choices) {
  Setting s = number_setting(std::move(name), 0, std::move(help), 0, 0);
  s.type = SettingType::Choice;
  s.default_value = std::move(def);
  s.choices = std::move(choices);
  return s;
}

Setting switch_setting(std::string name, bool def, std::string help, std::string flag) {
  Setting s = number_setting(std::move(name), 0, std::move(help), 0, 0);
  s.type = SettingType::Switch;
  s.default_value = def;
  s.flag = std::move(flag);
  return s;
}

Setting text_setting(std::string name, std::string def, std::string help) {
  Setting s = number_setting(std::move(name), 0, std::move(help), 0, 0);
  s.type = SettingType::Text;
  s.default_value = std::move(def);
  return s;
}

}  // namespace cnnscale
