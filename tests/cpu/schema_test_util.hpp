// For the result-schema tests: the key paths a written object holds, and the check that a sample
// sets every field of every table of a product (so a round trip covers each).
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "io/provenance.hpp"
#include "io/result_schema.hpp"
#include "io/setting_values.hpp"

namespace cnnscale::testing {

// "a", "a.b", "list[].c", ...: every key path of `j`.
inline void collect_names(const nlohmann::json& j, const std::string& prefix, std::set<std::string>& out) {
  for (const auto& [key, value] : j.items()) {
    out.insert(prefix + key);
    if (value.is_object()) collect_names(value, prefix + key + ".", out);
    if (value.is_array())
      for (const nlohmann::json& e : value)
        if (e.is_object()) collect_names(e, prefix + key + "[].", out);
  }
}

// Every field of every table of `product` (named `top` at the top) is in `written`.
inline void expect_every_field(const nlohmann::json& written, const std::string& product, const std::string& top) {
  std::set<std::string> names;
  collect_names(written, "", names);
  for (const SchemaTable& t : result_schema_tables()) {
    if (t.product != product) continue;
    const std::string prefix = t.name == top ? "" : t.name.substr(top.size() + 1) + ".";
    for (const FieldInfo& f : t.fields) EXPECT_TRUE(names.count(prefix + std::string(f.name))) << prefix << f.name;
  }
}

// A provenance with every field set, for the products' round trips.
inline Provenance sample_provenance(const std::string& command) {
  Provenance p;
  p.version = "0.1.0";
  p.git_describe = "v0.1-3-gabc";
  p.command_line = {"cnnscale", command, "--device", "cpu"};
  p.start_time = "2026-12-06T09:00:00Z";
  p.end_time = "2026-12-06T09:01:00Z";
  p.hosts = {"node-a"};
  return p;
}

// Settings of every type a table declares: a count, a number, a text, a flag and lists.
inline SettingValues sample_settings() {
  return SettingValues{{{"batch", 64},
                        {"seconds", 0.25},
                        {"device", "cpu"},
                        {"check", true},
                        {"threads", {1, 2, 4}},
                        {"pass", {"fwd", "bwd_data"}},
                        {"shape", nlohmann::json::array()}}};
}

}  // namespace cnnscale::testing
