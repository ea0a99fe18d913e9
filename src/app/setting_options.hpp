// A settings table (experiment/settings_table.hpp) on a command's command line: each entry's option
// (flag, help, default, checks) bound to the field that holds its value (experiment/setting_fields.hpp,
// which also reads the value back for the recorded configuration). A command binds its table by
// naming, for each entry, its field (train: experiment/train_setting_fields.cpp).
#pragma once
#include "experiment/setting_fields.hpp"
#include "experiment/settings_table.hpp"

namespace CLI {
class App;
}

namespace cnnscale::app {

// Each entry of `table` as an option of `cmd` bound to field_of(entry), in table order; the table's
// default is written into the field first, so that the table is where a default is written.
void add_table_options(CLI::App& cmd, const SettingTable& table, const FieldOf& field_of);

}  // namespace cnnscale::app
