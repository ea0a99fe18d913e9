// Runs any command line (the launch/ scripts) from the source tree with stdout and stderr captured
// and a hard time limit (coreutils timeout), and splits `bench allreduce` tables into rows.
// mpirun jobs of cnnscale itself go through tests/mpi/mpi_runner.hpp. Header-only.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/cli_runner.hpp"

namespace cnnscale::testing {

struct JobResult {
  int exit_code = -1;  // 124: killed at the time limit
  std::string out, err;
};

// Runs `argv` (each element quoted) in CNNSCALE_SOURCE_DIR, optionally after `env_prefix` (words
// for env(1), unquoted), and waits at most `limit_seconds` for it: a broken build can fail these
// tests but never hang them.
inline JobResult run_job(const std::vector<std::string>& argv, const std::string& env_prefix = "",
                         int limit_seconds = 300) {
  const std::string base = output_base("job");
  std::string cmd = "cd ";
  cmd.append(shell_quote(CNNSCALE_SOURCE_DIR)).append(" && timeout -k 10 ").append(std::to_string(limit_seconds));
  // CI runs as root: Open MPI refuses that unless told (as tests/mpi/mpi_runner.hpp does).
  cmd.append(" env ").append(env_prefix).append(" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ");
  for (const auto& a : argv) cmd.append(shell_quote(a)).append(" ");
  cmd.append(">").append(shell_quote(base + ".out")).append(" 2>").append(shell_quote(base + ".err"));
  cmd.append(" </dev/null");
  const int status = std::system(cmd.c_str());
  JobResult r;
  r.exit_code = exit_code_of(status);
  take_output(base, r.out, r.err);
  return r;
}

// Rows of a `bench allreduce` table: every line not starting with '#', split on blanks.
inline std::vector<std::vector<std::string>> bench_table_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

}  // namespace cnnscale::testing
