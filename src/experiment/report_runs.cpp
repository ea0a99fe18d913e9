// runs.csv (see report_runs.hpp).
#include "experiment/report_runs.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>

#include "experiment/report_table.hpp"
#include "io/allreduce_results.hpp"
#include "io/calibration_results.hpp"
#include "io/infer_results.hpp"
#include "io/kernel_bench_results.hpp"
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
std::string exact_number_text(double v) { return fmt::format("{}", v); }

// A JSON value as one cell: null empty, a list of plain values joined by "+" (as split_shares is).
std::string cell_text(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return exact_number_text(v.get<double>());
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
      row[name] = exact_number_text(*x);
    else if (const std::string* s = std::get_if<std::string>(&v))
      row[name] = *s;
    else
      row[name] = "";
  }
  return row;
}

// A file's row: the leading columns, the file's fields as written but for those the caller took
// out (lists of objects go to the rows below or stay in their files), and its provenance in
// provenance's CSV form.
Row file_row(const char* product, const std::string& results_dir, const fs::path& path, const std::string& experiment,
             const std::string& run_id, json j, const Figure<Provenance>& provenance) {
  j.erase("format");
  j.erase("provenance");
  Row row = {{"product", product}, {"experiment", experiment}, {"run_id", run_id}, {"path", relative(path, results_dir)}};
  put_fields(j, "", row);
  if (provenance.has_value())
    for (const auto& [name, value] : provenance_columns(provenance.value())) row["provenance." + name] = value;
  return row;
}

// `row` once per entry of `list` (the file's list `key`), with the entry's fields as <key>.<field>;
// `row` alone where the list is empty.
std::vector<Row> rows_per_entry(const Row& row, const json& list, const std::string& key) {
  if (list.empty()) return {row};
  std::vector<Row> rows;
  for (const json& entry : list) {
    Row with_entry = row;
    put_fields(entry, key + ".", with_entry);
    rows.push_back(std::move(with_entry));
  }
  return rows;
}

// The list `key` of `j`, taken out of it (an empty list where it has none).
json take_list(json& j, const std::string& key) {
  json list = j.contains(key) ? std::move(j[key]) : json::array();
  j.erase(key);
  return list;
}

// One row per offline batch size: the file's fields and the batch's as batches.<field>.
std::vector<Row> inference_rows(const std::string& results_dir, const InferFile& f) {
  json j = infer_result_json(f.result);
  const json batches = take_list(j, "batches");
  const Row row = file_row("inference", results_dir, f.path,
                           fs::path(f.path).parent_path().parent_path().filename().string(),
                           f.result.run_id.value_or(fs::path(f.path).stem().string()), std::move(j),
                           f.result.provenance);
  return rows_per_entry(row, batches, "batches");
}

// One row per message size: the file's fields and the size's as rows.<field>.
std::vector<Row> allreduce_rows(const std::string& results_dir, const AllreduceBenchFile& f) {
  // A result folder's summary.json is named by its folder; an older file by its own name.
  const fs::path p(f.path);
  const bool folder = p.filename() == "summary.json";
  const fs::path named = folder ? p.parent_path() : p;
  json j = allreduce_result_json(f.result);
  const json sizes = take_list(j, "rows");
  const Row row = file_row("allreduce", results_dir, folder ? named : p,
                           named.parent_path().parent_path().filename().string(), named.stem().string(), std::move(j),
                           f.result.provenance);
  return rows_per_entry(row, sizes, "rows");
}

// One row per benchmark run: its settings and peak; the figures of each variant stay in the
// folder's cases.csv beside it.
Row kernel_row(const std::string& results_dir, const KernelBenchFile& f) {
  const fs::path folder = fs::path(f.path).parent_path();
  return file_row("kernels", results_dir, folder, folder.parent_path().parent_path().filename().string(),
                  folder.filename().string(), kernel_bench_result_json(f.s), f.s.provenance);
}

// One row per calibration: its settings and accuracy (accuracy.<field>); the layers' scales stay
// in the file.
Row calibration_row(const std::string& results_dir, const CalibrationFile& f) {
  const fs::path p(f.path);
  return file_row("calibration", results_dir, p, p.parent_path().parent_path().filename().string(), p.stem().string(),
                  calibration_result_json(f.result), f.result.provenance);
}

// One row per kernel profile: its settings and step figures; its kernels, owners and groups stay in
// the folder's CSVs beside it.
Row kernel_profile_row(const std::string& results_dir, const KernelProfileFile& f) {
  const fs::path folder = fs::path(f.path).parent_path();
  return file_row("kernel_profile", results_dir, folder, folder.parent_path().parent_path().filename().string(),
                  folder.filename().string(), kernel_profile_result_json(f.s), f.s.provenance);
}

}  // namespace

std::string runs_csv(const std::string& results_dir, const std::vector<RunRecord>& runs,
                     const std::vector<InferFile>& inferences, const std::vector<AllreduceBenchFile>& allreduces,
                     const std::vector<KernelBenchFile>& kernels, const std::vector<CalibrationFile>& calibrations,
                     const std::vector<KernelProfileFile>& profiles) {
  std::vector<Row> rows;
  for (const RunRecord& r : runs) rows.push_back(training_row(results_dir, r));
  for (const InferFile& f : inferences)
    for (Row& row : inference_rows(results_dir, f)) rows.push_back(std::move(row));
  for (const AllreduceBenchFile& f : allreduces)
    for (Row& row : allreduce_rows(results_dir, f)) rows.push_back(std::move(row));
  for (const KernelBenchFile& f : kernels) rows.push_back(kernel_row(results_dir, f));
  for (const CalibrationFile& f : calibrations) rows.push_back(calibration_row(results_dir, f));
  for (const KernelProfileFile& f : profiles) rows.push_back(kernel_profile_row(results_dir, f));
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
