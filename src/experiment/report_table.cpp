// Markdown and CSV rendering of report tables (see report_table.hpp). The CSV keeps full precision
// so that tests and pandas users get the exact means; the Markdown rounds for reading.
#include "experiment/report_table.hpp"

#include <fmt/format.h>

#include <cmath>

namespace cnnscale::report {

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
  std::string out;
  out += "|";
  // append(), not " " + std::string: GCC 12 warns falsely (-Wrestrict, bug 105329) on the latter.
  for (const Column& c : table.columns) out.append(" ").append(md_escape(c.header)).append(" |");
  out += "\n|";
  for (const Column& c : table.columns) out += c.stat ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& row : table.rows) {
    out += "|";
    for (size_t c = 0; c < table.columns.size(); ++c) {
      const Column& col = table.columns[c];
      const std::string text = col.flag ? (row[c].text == "1" ? "★" : "") : md_escape(row[c].text);
      out.append(" ").append(col.stat ? format_stat(row[c].value) : text).append(" |");
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
