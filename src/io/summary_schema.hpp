// The schema of the summary figures (`/summary`, summary.json's "summary" and "ranks", the CSV
// row): every member of RunSummary and RankSummary with its name, unit and kind, in one table per
// struct that turns the struct into named values for the writers and back for the reader.
#pragma once
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "io/run_summary.hpp"

namespace cnnscale {

enum class FigureKind {
  Text,    // a string identifying the run
  Count,   // ranks, samples, iterations, epochs, threads, a 0/1 switch: a JSON integer (12, not 12.0)
  Number,  // a measurement or derived from one: a JSON number even when whole
};

struct SummaryField {
  std::string_view name;
  FigureKind kind;
  std::string_view unit;  // "" for texts, counts and ratios
};

// A row of a struct's table: the figure and the member that holds it (a TextFigure for Text).
template <class Summary>
struct FigureField : SummaryField {
  std::variant<NumberFigure Summary::*, TextFigure Summary::*> member;
};

// The job's figures (summary), tags (`tag.<key>`, Text) excepted.
std::span<const FigureField<RunSummary>> run_summary_fields();
// Each rank's own figures (`/summary/ranks/<r>`, summary.json's "ranks").
std::span<const FigureField<RankSummary>> rank_summary_fields();

// The field of a figure name in either table (tags: Text); nullptr for a name in neither.
const SummaryField* find_summary_field(std::string_view name);

// A figure as the files hold it: null (unknown), a number or a string.
using SummaryValue = std::variant<std::monostate, double, std::string>;
// The written figures by name, in name order (the order of summary.json, run.h5 and the CSV);
// absent figures are left out, tags come as `tag.<key>`.
using SummaryValues = std::map<std::string, SummaryValue>;
SummaryValues summary_values(const RunSummary& s);
SummaryValues summary_values(const RankSummary& s);
// One figure by its name (`tag.<key>` for a tag), for code that picks figures by name (the report's
// grouping keys and table columns); null when absent, null or a name in neither table.
SummaryValue summary_value(const RunSummary& s, std::string_view name);
// The inverse, for the reader: ConfigError for a value of the wrong kind; names in neither table
// (figures of another version) are skipped.
RunSummary run_summary_from_values(const SummaryValues& values);
RankSummary rank_summary_from_values(const SummaryValues& values);

}  // namespace cnnscale
