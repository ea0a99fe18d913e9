// Shared by the sweep tests (test_sweep_*.cpp): the small experiment they expand, fake run folders,
// file and shell helpers, and a pretend environment for HostInfo::detect.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::sweep_test {

namespace fs = std::filesystem;

inline const std::string kText =
    "name: s\ndataset: synthetic\niterations: 3\nmatrix: {network: lenet, batch: [4, 8], gpus: [1], repeats: 1}\n";

inline Experiment load(const std::vector<std::string>& overrides = {}) {
  return parse_experiment_text(kText, "s.yaml", overrides, HostInfo{std::nullopt, "", true});
}

inline void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A finished run folder as train leaves it (written by the results writer, so run.h5 is real HDF5),
// tagged with `hash`; `status` "interrupted" as a run stopped by a signal leaves it.
inline void fake_done(const fs::path& exp_dir, const RunSpec& r, const std::string& hash,
               const std::string& status = "complete") {
  RunResults res = testing::synthetic_run("lenet", static_cast<int>(r.batch), static_cast<int>(r.ranks), 1, {});
  res.experiment = exp_dir.filename().string();
  res.run_id = r.id;
  res.status = status;
  res.summary.tags["config_hash"] = hash;
  ResultsWriteOptions o;
  o.root = exp_dir.parent_path().string();
  write_run_results(res, o);
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  return lines;
}

// An executable shell script at `path`.
inline void write_script(const std::string& path, const std::string& text) {
  write(path, text);
  fs::permissions(path, fs::perms::owner_all);
}

// `bash -c command` with its output captured.
inline testing::CliResult shell(const std::string& command) {
  const std::string base = testing::output_base("sh");
  std::string cmd = "bash -c ";
  cmd.append(testing::shell_quote(command)).append(" >").append(testing::shell_quote(base + ".out"));
  cmd.append(" 2>").append(testing::shell_quote(base + ".err")).append(" </dev/null");
  testing::CliResult r;
  r.exit_code = testing::exit_code_of(std::system(cmd.c_str()));
  testing::take_output(base, r.out, r.err);
  return r;
}

// Sets (or with nullptr unsets) an environment variable for one scope; children inherit it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) saved_ = before;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      ::setenv(name_.c_str(), saved_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// A pretend environment for HostInfo::detect.
inline HostInfo detect_in(const std::map<std::string, std::string>& vars) {
  return HostInfo::detect([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace cnnscale::sweep_test
