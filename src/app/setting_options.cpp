// A settings table's options (setting_options.hpp).
#include "app/setting_options.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <type_traits>

#include "app/count_option.hpp"
#include "core/error.hpp"

namespace cnnscale::app {

namespace {

// The entry's range, the one the experiment schema checks (Setting::range_error), for an entry whose
// code checks its value again later, with words of its own, within that range.
CLI::Validator in_range(const Setting& s) {
  return CLI::Validator(
      [range = s](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return {};  // not a number: CLI11's conversion says so
        return range.range_error(value);
      },
      "");
}

}  // namespace

void add_table_options(CLI::App& cmd, const SettingTable& table, const FieldOf& field_of) {
  for (const Setting& s : table) {
    const SettingField field = field_of(s);
    set_field(field, s.default_value);
    if (s.type == SettingType::Switch) {
      // The flag sets the value that is not the default (--no-graph: false).
      bool* p = std::get<bool*>(field);
      const bool given = !s.default_value.get<bool>();
      CLI::Option* flag = cmd.add_flag_callback(s.flag, [p, given] { *p = given; }, s.help);
      if (!s.group.empty()) flag->group(s.group);
      continue;
    }
    if (s.type == SettingType::Boolean) {
      bool* p = std::get<bool*>(field);
      CLI::Option* option =
          cmd.add_option_function<std::string>(s.flag, [p](const std::string& v) { *p = v == "true"; }, s.help)
              ->check(CLI::IsMember({"true", "false"}))
              ->default_str(s.text(s.default_value));
      if (!s.group.empty()) option->group(s.group);
      if (!s.false_flag.empty()) {
        CLI::Option* off = cmd.add_flag_callback(s.false_flag, [p] { *p = false; }, "Short for " + s.flag + " false");
        off->excludes(option);
        if (!s.group.empty()) off->group(s.group);
      }
      continue;
    }
    CLI::Option* option = std::visit(
        [&](auto* p) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            throw_runtime("setting '{}': a bool field for a setting that is no Switch or Boolean", s.name);
          else
            return cmd.add_option(s.flag, *p, s.help_text());
        },
        field);
    if (!s.group.empty()) option->group(s.group);
    if (s.type == SettingType::NumberList || s.type == SettingType::IntegerList || s.type == SettingType::TextList) {
      option->delimiter(',');
      if (s.default_value.empty()) continue;  // no default to show: none
    }
    if (s.type == SettingType::Choice) option->check(CLI::IsMember(s.choices));
    if (s.cli_check == CliCheck::AtLeast) option->check(at_least(static_cast<long long>(s.min)));
    if (s.cli_check == CliCheck::AtLeast && s.max < kUnbounded) option->check(in_range(s));  // its upper bound
    if (s.cli_check == CliCheck::Range && s.type == SettingType::Integer)
      option->check(CLI::Range(static_cast<int64_t>(s.min), static_cast<int64_t>(s.max)));
    else if (s.cli_check == CliCheck::Range && s.min_open && s.min == 0)
      option->check(CLI::PositiveNumber)->check(CLI::Range(s.min, s.max));
    else if (s.cli_check == CliCheck::Range)
      option->check(CLI::Range(s.min, s.max));
    else if (s.cli_check == CliCheck::Later && (s.type == SettingType::Integer || s.type == SettingType::Number))
      option->check(in_range(s));
    // A default outside the range a value may take stands for "not given" (the device's own, the rank's
    // batch): not shown.
    const bool checked = s.cli_check == CliCheck::Range || s.cli_check == CliCheck::AtLeast;
    const bool above =
        s.cli_check == CliCheck::Range && s.default_value.is_number() && s.default_value.get<double>() > s.max;
    if (checked && s.default_value.is_number() && (s.default_value.get<double>() < s.min || above)) continue;
    option->capture_default_str();
  }
}

}  // namespace cnnscale::app
