// A settings table (experiment/settings_table.hpp) on a command's command line: each entry's option
// (flag, help, default, checks) bound to the field that holds its value, and the value read back
// from that field (for the recorded configuration). A command binds its table by naming, for each
// entry, its field (train: train_setting_options.cpp).
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

namespace CLI {
class App;
}

namespace cnnscale::app {

// Where an entry's value lives: a field of the command's own arguments.
using SettingField = std::variant<bool*, int*, int64_t*, uint64_t*, double*, std::string*, std::vector<double>*,
                                  std::vector<int64_t>*, std::vector<int>*, std::vector<std::string>*>;
using FieldOf = std::function<SettingField(const Setting&)>;

// Each entry of `table` as an option of `cmd` bound to field_of(entry), in table order; the table's
// default is written into the field first, so that the table is where a default is written.
void add_table_options(CLI::App& cmd, const SettingTable& table, const FieldOf& field_of);
// The value a field holds, as the table and the recorded configuration write it.
nlohmann::json field_value(const SettingField& field);

// A command's fields by setting name (infer_fields, ...) as a FieldOf; an entry without a field is a
// mistake of the program, thrown as the options are made.
using SettingFields = std::map<std::string, SettingField>;
FieldOf fields_by_name(SettingFields fields);
// Every entry's value, {name: value}: the settings a command ran with, as its result records them.
nlohmann::json table_values(const SettingTable& table, const FieldOf& field_of);
// table_values of a command's fields, as its result's "settings" (io/setting_values.hpp).
SettingValues setting_values(const SettingTable& table, SettingFields fields);

}  // namespace cnnscale::app
