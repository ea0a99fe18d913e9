// Short ways to write an entry of a command's settings table (command_settings.hpp): one call per
// entry with what sets it apart; the flag is "--" and the name with '-' for '_' unless given.
#pragma once
#include <string>
#include <vector>

#include "experiment/settings_table.hpp"

namespace cnnscale::decl {

// The upper bound of a count or length with none of its own.
inline constexpr double kBig = kUnbounded;

inline Setting entry(SettingType type, std::string name, nlohmann::json def, std::string help, std::string flag = "") {
  Setting s;
  s.type = type;
  s.flag = flag.empty() ? default_flag(name) : std::move(flag);
  s.name = std::move(name);
  s.default_value = std::move(def);
  s.help = std::move(help);
  return s;
}

inline Setting text(std::string name, std::string def, std::string help, std::string flag = "") {
  return entry(SettingType::Text, std::move(name), std::move(def), std::move(help), std::move(flag));
}

inline Setting choice(std::string name, std::string def, std::vector<std::string> choices, std::string help,
                      std::string flag = "") {
  Setting s = entry(SettingType::Choice, std::move(name), std::move(def), std::move(help), std::move(flag));
  s.choices = std::move(choices);
  return s;
}

// A whole number in [min, max]; `check`: when the command line checks it (else the code using it).
inline Setting integer(std::string name, int64_t def, std::string help, double min = 0, double max = kBig,
                       CliCheck check = CliCheck::Later, std::string flag = "") {
  Setting s = entry(SettingType::Integer, std::move(name), def, std::move(help), std::move(flag));
  s.min = min;
  s.max = max;
  s.cli_check = check;
  return s;
}

// A real number in [min, max] ((min, max] with min_open).
inline Setting number(std::string name, double def, std::string help, double min = 0, double max = kBig, bool min_open = false,
                      CliCheck check = CliCheck::Later) {
  Setting s = entry(SettingType::Number, std::move(name), def, std::move(help));
  s.min = min;
  s.max = max;
  s.min_open = min_open;
  s.cli_check = check;
  return s;
}

// A switch: its flag alone gives the value that is not `def` (--no-fold: fold false).
inline Setting flag(std::string name, bool def, std::string help, std::string flag = "") {
  return entry(SettingType::Switch, std::move(name), def, std::move(help), std::move(flag));
}

inline Setting list(SettingType type, std::string name, nlohmann::json def, std::string help, std::string flag = "") {
  return entry(type, std::move(name), def.is_null() ? nlohmann::json::array() : std::move(def), std::move(help),
               std::move(flag));
}

inline Setting with_unit(Setting s, std::string unit) {
  s.unit = std::move(unit);
  return s;
}

// Appends entries to a table, each listed in --help under its group (option_groups.hpp):
// `const GroupedAdd add{all}; add(kBenchTiming, integer(...));`.
struct GroupedAdd {
  SettingTable& table;
  void operator()(const char* group, Setting s) const {
    s.group = group;
    table.push_back(std::move(s));
  }
};

}  // namespace cnnscale::decl
