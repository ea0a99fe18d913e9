// The line of a child process's log that says why it failed: what the sweep and the report quote
// when a run or the plotting script fails, so the user sees the cause in one line rather than the
// MPI launcher's closing banner.
#pragma once
#include <fstream>
#include <string>
#include <string_view>

namespace cnnscale {

inline std::string last_nonblank_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

namespace log_tail_detail {

// A rule line of an Open MPI / PRRTE help message ("-----...", "=====...").
inline bool is_rule(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return false;
  s = s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
  return s.size() >= 10 && s.find_first_not_of(s[0]) == std::string_view::npos &&
         (s[0] == '-' || s[0] == '=' || s[0] == '*');
}

// A line a launcher writes about the job rather than the program's own output.
inline bool is_launcher_line(std::string_view s) {
  for (std::string_view p : {"srun: ", "slurmstepd: ", "mpirun ", "mpirun: ", "prterun ", "prterun: ", "mpiexec ",
                             "mpiexec: ", "Primary job", "[prterun", "[mpirun", "PRTE ", "--> Process"})
    if (s.starts_with(p)) return true;
  return false;
}

}  // namespace log_tail_detail

// The first line in cnnscale's own error format ("cnnscale: error: ...", as main() prints it, or
// "cnnscale sweep: ..." when the child could not start): the first, since a failed rank's error
// comes before its peers' consequences of it. Without one, the last non-blank line that is not
// part of a launcher's banner (Open MPI/PRRTE help blocks between rule lines, "Primary job
// terminated normally...", srun's "error: task 1 exited"); when the launcher itself refused (the
// log is banners only, e.g. mpirun run as root), the headline of the last banner; else the last
// non-blank line.
inline std::string error_line(const std::string& path) {
  using namespace log_tail_detail;
  std::ifstream in(path);
  std::string own, any, headline, banner_first;
  // Open MPI writes its help messages between rule lines: nothing inside one is the program's, and
  // its first line says what the message is about.
  bool in_banner = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.starts_with("cnnscale: error:") || line.starts_with("cnnscale sweep:")) return line;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    any = line;
    if (is_rule(line)) {
      in_banner = !in_banner;
      if (in_banner) banner_first.clear();
      continue;
    }
    if (in_banner && banner_first.empty()) headline = banner_first = line;
    if (!in_banner && !is_launcher_line(line)) own = line;
  }
  if (!own.empty()) return own;
  return headline.empty() ? any : headline;
}

}  // namespace cnnscale
