// One table of `cnnscale report` as data (text columns and mean ± std columns) and its two
// renderings: Markdown for people (null as "—", 4 significant digits) and CSV for programs (one
// mean and one std column per figure, shortest round-trip numbers, null as an empty field).
#pragma once
#include <string>
#include <vector>

#include "experiment/report_data.hpp"

namespace cnnscale::report {

struct Column {
  std::string header;  // Markdown header, with unit
  std::string csv;     // CSV name; a stat column becomes <csv>_mean and <csv>_std
  bool stat = true;    // false: a text column
  bool flag = false;   // a text column holding "1"/"0": Markdown shows "★"/"", CSV keeps 1/0
};

struct Cell {
  std::string text;  // text columns
  Stat value;        // stat columns (already in the column's unit)
  static Cell of(std::string t) { return Cell{std::move(t), {}}; }
  static Cell of(const Stat& s) { return Cell{"", s}; }
};

struct Table {
  std::string name;     // file stem: <name>.md, <name>.csv
  std::string title;    // heading in report.md
  std::string caption;  // what the table shows (like the study's captions)
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;
  std::vector<std::string> notes;  // printed under the table

  bool all_null() const;  // no stat cell has a value (also true for a table without rows)
};

// Markdown number: 4 significant digits, no exponent between 1e-4 and 1e15.
std::string format_number(double v);
// "mean ± std", "mean" (n = 1 or no spread known) or "—" (null).
std::string format_stat(const Stat& s);
// Shortest text that reads back to the same double ("" for NaN).
std::string csv_number(double v);
std::string csv_field(const std::string& s);  // quoted when it holds a comma, quote or newline

std::string render_markdown(const Table& table);  // table, then notes as a list
std::string render_csv(const Table& table);       // header line + one line per row

}  // namespace cnnscale::report
