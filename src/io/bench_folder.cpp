// A result folder of tables (see bench_folder.hpp).
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

// The rows of `table` in `j` (none where the summary lacks the list).
const nlohmann::json& rows_of(const nlohmann::json& j, const FolderTable& table) {
  static const nlohmann::json none = nlohmann::json::array();
  const auto it = j.find(table.list_key);
  return it != j.end() && it->is_array() ? *it : none;
}

std::string table_csv(const nlohmann::json& rows, const std::vector<std::string>& columns) {
  std::string csv;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (c) csv += ',';
    csv += columns[c];
  }
  csv += "\n";
  for (const nlohmann::json& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = row.find(columns[c]);
      std::string v;
      if (it != row.end() && !it->is_null()) v = it->is_string() ? it->get<std::string>() : it->dump();
      if (c) csv += ',';
      csv += csv_field(v);
    }
    csv += "\n";
  }
  return csv;
}

// The columns as datasets of `loc`: numbers as f64 (NaN for null), text and flags as strings.
void table_datasets(h5::Writer& w, hid_t loc, const nlohmann::json& rows, const std::vector<std::string>& columns) {
  for (const std::string& col : columns) {
    bool numeric = true;
    for (const nlohmann::json& row : rows) {
      const auto it = row.find(col);
      if (it != row.end() && !it->is_null() && !it->is_number()) numeric = false;
    }
    if (numeric) {
      std::vector<double> v;
      for (const nlohmann::json& row : rows) {
        const auto it = row.find(col);
        v.push_back(it != row.end() && it->is_number() ? it->get<double>() : std::nan(""));
      }
      w.f64(loc, col, v);
    } else {
      std::vector<std::string> v;
      for (const nlohmann::json& row : rows) {
        const auto it = row.find(col);
        v.push_back(it == row.end() || it->is_null() ? "" : it->is_string() ? it->get<std::string>() : it->dump());
      }
      w.strings(loc, col, v);
    }
  }
}

}  // namespace

std::string write_result_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                                const std::vector<FolderTable>& tables, const std::string& h5_file,
                                const std::vector<std::string>& text_attributes,
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
  for (const FolderTable& t : tables)
    write_synced_file((tmp / t.csv_file).string(), table_csv(rows_of(j, t), t.columns));
  {
    h5::Writer w((tmp / h5_file).string(), "results file");
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
    for (const FolderTable& t : tables) {
      if (t.h5_group.empty()) {
        table_datasets(w, w.root(), rows_of(j, t), t.columns);
      } else {
        const h5::Handle g = w.group(t.h5_group);
        table_datasets(w, g.get(), rows_of(j, t), t.columns);
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

std::string write_bench_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                               const std::vector<std::string>& columns, const std::vector<std::string>& text_attributes,
                               const std::vector<std::string>& number_attributes) {
  return write_result_folder(parent_dir, stem, j, {{"rows", "cases.csv", "", columns}}, "cases.h5", text_attributes,
                             number_attributes);
}

}  // namespace cnnscale
