// The settings a command ran with, as a field of its result schema: the "settings" object, one key
// per entry of the command's settings table (experiment/settings_table.hpp; app's table_values makes
// it) with the value it had, typed as the table declares it (a number, a text, true or false, or a
// list of those). io/ holds the values only: which names a command has is its table's business, one
// layer up, so the schema checks the form (an object of such values) and the README documents the
// object with a pointer to each command's --help. Absent from files written before it was recorded.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/result_schema.hpp"

namespace cnnscale {

struct SettingValues {
  nlohmann::json values = nlohmann::json::object();  // {name: value}
  bool operator==(const SettingValues&) const = default;
};

namespace schema_detail {

// Each value is a scalar or a list of scalars; anything else is named by its key path.
template <>
struct Codec<SettingValues> {
  static constexpr FieldType type = FieldType::Object;
  static nlohmann::json to(const SettingValues& v) { return v.values; }
  static SettingValues from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    if (!j.is_object()) wrong_type(file, path, "an object");
    for (const auto& [name, value] : j.items()) {
      const std::string at = child(path, name);
      if (value.is_object()) wrong_type(file, at, "a setting's value (a number, text, flag or list)");
      if (value.is_array())
        for (size_t i = 0; i < value.size(); ++i)
          if (value[i].is_object() || value[i].is_array())
            wrong_type(file, at + "[" + std::to_string(i) + "]", "a number, text or flag");
    }
    return SettingValues{j};
  }
};

}  // namespace schema_detail

}  // namespace cnnscale
