// Helpers for the report tests: synthetic runs written with write_run_results, and a CSV reader
// (RFC 4180 quoting) that turns a report table back into rows keyed by column name.
#pragma once
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/results_writer.hpp"

namespace cnnscale::testing {

using CsvRow = std::map<std::string, std::string>;

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Splits CSV text into records of fields, honouring double-quoted fields.
inline std::vector<std::vector<std::string>> csv_records(const std::string& text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        field += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field), field.clear();
    } else if (c == '\n') {
      fields.push_back(field), field.clear();
      records.push_back(fields), fields.clear();
      any = false;
      continue;
    } else {
      field += c;
    }
    any = true;
  }
  if (any) fields.push_back(field), records.push_back(fields);
  return records;
}

inline std::vector<CsvRow> read_csv(const std::string& path) {
  auto records = csv_records(slurp(path));
  std::vector<CsvRow> rows;
  if (records.empty()) return rows;
  for (size_t r = 1; r < records.size(); ++r) {
    CsvRow row;
    for (size_t c = 0; c < records[0].size() && c < records[r].size(); ++c) row[records[0][c]] = records[r][c];
    rows.push_back(row);
  }
  return rows;
}

// A run with every identity key set (CPU, synthetic, steady) plus `figures`.
inline RunResults synthetic_run(const std::string& net, int batch, int world_size, int repeat,
                                const std::map<std::string, SummaryValue>& figures) {
  RunResults r;
  r.experiment = "e";
  r.run_id = fmt::format("{}-b{}-n{}-r{}", net, batch, world_size, repeat);
  r.config_text = "net: " + net + "\n";
  r.system.hosts = {"host-a"};
  r.timeline = Timeline(world_size);
  r.summary = {{"net", net},
               {"data", std::string("synthetic")},
               {"device", std::string("cpu")},
               {"precision", std::string("fp32")},
               {"measure", std::string("steady")},
               {"world_size", double(world_size)},
               {"global_batch", double(batch)},
               {"seed", 1.0},
               {"iterations", 10.0},
               {"allreduce_overlap", 1.0},
               {"allreduce_algo", std::string("ring")},
               {"gpu_names", std::string("")},
               {"tag.repeat", std::to_string(repeat)}};
  for (const auto& [k, v] : figures) r.summary[k] = v;
  return r;
}

inline std::string write_run(const std::string& root, const RunResults& r) {
  ResultsWriteOptions o;
  o.root = root;
  return write_run_results(r, o);
}

}  // namespace cnnscale::testing
