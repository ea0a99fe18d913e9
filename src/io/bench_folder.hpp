// A result folder of tables, shared by the kernel benches, bench allreduce and the kernel profiles.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cnnscale {

// PARENT/<stem> (-1, -2, ... when taken): summary.json (`j`), cases.csv and cases.h5 (the `columns`
// of j["rows"], one row / dataset entry per case; the summary's text and number attributes on the
// HDF5 root), written under a hidden temporary name and renamed when complete; returns its path.
// One table of a result folder: the JSON list `list_key` of the summary, as `csv_file` (a line per
// element, the `columns` in order, empty for null) and as datasets of `h5_group` ("" = the root).
struct FolderTable {
  std::string list_key;
  std::string csv_file;
  std::string h5_group;
  std::vector<std::string> columns;
};

// PARENT/<stem> (-1, -2, ... when taken): summary.json (`j`), each table's CSV, and `h5_file` with
// every table's columns (numbers as f64 with NaN for null, other values as strings) and the summary's
// `text_attributes` and `number_attributes` on its root, written under a hidden temporary name and
// renamed when complete; returns its path.
std::string write_result_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                                const std::vector<FolderTable>& tables, const std::string& h5_file,
                                const std::vector<std::string>& text_attributes,
                                const std::vector<std::string>& number_attributes);

std::string write_bench_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                               const std::vector<std::string>& columns, const std::vector<std::string>& text_attributes,
                               const std::vector<std::string>& number_attributes);

}  // namespace cnnscale
