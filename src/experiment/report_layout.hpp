// What the report's tables share (report_tables.cpp, report_scaling.cpp): the leading columns of
// every table, figures derived per run and averaged per configuration, column kinds, and the notes
// under a table whose figures are all null.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "experiment/report_data.hpp"
#include "experiment/report_table.hpp"

namespace cnnscale::report {

// A figure derived per run (a unit change, a product of figures): averaged per group afterwards, so
// its std is the spread over repeats.
using RunFigure = std::function<double(const RunRecord&)>;
Stat stat_by(const ConfigGroup& g, const RunFigure& f);
RunFigure scaled(NumberFigure RunSummary::*figure, double scale);

bool any_threads(const std::vector<ConfigGroup>& groups);

// The leading columns every table has: network, ranks or GPUs, BLAS threads per rank (CPU runs that
// recorded it), global batch, variant (if any), runs. The CSV keeps the name "gpus" for the count.
struct Layout {
  const std::vector<ConfigGroup>& groups;
  VaryingKeys varying = varying_keys(groups);
  DeviceNoun noun = device_noun(groups);
  bool threads = any_threads(groups);

  Table start(std::string name, std::string title, std::string caption) const;
  std::vector<Cell> row(const ConfigGroup& g) const;
};

Column seconds(std::string header, std::string csv, double si = 1);
Column joules(std::string header, std::string csv, double si = 1);

// Whether any group has a value for the figure: optional columns are shown only then.
bool any_value(const std::vector<ConfigGroup>& groups, NumberFigure RunSummary::*figure);
bool all_cpu(const std::vector<ConfigGroup>& groups);
// The note under a table without a single value: the runs' own "unavailable: ..." method of the
// figure named `method_key` if one says why, else `fallback`.
void note_if_all_null(Table& t, const std::vector<ConfigGroup>& groups, const std::string& method_key,
                      const std::string& fallback);
bool uses_loops(const ConfigGroup& g);
// Speedup = samples/s `s` on N GPUs / the 1-GPU run's `b`: a ratio of means, its std propagated
// from both relative stds (first order). `self`: the 1-GPU row against itself is exactly 1, no
// spread (its errors cancel). Null without both values.
Stat speedup_of(const Stat& s, const Stat& b, bool self);
std::string energy_null_reason(const std::vector<ConfigGroup>& groups);

}  // namespace cnnscale::report
