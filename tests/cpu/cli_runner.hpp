// Runs the cnnscale executable (CNNSCALE_BIN) from tests with its stdout and stderr captured, for
// the CLI tests and the end-to-end (slow) tests. Header-only, shared by tests/cpu and tests/slow.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cnnscale::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream is(err);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
    return lines;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `cnnscale args...` in the source tree (so `--net lenet` resolves) and waits for it.
inline CliResult run_cnnscale(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  static int counter = 0;
  const fs::path base =
      fs::temp_directory_path() / ("cnnscale_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  // Built with append(): GCC 12 warns falsely (-Wrestrict, bug 105329) on "literal" + std::string.
  std::string cmd = "cd ";
  cmd.append(shell_quote(CNNSCALE_SOURCE_DIR)).append(" && ").append(shell_quote(CNNSCALE_BIN));
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >").append(shell_quote(base.string() + ".out"));
  cmd.append(" 2>").append(shell_quote(base.string() + ".err")).append(" </dev/null");
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  r.out = slurp(base.string() + ".out");
  r.err = slurp(base.string() + ".err");
  fs::remove(base.string() + ".out");
  fs::remove(base.string() + ".err");
  return r;
}

}  // namespace cnnscale::testing
