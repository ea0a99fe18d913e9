// A benchmark's result folder, shared by the kernel benches and bench allreduce.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cnnscale {

// PARENT/<stem> (-1, -2, ... when taken): summary.json (`j`), cases.csv and cases.h5 (the `columns`
// of j["rows"], one row / dataset entry per case; the summary's text and number attributes on the
// HDF5 root), written under a hidden temporary name and renamed when complete; returns its path.
std::string write_bench_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                               const std::vector<std::string>& columns, const std::vector<std::string>& text_attributes,
                               const std::vector<std::string>& number_attributes);

}  // namespace cnnscale
