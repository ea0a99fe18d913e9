// Run folders: names and run ids, the status of an existing folder, and the protocol that makes a
// run folder appear whole or not at all ("<run-id>.partial" renamed last, an interrupted run's
// folder replaced by its resumption). The files in it are written by results_{h5_write,json,csv}.
#include "io/results_writer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.hpp"
#include "core/host_name.hpp"
#include "io/atomic_file.hpp"
#include "io/progress_file.hpp"
#include "io/results_files.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

void check_name(const std::string& what, const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\0') != std::string::npos)
    throw_config("results: {} '{}' cannot be a folder name", what, s);
}

}  // namespace

void check_writable_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw_config("{} {}: is not a directory", flag, dir);
  fs::create_directories(dir, ec);
  if (ec) throw_config("{} {}: cannot create: {}", flag, dir, ec.message());
  // A probe file written the way results and checkpoints are (create, write, fsync): permissions
  // alone do not tell (root, ACLs, read-only mounts, full disks with reserved blocks).
  // A temporary file's name, so that a probe left by a killed process is cleared as its leftovers are.
  const std::string probe = temp_path_for((fs::path(dir) / ".cnnscale-write-test").string());
  try {
    write_synced_fd(create_exclusive(probe), probe, "probe\n");
  } catch (const RuntimeError& e) {
    throw_config("{} {}: not writable ({})", flag, dir, e.what());
  }
  fs::remove(probe, ec);
}

void check_results_name(const std::string& flag, const std::string& name) {
  static const std::regex name_re("[A-Za-z0-9][A-Za-z0-9._+=-]*");
  if (!std::regex_match(name, name_re))
    throw_config("{} '{}': use letters, digits and . _ + = - (not starting with . or -)", flag, name);
  if (name.size() > kMaxResultsName)
    throw_config("{} '{}...': {} characters, at most {} (it becomes part of file names)", flag, name.substr(0, 40),
                 name.size(), kMaxResultsName);
}

std::pair<std::string, std::string> utc_times(std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char iso[32], stamp[32];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  return {iso, stamp};
}

std::string make_run_id(const std::string& config_text, std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  // FNV-1a: stable, no dependency; uniqueness only has to hold among runs of one second.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  mix(config_text);
  mix(host_name());
  mix(std::to_string(::getpid()));
  mix(std::to_string(now.time_since_epoch().count()));
  return fmt::format("{}-{:08x}", stamp, static_cast<uint32_t>(h ^ (h >> 32)));
}

std::string results_status(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "summary.json");
  if (!in) return "";
  try {
    const auto j = nlohmann::json::parse(in);
    if (!j.contains("status")) return std::string(kRunComplete);  // written before the field existed
    return j["status"].is_string() ? j["status"].get<std::string>() : "";
  } catch (const nlohmann::json::exception&) {
    return "";
  }
}

bool run_folder_writable(const std::string& run_dir) {
  std::error_code ec;
  return !fs::exists(run_dir, ec) || results_status(run_dir) == kRunInterrupted;
}

std::string write_run_results(const RunResults& results, const ResultsWriteOptions& options,
                              const std::string& progress_json) {
  check_name("experiment", results.experiment);
  check_name("run id", results.run_id);
  const ResultsStep step = [&](std::string_view s) {
    if (options.after_step) options.after_step(s);
  };

  const fs::path exp_dir = fs::path(options.root) / results.experiment;
  const fs::path final_dir = exp_dir / results.run_id;
  const fs::path partial = exp_dir / (results.run_id + ".partial");
  std::error_code ec;
  refuse_link(exp_dir.string());  // the run folder would go where it points
  fs::create_directories(exp_dir, ec);
  if (ec) throw_runtime("{}: cannot create: {}", exp_dir.string(), ec.message());
  if (!run_folder_writable(final_dir.string()))
    throw_runtime("{}: results of this run id exist already", final_dir.string());
  // The one folder a write may replace: an interrupted run's, superseded by its resumption.
  const bool replace_interrupted = fs::exists(final_dir);
  // A leftover of a killed run with this very id: nothing in it was published.
  fs::remove_all(partial, ec);
  if (!fs::create_directory(partial, ec) || ec) throw_runtime("{}: cannot create: {}", partial.string(), ec.message());

  try {
    write_atomically_with((partial / "run.h5").string(),
                          [&](const std::string& tmp) { write_results_h5(tmp, results, step); });
    step("run.h5");
    write_file_atomically((partial / "summary.json").string(), summary_json(results).dump(2) + "\n");
    step("summary.json");
    write_file_atomically((partial / "summary.csv").string(), summary_csv_text(results));
    step("summary.csv");
    if (!progress_json.empty()) write_file_atomically((partial / kProgressFile).string(), progress_json);
    fsync_dir(partial.string());
    if (replace_interrupted) {
      // Moved aside first so that a crash in between leaves either folder whole, never a mix.
      const fs::path old = exp_dir / (results.run_id + ".interrupted-old");
      fs::remove_all(old, ec);
      fs::rename(final_dir, old);
      fs::rename(partial, final_dir);
      fs::remove_all(old, ec);
    } else {
      fs::rename(partial, final_dir);
    }
    fsync_dir(exp_dir.string());
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
  return final_dir.string();
}

}  // namespace cnnscale
