// Runs the cnnscale executable (CNNSCALE_BIN) from tests with its stdout and stderr captured, for
// the CLI tests and the end-to-end (slow) tests. Header-only, shared by tests/cpu and tests/slow.
#pragma once
#include <gtest/gtest.h>
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
  // The "cnnscale: error: " lines of stderr (warnings and progress lines left out).
  std::vector<std::string> error_lines() const {
    std::vector<std::string> errors;
    for (const auto& line : err_lines())
      if (line.rfind("cnnscale: error: ", 0) == 0) errors.push_back(line);
    return errors;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A fresh path prefix in the temp directory for one child's captured output (<base>.out/.err).
inline std::string output_base(const std::string& tag) {
  static int counter = 0;
  return (std::filesystem::temp_directory_path() /
          ("cnnscale_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
      .string();
}

// Reads <base>.out and <base>.err into out/err and removes both files.
inline void take_output(const std::string& base, std::string& out, std::string& err) {
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  out = slurp(base + ".out");
  err = slurp(base + ".err");
  std::filesystem::remove(base + ".out");
  std::filesystem::remove(base + ".err");
}

// Exit code of a wait status; 128 + signal for a child killed by a signal (as shells report it).
inline int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Runs `cnnscale args...` in the source tree (so `--net lenet` resolves) and waits for it; `env`
// entries (NAME=value) are added to its environment.
inline CliResult run_cnnscale(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  const std::string base = output_base("cli");
  // Built with append(): GCC 12 warns falsely (-Wrestrict, bug 105329) on "literal" + std::string.
  std::string cmd = "cd ";
  // Runs that do not choose a results root write theirs under the temp directory, not the tree.
  cmd.append(shell_quote(CNNSCALE_SOURCE_DIR)).append(" && CNNSCALE_RESULTS=");
  cmd.append(shell_quote((std::filesystem::temp_directory_path() / "cnnscale_test_results").string()));
  if (!env.empty()) cmd.append(" env");  // quoted NAME=value words are not shell assignments
  for (const auto& e : env) cmd.append(" ").append(shell_quote(e));
  cmd.append(" ").append(shell_quote(CNNSCALE_BIN));
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >").append(shell_quote(base + ".out"));
  cmd.append(" 2>").append(shell_quote(base + ".err")).append(" </dev/null");
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = exit_code_of(status);
  take_output(base, r.out, r.err);
  return r;
}

// A run that must fail with exit 2, one stderr line containing every fragment, and nothing on stdout.
inline void expect_usage_error(const std::vector<std::string>& args, const std::vector<std::string>& fragments) {
  CliResult r = run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("cnnscale: error: ", 0), 0u) << lines[0];
  for (const auto& f : fragments) EXPECT_NE(lines[0].find(f), std::string::npos) << lines[0] << "\nlacks: " << f;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// A 4-iteration LeNet run on synthetic data (batch 4, no minimum energy window, 1 warm-up
// iteration), its results under `root`/`experiment`/`run_id`, printing --json; `extra` appended.
inline CliResult short_lenet_train(const std::string& root, const std::string& experiment, const std::string& run_id,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"train",     "--net",        "lenet",      "--data",   "synthetic",
                                   "--iterations", "4",        "--batch",    "4",        "--results",
                                   root,      "--experiment", experiment, "--run-id", run_id,
                                   "--min-window", "0",        "--timing-warmup", "1", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cnnscale(args);
}

}  // namespace cnnscale::testing
