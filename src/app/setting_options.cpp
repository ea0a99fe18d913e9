// A settings table's options (setting_options.hpp).
#include "app/setting_options.hpp"

#include <CLI/CLI.hpp>
#include <type_traits>

#include "app/count_option.hpp"
#include "core/error.hpp"

namespace cnnscale::app {

namespace {

void set_default(const SettingField& field, const nlohmann::json& value) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        *p = value.get<T>();
      },
      field);
}

}  // namespace

void add_table_options(CLI::App& cmd, const SettingTable& table, const FieldOf& field_of) {
  for (const Setting& s : table) {
    const SettingField field = field_of(s);
    set_default(field, s.default_value);
    if (s.type == SettingType::Switch) {
      // The flag sets the value that is not the default (--no-graph: false).
      bool* p = std::get<bool*>(field);
      const bool given = !s.default_value.get<bool>();
      CLI::Option* flag = cmd.add_flag_callback(s.flag, [p, given] { *p = given; }, s.help);
      if (!s.group.empty()) flag->group(s.group);
      continue;
    }
    CLI::Option* option = std::visit(
        [&](auto* p) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            throw_runtime("setting '{}': a bool field for a setting that is no Switch", s.name);
          else
            return cmd.add_option(s.flag, *p, s.help);
        },
        field);
    if (!s.group.empty()) option->group(s.group);
    if (s.type == SettingType::NumberList || s.type == SettingType::IntegerList) {
      option->delimiter(',');
      if (s.default_value.empty()) continue;  // no default to show: none
    }
    if (s.type == SettingType::Choice) option->check(CLI::IsMember(s.choices));
    if (s.cli_check == CliCheck::AtLeast) option->check(at_least(static_cast<long long>(s.min)));
    if (s.cli_check == CliCheck::Range && s.type == SettingType::Integer)
      option->check(CLI::Range(static_cast<int64_t>(s.min), static_cast<int64_t>(s.max)));
    else if (s.cli_check == CliCheck::Range)
      option->check(CLI::Range(s.min, s.max));
    option->capture_default_str();
  }
}

nlohmann::json field_value(const SettingField& field) {
  return std::visit([](auto* p) { return nlohmann::json(*p); }, field);
}

}  // namespace cnnscale::app
