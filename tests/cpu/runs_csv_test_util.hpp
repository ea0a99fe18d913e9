// Reading runs.csv as a notebook would: with Python's csv module (what pandas' parser agrees with on
// RFC 4180 quoting) where python3 is there, else with the tests' own RFC 4180 reader; and the pandas
// lines of results/README.md run as written, where pandas is importable.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cpu/test_report_util.hpp"

namespace cnnscale::testing {

inline bool have_python3() { return std::system("command -v python3 >/dev/null 2>&1") == 0; }

inline std::string command_output(const std::string& cmd, int* status) {
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *status = p ? ::pclose(p) : -1;
  return out;
}

// {"header": [...], "rows": [{column: cell}, ...]} of the CSV file at `path`.
inline nlohmann::json runs_csv_table(const std::string& path) {
  if (have_python3()) {
    int status = 0;
    const std::string out = command_output(
        "python3 -c 'import csv, json, sys; f = open(sys.argv[1], newline=\"\"); r = csv.DictReader(f); "
        "rows = list(r); print(json.dumps({\"header\": r.fieldnames, \"rows\": rows}))' " +
            path,
        &status);
    EXPECT_EQ(status, 0) << "python3's csv module could not read " << path;
    return nlohmann::json::parse(out, nullptr, false);
  }
  const std::vector<std::vector<std::string>> records = csv_records(slurp(path));
  nlohmann::json table = {{"header", nlohmann::json::array()}, {"rows", nlohmann::json::array()}};
  if (records.empty()) return table;
  table["header"] = records[0];
  for (size_t r = 1; r < records.size(); ++r) {
    EXPECT_EQ(records[r].size(), records[0].size()) << path << ": record " << r;
    nlohmann::json row = nlohmann::json::object();
    for (size_t c = 0; c < records[0].size() && c < records[r].size(); ++c) row[records[0][c]] = records[r][c];
    table["rows"].push_back(row);
  }
  return table;
}

// results/README.md's pandas lines from `runs = pd.read_csv(` to the block's end, reading `path`:
// their output, or "" with `skipped` set where no python3 imports pandas: the one on PATH, else
// the system's (a user-installed python3 ahead of it on PATH may lack what setup.sh installs).
inline std::string run_readme_pandas_example(const std::string& path, bool* skipped) {
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"})
    if (python.empty() && std::system((std::string(candidate) + " -c 'import pandas' >/dev/null 2>&1").c_str()) == 0)
      python = candidate;
  *skipped = !have_python3() || python.empty();
  if (*skipped) return "";
  const std::string readme = slurp(std::string(CNNSCALE_SOURCE_DIR) + "/results/README.md");
  const size_t begin = readme.find("runs = pd.read_csv(");
  const size_t end = readme.find("```", begin);
  EXPECT_NE(begin, std::string::npos) << "results/README.md has no runs.csv example";
  if (begin == std::string::npos) return "";
  std::string code = "import pandas as pd\n" + readme.substr(begin, end - begin);
  const std::string example_path = "results/report/runs.csv";
  const size_t at = code.find(example_path);
  EXPECT_NE(at, std::string::npos) << code;
  if (at != std::string::npos) code.replace(at, example_path.size(), path);
  const std::string script = path + ".example.py";
  std::ofstream(script) << code;
  int status = 0;
  const std::string out = command_output(python + " " + script + " 2>&1", &status);
  EXPECT_EQ(status, 0) << code << "\n" << out;
  return out;
}

}  // namespace cnnscale::testing
