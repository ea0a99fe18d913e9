// The last non-blank line of a child process's log: what the sweep and the report quote when a run
// or the plotting script fails, so the user sees the cause in one line.
#pragma once
#include <fstream>
#include <string>

namespace cnnscale {

inline std::string last_nonblank_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

}  // namespace cnnscale
