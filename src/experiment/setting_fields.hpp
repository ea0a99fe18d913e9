// A settings table's entries bound to the fields that hold their values (a command's arguments): the
// field of an entry, the value it holds as the table and the recorded configuration write it, and every
// entry's value as a command's result records it. No command line here: app/setting_options.hpp makes
// each entry's option from the same binding. Here, below the commands, so that what a run records
// (train's describe_run) reads its settings as the command line set them.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "experiment/settings_table.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

// Where an entry's value lives: a field of the command's own arguments.
using SettingField = std::variant<bool*, int*, int64_t*, uint64_t*, double*, std::string*, std::vector<double>*,
                                  std::vector<int64_t>*, std::vector<int>*, std::vector<std::string>*>;
using FieldOf = std::function<SettingField(const Setting&)>;

// The value a field holds, as the table and the recorded configuration write it.
nlohmann::json field_value(const SettingField& field);
// Writes `value` (as the table writes one: an entry's default) into the field.
void set_field(const SettingField& field, const nlohmann::json& value);

// A command's fields by setting name (infer_fields, ...) as a FieldOf; an entry without a field is a
// mistake of the program, thrown as the options are made.
using SettingFields = std::map<std::string, SettingField>;
FieldOf fields_by_name(SettingFields fields);
// Every entry's value, {name: value}: the settings a command ran with, as its result records them.
nlohmann::json table_values(const SettingTable& table, const FieldOf& field_of);
// table_values of a command's fields, as its result's "settings" (io/setting_values.hpp).
SettingValues setting_values(const SettingTable& table, SettingFields fields);

}  // namespace cnnscale
