// Helpers for the report tests: synthetic runs written with write_run_results, a report without
// figures, and a CSV reader (RFC 4180 quoting) that turns a report table back into rows keyed by
// column name.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiment/report.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"

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

// The row of `rows` (a report CSV) for net, GPU count and batch; throws where there is none.
inline const CsvRow& row_of(const std::vector<CsvRow>& rows, const std::string& net, int gpus, int batch) {
  for (const CsvRow& r : rows)
    if (r.at("net") == net && r.at("gpus") == std::to_string(gpus) && r.at("batch") == std::to_string(batch)) return r;
  throw std::runtime_error(fmt::format("no row {} {} {}", net, gpus, batch));
}

// The sample standard deviation (n - 1) of v, as the report computes it.
inline double sample_std(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  double s = 0;
  for (double x : v) s += (x - mean) * (x - mean);
  return std::sqrt(s / (v.size() - 1));
}

// A run with every identity key set (CPU, synthetic, steady) plus `figures`.
inline RunResults synthetic_run(const std::string& net, int batch, int world_size, int repeat,
                                const SummaryValues& figures) {
  RunResults r;
  r.experiment = "e";
  r.run_id = fmt::format("{}-b{}-n{}-r{}", net, batch, world_size, repeat);
  r.config_text = "net: " + net + "\n";
  r.system.hosts = {"host-a"};
  r.timeline = Timeline(world_size);
  SummaryValues values = {{"net", net},
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
  for (const auto& [k, v] : figures) values[k] = v;
  r.summary = run_summary_from_values(values);
  return r;
}

// The same run on GPUs (as far as the report can tell): device gpu, one H100 per rank.
inline RunResults gpu_run(RunResults r) {
  r.summary.device = std::string("gpu");
  std::string names;
  for (int k = 0; k < static_cast<int>(r.summary.world_size.value()); ++k)
    names.append(k ? "," : "").append("NVIDIA H100");
  r.summary.gpu_names = names;
  return r;
}

// A run of a strong-scaling sweep at `gpus` ranks: samples/s growing as gpus^0.9 (and a few % per
// repeat), joules per batch and whole-training EDP that follow from it at 250 W per rank.
inline RunResults scaling_run(const std::string& net, int batch, int gpus, int repeat) {
  const double samples_per_s = 40.0 * batch / net.size() * std::pow(gpus, 0.9) * (1 + 0.03 * repeat);
  const double seconds = batch / samples_per_s, joules = 250.0 * gpus * seconds, whole = 1000;
  return synthetic_run(net, batch, gpus, repeat,
                       {{"seconds_per_batch", seconds},
                        {"samples_per_s", samples_per_s},
                        {"joules_per_batch", joules},
                        {"whole_iterations", whole},
                        {"whole_training_seconds", seconds * whole},
                        {"whole_training_joules", joules * whole},
                        {"edp_training_js", seconds * whole * joules * whole}});
}

// `samples` power samples of one rank's GPU at 10 Hz, around `watts`.
inline PowerSeries power_series(int rank, int samples, double watts) {
  PowerSeries p;
  p.rank = rank;
  for (int i = 0; i < samples; ++i) {
    p.t_s.push_back(0.1 * i);
    p.power_w.push_back(watts + 5 * rank + (i % 7));
    p.avg_power_w.push_back(kMissing);
    p.energy_mj.push_back(kMissing);
    p.sm_clock_mhz.push_back(kMissing);
    p.temperature_c.push_back(kMissing);
  }
  return p;
}

// `cnnscale report ROOT --no-plots`.
inline report::ReportOutcome report_without_plots(const std::string& root) {
  report::ReportOptions o;
  o.results_dir = root;
  o.plots = false;
  return report::write_report(o);
}

// The report of the runs under `root` (without figures), and the Markdown of one of its tables.
inline std::string reported_table_md(const std::string& root, const std::string& table) {
  report_without_plots(root);
  return slurp((std::filesystem::path(root) / "report" / (table + ".md")).string());
}

inline std::string write_run(const std::string& root, const RunResults& r) {
  ResultsWriteOptions o;
  o.root = root;
  return write_run_results(r, o);
}

}  // namespace cnnscale::testing
