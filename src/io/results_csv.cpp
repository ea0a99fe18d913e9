// summary.csv of a run folder and the sweep-level CSV that gathers one row per run: quoting,
// the header's columns, and appends serialised with flock.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_file.hpp"
#include "io/results_files.hpp"
#include "io/results_writer.hpp"
#include "io/safe_open.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {

namespace {

std::string csv_quoted(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Numbers in the shortest form that reads back exactly ("nan" for NaN, which pandas reads as NaN);
// null is an empty field.
std::string csv_value(const SummaryValue& v) {
  if (std::holds_alternative<double>(v)) return fmt::format("{}", std::get<double>(v));
  if (std::holds_alternative<std::string>(v)) return csv_quoted(std::get<std::string>(v));
  return "";
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

// The provenance's columns (io/provenance.hpp), after the summary's; none in results without one.
std::vector<std::pair<std::string, std::string>> provenance_of(const RunResults& r) {
  return r.provenance ? provenance_columns(*r.provenance) : std::vector<std::pair<std::string, std::string>>{};
}

std::string csv_row(const RunResults& r, const std::vector<std::string>& columns) {
  const SummaryValues values = summary_values(r.summary);
  const auto provenance = provenance_of(r);
  std::string row;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) row += ',';
    const std::string& c = columns[i];
    const auto p = std::find_if(provenance.begin(), provenance.end(), [&](const auto& kv) { return kv.first == c; });
    if (c == "experiment") {
      row += csv_quoted(r.experiment);
    } else if (c == "run_id") {
      row += csv_quoted(r.run_id);
    } else if (auto it = values.find(c); it != values.end()) {
      row += csv_value(it->second);
    } else if (p != provenance.end()) {
      row += csv_quoted(p->second);
    }
  }
  return row + "\n";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string s;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) s += ',';
    s += csv_quoted(fields[i]);
  }
  return s + "\n";
}

}  // namespace

std::string summary_csv_text(const RunResults& results) {
  const std::vector<std::string> header = summary_csv_header(results);
  return csv_line(header) + csv_row(results, header);
}

std::vector<std::string> summary_csv_header(const RunResults& results) {
  std::vector<std::string> h = {"experiment", "run_id"};
  for (const auto& [name, v] : summary_values(results.summary)) h.push_back(name);
  for (const auto& [name, v] : provenance_of(results)) h.push_back(name);
  return h;
}

void append_summary_csv(const std::string& csv_path, const RunResults& results) {
  int fd = open_no_follow(csv_path, O_RDWR | O_CREAT | O_APPEND, 0644);  // never appends through a link
  // The lock goes with the descriptor: closing it (also on a throw) releases it.
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::flock(fd, LOCK_EX) != 0) throw_runtime("{}: cannot lock: {}", csv_path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_runtime("{}: cannot stat", csv_path);

  std::vector<std::string> columns;
  std::string out;
  if (st.st_size == 0) {
    columns = summary_csv_header(results);
    out = csv_line(columns);
  } else {
    // The header is the first line; read it in chunks until its newline.
    std::string head;
    char buf[4096];
    off_t off = 0;
    while (head.find('\n') == std::string::npos) {
      ssize_t n = ::pread(fd, buf, sizeof buf, off);
      if (n < 0) throw_runtime("{}: cannot read: {}", csv_path, std::strerror(errno));
      if (n == 0) break;
      head.append(buf, static_cast<size_t>(n));
      off += n;
    }
    if (head.find('\n') == std::string::npos) throw_config("{}: the header line has no end", csv_path);
    columns = split_csv_line(head.substr(0, head.find('\n')));
    if (columns.size() < 2 || columns[0] != "experiment" || columns[1] != "run_id")
      throw_config("{}: not a cnnscale summary CSV (header starts '{}')", csv_path, head.substr(0, 40));
    std::set<std::string> known(columns.begin(), columns.end());
    for (const std::string& name : summary_csv_header(results))
      if (!known.count(name)) log::warn("{}: no column '{}'; run {} leaves it out", csv_path, name, results.run_id);
    // A file cut short by a killed writer would glue our row onto its last line.
    char last = '\n';
    // push_back, not `out = "\n"`: GCC 12 reports a false -Wrestrict on the assignment here.
    if (::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') out.push_back('\n');
  }
  out += csv_row(results, columns);
  try {
    write_all(fd, out, csv_path);
    if (::fsync(fd) != 0) throw_runtime("{}: fsync failed: {}", csv_path, std::strerror(errno));
  } catch (...) {
    // A full disk may take part of the row: cut it off again (we still hold the lock), so that no
    // row of a run whose write failed is left half there.
    const bool cut = ::ftruncate(fd, st.st_size) == 0;
    (void)cut;  // best effort: the error in flight already names the file
    throw;
  }
}

}  // namespace cnnscale
