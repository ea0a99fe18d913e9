// The schema of the summary figures (`/summary`, summary.json's "summary" and "ranks", the CSV
// row): every name the run writes, with its unit and kind, in one table. The kind decides how
// summary.json writes a number; results/README.md describes the same names.
#pragma once
#include <span>
#include <string_view>

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

// The job's figures (summary), tags (`tag.<key>`, Text) excepted.
std::span<const SummaryField> run_summary_fields();
// Each rank's own figures (`/summary/ranks/<r>`, summary.json's "ranks").
std::span<const SummaryField> rank_summary_fields();

// The field of a figure name in either table (tags: Text); nullptr for a name in neither.
const SummaryField* find_summary_field(std::string_view name);

}  // namespace cnnscale
