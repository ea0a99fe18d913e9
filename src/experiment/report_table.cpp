// Markdown and CSV rendering of report tables (see report_table.hpp). The CSV keeps full precision
// so that tests and pandas users get the exact means; the Markdown rounds for reading.
#include "experiment/report_table.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace cnnscale::report {

namespace {

const std::vector<std::pair<std::string, double>>& units_of(Quantity q) {
  static const std::map<Quantity, std::vector<std::pair<std::string, double>>> units = {
      {Quantity::Seconds, {{"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"ks", 1e3}}},
      {Quantity::Joules, {{"mJ", 1e-3}, {"J", 1}, {"kJ", 1e3}, {"MJ", 1e6}, {"GJ", 1e9}}},
      {Quantity::Watts, {{"mW", 1e-3}, {"W", 1}, {"kW", 1e3}, {"MW", 1e6}}},
      // The study's EDP unit is MJ·ks; below it the energy prefix moves first.
      {Quantity::JouleSeconds,
       {{"mJ·s", 1e-3}, {"J·s", 1}, {"kJ·s", 1e3}, {"MJ·s", 1e6}, {"MJ·ks", 1e9}, {"GJ·ks", 1e12}}}};
  return units.at(q);
}

}  // namespace

std::pair<std::string, double> pick_unit(Quantity q, double largest) {
  const auto& units = units_of(q);
  if (!(largest > 0) || !std::isfinite(largest)) {  // nothing to fit: the base unit
    for (const auto& u : units)
      if (u.second == 1) return u;
  }
  std::pair<std::string, double> best = units.front();
  for (const auto& u : units)
    if (largest / u.second >= 1 - 1e-12) best = u;
  return best;
}

bool Table::all_null() const {
  for (const auto& row : rows)
    for (size_t c = 0; c < columns.size(); ++c)
      if (columns[c].stat && !row[c].value.null()) return false;
  return true;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "—";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e15 || a < 1e-4) return fmt::format("{:.3e}", v);
  if (a >= 1000) return fmt::format("{:.0f}", v);
  const int digits = 3 - static_cast<int>(std::floor(std::log10(a)));
  return fmt::format("{:.{}f}", v, std::max(digits, 0));
}

std::string format_stat(const Stat& s) {
  if (s.null()) return "—";
  if (s.n < 2 || std::isnan(s.std)) return format_number(s.mean);
  return format_number(s.mean) + " ± " + format_number(s.std);
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  return fmt::format("{}", v);  // fmt prints the shortest round-trip representation
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

namespace {

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::string render_markdown(const Table& table) {
  // Per column (or unit group), the unit that fits its largest mean: 98.85 ms, not 9.885e-05 ks.
  std::map<std::string, double> largest, smallest;  // group (or "#<column>") -> largest, smallest |mean| in SI
  auto group_of = [&](size_t c) {
    // append(), not "#" + std::string: GCC 12's false -Wrestrict again.
    return table.columns[c].unit_group.empty() ? std::string("#").append(std::to_string(c))
                                               : table.columns[c].unit_group;
  };
  for (size_t c = 0; c < table.columns.size(); ++c) {
    const Column& col = table.columns[c];
    if (col.quantity == Quantity::None) continue;
    double& m = largest[group_of(c)];
    double& low = smallest.try_emplace(group_of(c), 0.0).first->second;
    for (const auto& row : table.rows)
      if (!row[c].value.null() && std::isfinite(row[c].value.mean) && row[c].value.mean != 0) {
        const double v = std::abs(row[c].value.mean) * col.si;
        m = std::max(m, v);
        low = low == 0 ? v : std::min(low, v);
      }
  }
  std::vector<std::pair<std::string, double>> unit(table.columns.size(), {"", 1});
  std::vector<double> factor(table.columns.size(), 1.0);  // cell value -> value in the picked unit
  // A column spanning 1000× or more (a whole training of 0.2 s beside one of 1.7 ks) would print its
  // small values as 0.0002 ks: each cell then carries its own unit, and the header none.
  std::vector<bool> per_cell(table.columns.size(), false);
  for (size_t c = 0; c < table.columns.size(); ++c) {
    const Column& col = table.columns[c];
    if (col.quantity == Quantity::None) continue;
    const double high = largest[group_of(c)], low = smallest[group_of(c)];
    per_cell[c] = col.unit_group.empty() && low > 0 && high / low >= 1000;
    unit[c] = pick_unit(col.quantity, high);
    factor[c] = col.si / unit[c].second;
  }
  static const std::map<Quantity, std::string> words = {{Quantity::Seconds, "time"},
                                                        {Quantity::Joules, "energy"},
                                                        {Quantity::Watts, "power"},
                                                        {Quantity::JouleSeconds, "EDP"}};
  std::string out;
  out += "|";
  // append(), not " " + std::string: GCC 12 warns falsely (-Wrestrict, bug 105329) on the latter.
  for (size_t c = 0; c < table.columns.size(); ++c) {
    std::string header = table.columns[c].header;
    if (per_cell[c]) {
      // "whole training ({unit})" -> "whole training"; "{unit}/batch" -> "time/batch"
      if (const size_t at = header.find(" ({unit})"); at != std::string::npos) header.erase(at, 9);
      if (const size_t at = header.find("{unit}"); at != std::string::npos)
        header.replace(at, 6, words.at(table.columns[c].quantity));
    } else if (const size_t at = header.find("{unit}"); at != std::string::npos) {
      header.replace(at, 6, unit[c].first);
    }
    out.append(" ").append(md_escape(header)).append(" |");
  }
  out += "\n|";
  for (const Column& c : table.columns) out += c.stat ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& row : table.rows) {
    out += "|";
    for (size_t c = 0; c < table.columns.size(); ++c) {
      const Column& col = table.columns[c];
      const std::string text = col.flag ? (row[c].text == "1" ? "★" : "") : md_escape(row[c].text);
      Stat v = row[c].value;
      std::string suffix;
      // Its own unit also for a value far below its column's (a 70 ns remainder in a column of
      // ms): 0.07128 µs, not 7.128e-05 ms.
      const bool tiny = col.quantity != Quantity::None && !v.null() && v.mean != 0 &&
                        std::abs(v.mean * factor[c]) < 1e-3;
      if ((per_cell[c] || tiny) && !v.null() && std::isfinite(v.mean)) {
        const auto u = pick_unit(col.quantity, std::abs(v.mean) * col.si);
        v.mean *= col.si / u.second;
        v.std *= col.si / u.second;
        suffix = std::string(" ").append(u.first);
      } else {
        v.mean *= factor[c];
        v.std *= factor[c];
      }
      out.append(" ").append(col.stat ? format_stat(v) + (v.null() ? "" : suffix) : text).append(" |");
    }
    out += "\n";
  }
  if (!table.notes.empty()) {
    out += "\n";
    for (const std::string& n : table.notes) out.append("- ").append(n).append("\n");
  }
  return out;
}

std::string render_csv(const Table& table) {
  std::string out;
  bool first = true;
  for (const Column& c : table.columns) {
    if (!first) out += ",";
    first = false;
    out += c.stat ? c.csv + "_mean," + c.csv + "_std" : c.csv;
  }
  out += "\n";
  for (const auto& row : table.rows) {
    for (size_t c = 0; c < table.columns.size(); ++c) {
      if (c) out += ",";
      out += table.columns[c].stat ? csv_number(row[c].value.mean) + "," + csv_number(row[c].value.std)
                                   : csv_field(row[c].text);
    }
    out += "\n";
  }
  return out;
}

}  // namespace cnnscale::report
