// runs.csv (see report_runs.hpp).
#include "experiment/report_runs.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>

#include "experiment/report_table.hpp"
#include "io/infer_results.hpp"
#include "io/provenance.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale::report {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Row = std::map<std::string, std::string>;

// Columns every row has, in this order.
const std::vector<std::string> kLeading = {"product", "experiment", "run_id", "path"};

// Numbers in the shortest form that reads back exactly (NaN: nan), as summary.csv writes them.
std::string number_text(double v) { return fmt::format("{}", v); }

// A JSON value as one cell: null empty, a list of plain values joined by "+" (as split_shares is).
std::string cell_text(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return number_text(v.get<double>());
  std::string out;
  for (const json& e : v) {
    if (!out.empty()) out += '+';
    out += cell_text(e);
  }
  return out;
}

// `j`'s fields as columns `prefix<name>`, an object's as `prefix<name>.<field>`; lists of objects
// (per-rank figures, server-search trials, the batch sizes) are left to their files.
void put_fields(const json& j, const std::string& prefix, Row& row) {
  for (const auto& [key, v] : j.items()) {
    if (v.is_object()) {
      put_fields(v, prefix + key + ".", row);
    } else if (v.is_array() && !v.empty() && v.front().is_object()) {
      continue;
    } else {
      row[prefix + key] = cell_text(v);
    }
  }
}

std::string relative(const fs::path& p, const std::string& root) { return p.lexically_relative(root).string(); }

Row training_row(const std::string& results_dir, const RunRecord& r) {
  Row row = {{"product", "training"},
             {"experiment", fs::path(r.folder).parent_path().filename().string()},
             {"run_id", r.run_id},
             {"path", relative(r.folder, results_dir)}};
  // The recorded settings (the `run:` line of /config/text, as the report's grouping reads them);
  // runs whose text lacks it have no config.* cells.
  if (r.run_config.is_object()) put_fields(r.run_config, "config.", row);
  if (r.provenance.has_value())
    for (const auto& [name, value] : provenance_columns(r.provenance.value())) row["provenance." + name] = value;
  for (const auto& [name, v] : summary_values(r.summary)) {
    if (const double* x = std::get_if<double>(&v))
      row[name] = number_text(*x);
    else if (const std::string* s = std::get_if<std::string>(&v))
      row[name] = *s;
    else
      row[name] = "";
  }
  return row;
}

std::vector<Row> inference_rows(const std::string& results_dir, const InferFile& f) {
  json j = infer_result_json(f.result);
  const json batches = j.contains("batches") ? j["batches"] : json::array();
  j.erase("batches");
  j.erase("format");
  j.erase("provenance");  // in provenance's own CSV form (io/provenance.hpp) below
  Row row = {{"product", "inference"},
             {"experiment", fs::path(f.path).parent_path().parent_path().filename().string()},
             {"run_id", f.result.run_id.value_or(fs::path(f.path).stem().string())},
             {"path", relative(f.path, results_dir)}};
  put_fields(j, "", row);
  if (f.result.provenance.has_value())
    for (const auto& [name, value] : provenance_columns(f.result.provenance.value())) row["provenance." + name] = value;
  if (batches.empty()) return {row};
  std::vector<Row> rows;
  for (const json& b : batches) {
    Row with_batch = row;
    put_fields(b, "batches.", with_batch);
    rows.push_back(std::move(with_batch));
  }
  return rows;
}

}  // namespace

std::string runs_csv(const std::string& results_dir, const std::vector<RunRecord>& runs,
                     const std::vector<InferFile>& inferences) {
  std::vector<Row> rows;
  for (const RunRecord& r : runs) rows.push_back(training_row(results_dir, r));
  for (const InferFile& f : inferences)
    for (Row& row : inference_rows(results_dir, f)) rows.push_back(std::move(row));
  std::set<std::string> config, others;
  for (const Row& row : rows)
    for (const auto& [name, value] : row)
      if (std::find(kLeading.begin(), kLeading.end(), name) == kLeading.end())
        (name.starts_with("config.") ? config : others).insert(name);
  std::vector<std::string> columns = kLeading;
  columns.insert(columns.end(), config.begin(), config.end());
  columns.insert(columns.end(), others.begin(), others.end());
  auto line = [](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i) s += ',';
      s += csv_field(cells[i]);
    }
    return s + "\n";
  };
  std::string out = line(columns);
  for (const Row& row : rows) {
    std::vector<std::string> cells;
    for (const std::string& c : columns) {
      const auto it = row.find(c);
      cells.push_back(it == row.end() ? "" : it->second);
    }
    out += line(cells);
  }
  return out;
}

}  // namespace cnnscale::report
