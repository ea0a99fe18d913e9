// A settings table's entries bound to their fields (setting_fields.hpp).
#include "experiment/setting_fields.hpp"

#include <type_traits>

#include "core/error.hpp"

namespace cnnscale {

void set_field(const SettingField& field, const nlohmann::json& value) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        *p = value.get<T>();
      },
      field);
}

nlohmann::json field_value(const SettingField& field) {
  return std::visit([](auto* p) { return nlohmann::json(*p); }, field);
}

FieldOf fields_by_name(SettingFields fields) {
  return [fields = std::move(fields)](const Setting& s) {
    const auto it = fields.find(s.name);
    if (it == fields.end()) throw_runtime("setting '{}' ({}) has no field in the command's arguments", s.name, s.flag);
    return it->second;
  };
}

nlohmann::json table_values(const SettingTable& table, const FieldOf& field_of) {
  nlohmann::json values = nlohmann::json::object();
  for (const Setting& s : table) values[s.name] = field_value(field_of(s));
  return values;
}

SettingValues setting_values(const SettingTable& table, SettingFields fields) {
  return SettingValues{table_values(table, fields_by_name(std::move(fields)))};
}

}  // namespace cnnscale
