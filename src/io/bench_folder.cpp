// A benchmark's result folder (see bench_folder.hpp).
#include "io/bench_folder.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.hpp"
#include "core/hdf5_file.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale {

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string write_bench_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                               const std::vector<std::string>& columns, const std::vector<std::string>& text_attributes,
                               const std::vector<std::string>& number_attributes) {
  namespace fs = std::filesystem;
  const fs::path parent(parent_dir);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw_runtime("{}: cannot create the results folder ({})", parent.string(), ec.message());
  fs::path final_dir = parent / stem;
  for (int i = 1; fs::exists(final_dir, ec); ++i) final_dir = parent / fmt::format("{}-{}", stem, i);
  // The process id keeps two runs that pick the same name in one second off each other's folder.
  const fs::path tmp = parent / fmt::format(".tmp-{}-{}", final_dir.filename().string(), ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw_runtime("{}: cannot create ({})", tmp.string(), ec.message());
  // Nothing half-written stays behind: the temporary folder goes with any error below.
  struct RemoveOnError {
    const fs::path& dir;
    bool done = false;
    ~RemoveOnError() {
      std::error_code ignored;
      if (!done) fs::remove_all(dir, ignored);
    }
  } cleanup{tmp};
  write_synced_file((tmp / "summary.json").string(), j.dump(2) + "\n");
  // cases.csv: one row per case, the JSON rows' scalar fields in the order given.
  std::string csv;
  for (size_t c = 0; c < columns.size(); ++c) csv += (c ? "," : "") + columns[c];
  csv += "\n";
  for (const nlohmann::json& row : j["rows"]) {
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = row.find(columns[c]);
      std::string v;
      if (it != row.end() && !it->is_null()) v = it->is_string() ? it->get<std::string>() : it->dump();
      csv += (c ? "," : "") + csv_field(v);
    }
    csv += "\n";
  }
  write_synced_file((tmp / "cases.csv").string(), csv);
  // cases.h5: the same columns, one dataset each (numbers as f64, text and flags as strings), and
  // the summary's scalar fields named in `attributes` on the root.
  {
    h5::Writer w((tmp / "cases.h5").string(), "results file");
    // A missing or null value keeps its attribute's type (a text or a number that is absent).
    for (const std::string& key : text_attributes) {
      const auto it = j.find(key);
      w.attr_str(w.root(), key,
                 it != j.end() && it->is_string() ? std::optional<std::string>(it->get<std::string>()) : std::nullopt);
    }
    for (const std::string& key : number_attributes) {
      const auto it = j.find(key);
      w.attr_value(w.root(), key, it != j.end() && it->is_number() ? h5::Value{it->get<double>()} : h5::Value{});
    }
    for (const std::string& col : columns) {
      bool numeric = true;
      for (const nlohmann::json& row : j["rows"]) {
        const auto it = row.find(col);
        if (it != row.end() && !it->is_null() && !it->is_number()) numeric = false;
      }
      if (numeric) {
        std::vector<double> v;
        for (const nlohmann::json& row : j["rows"]) {
          const auto it = row.find(col);
          v.push_back(it != row.end() && it->is_number() ? it->get<double>() : std::nan(""));
        }
        w.f64(w.root(), col, v);
      } else {
        std::vector<std::string> v;
        for (const nlohmann::json& row : j["rows"]) {
          const auto it = row.find(col);
          v.push_back(it == row.end() || it->is_null() ? "" : it->is_string() ? it->get<std::string>() : it->dump());
        }
        w.strings(w.root(), col, v);
      }
    }
    w.close();
  }
  fsync_dir(tmp.string());
  fs::rename(tmp, final_dir, ec);
  if (ec) throw_runtime("{}: cannot publish the results folder ({})", final_dir.string(), ec.message());
  cleanup.done = true;
  fsync_dir(parent.string());
  return final_dir.string();
}

}  // namespace cnnscale
