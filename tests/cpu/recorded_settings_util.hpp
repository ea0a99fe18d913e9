// For the tests that a command's result records every setting of its table (experiment/
// command_settings.hpp) and where it came from: each entry's value found in the written "settings",
// and the provenance of the command line the test ran.
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiment/settings_table.hpp"

namespace cnnscale::testing {

// `settings` holds every entry of `table` and nothing else, each with its value: `given`'s where the
// test gave one ({name: value as the table types it}), the table's default otherwise.
inline void expect_settings_recorded(const SettingTable& table, const nlohmann::json& settings,
                                     const nlohmann::json& given) {
  ASSERT_TRUE(settings.is_object()) << settings.dump();
  EXPECT_EQ(settings.size(), table.size()) << settings.dump();
  for (const auto& [name, value] : given.items())
    EXPECT_NE(find_setting(table, name), nullptr) << "the test gives '" << name << "', which the table lacks";
  for (const Setting& s : table) {
    ASSERT_TRUE(settings.contains(s.name)) << s.name << " is not recorded: " << settings.dump();
    const nlohmann::json& want = given.contains(s.name) ? given[s.name] : s.default_value;
    EXPECT_EQ(settings[s.name], want) << s.name;
  }
}

// A provenance object of the run of `cnnscale args...` on this host.
inline void expect_provenance_of(const nlohmann::json& p, const std::vector<std::string>& args) {
  ASSERT_TRUE(p.is_object()) << p.dump();
  EXPECT_FALSE(p.at("version").get<std::string>().empty());
  const std::vector<std::string> words = p.at("command_line").get<std::vector<std::string>>();
  ASSERT_EQ(words.size(), args.size() + 1) << p.dump();
  EXPECT_EQ(std::vector<std::string>(words.begin() + 1, words.end()), args);
  const std::string start = p.at("start_time"), end = p.at("end_time");
  EXPECT_EQ(start.size(), 20u) << start;  // 2026-12-06T09:13:06Z
  EXPECT_LE(start, end);
  EXPECT_EQ(p.at("hosts").size(), 1u);
}

}  // namespace cnnscale::testing
