// One table of `cnnscale report` as data (text columns and mean ± std columns) and its two
// renderings: Markdown for people (null as "—", 4 significant digits, a unit that fits the values)
// and CSV for programs (one mean and one std column per figure, fixed units, null as empty).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "experiment/report_data.hpp"

namespace cnnscale::report {

// What a stat column measures, for the Markdown's choice of unit (µs ... ks, mJ ... GJ, ...).
enum class Quantity { None, Seconds, Joules, Watts, JouleSeconds };

struct Column {
  // A constructor, not an aggregate: most columns give only the first two to four fields.
  Column(std::string header_, std::string csv_, bool stat_ = true, bool flag_ = false,
         Quantity quantity_ = Quantity::None, double si_ = 1, std::string unit_group_ = "")
      : header(std::move(header_)),
        csv(std::move(csv_)),
        stat(stat_),
        flag(flag_),
        quantity(quantity_),
        si(si_),
        unit_group(std::move(unit_group_)) {}

  std::string header;  // Markdown header; "{unit}" in it becomes the unit the Markdown picks
  std::string csv;     // CSV name; a stat column becomes <csv>_mean and <csv>_std
  bool stat = true;    // false: a text column
  bool flag = false;   // a text column holding "1"/"0": Markdown shows "★"/"", CSV keeps 1/0
  Quantity quantity = Quantity::None;
  double si = 1;           // SI value of one unit of the cells (1e-3: the cells hold ms)
  std::string unit_group;  // columns of one non-empty group share one unit (a stack of phases)
};

// The unit for values whose largest magnitude is `largest` (in SI units): the largest unit that
// keeps it at or above 1 (the smallest unit below that). Returns {name, SI value of one unit}.
std::pair<std::string, double> pick_unit(Quantity q, double largest);

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
