// Results files of one run: results/<experiment>/<run-id>/{run.h5, summary.json, summary.csv},
// written into "<run-id>.partial/" and renamed last, so a run killed midway leaves nothing that
// looks complete. The schema is documented in results/README.md; read_run_results reads it back.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/run_results.hpp"

namespace cnnscale {

inline constexpr std::string_view kResultsFormat = "cnnscale-results-1";

struct ResultsWriteOptions {
  std::string root = "results";  // `--results DIR`
  // Test hook: called after each step ("h5:config", ..., "run.h5", "summary.json", "summary.csv");
  // a throw from it aborts the write like any I/O failure would.
  std::function<void(std::string_view step)> after_step;
};

// Experiment names and run ids become path components: letters, digits and . _ + = -, not starting
// with . or -, at most kMaxResultsName characters. ConfigError "<flag> '<name>': ..." otherwise.
void check_results_name(const std::string& flag, const std::string& name);
// ConfigError naming `flag` and `dir` unless `dir` is (or can be created as) a directory in which a
// file can be written: checked before the work (training, a profile, a benchmark), so that none is
// lost at its end.
void check_writable_dir(const std::string& flag, const std::string& dir);
// The longest name that still fits NAME_MAX (255) in every file name made from it, the longest
// being a temporary file's ".<run-id>.json.<host>.<pid>.tmp" (a host name has at most 64
// characters, a pid at most 10 digits: 86 more).
inline constexpr size_t kMaxResultsName = 160;

// "20261122T044300Z-1a2b3c4d": UTC time of `now` and 8 hex digits of a hash of the config text,
// the host name, the process id and the time, so runs started in the same second differ.
std::string make_run_id(const std::string& config_text,
                        std::chrono::system_clock::time_point now = std::chrono::system_clock::now());
// UTC time of `now` as ISO 8601 ("2026-11-22T04:43:00Z") and as run ids write it ("20261122T044300Z",
// for file names).
std::pair<std::string, std::string> utc_times(std::chrono::system_clock::time_point now);

// The `status` of the run folder's summary.json ("complete", "interrupted"; "complete" for folders
// written before the field existed), or "" when summary.json is missing or unreadable.
std::string results_status(const std::string& run_dir);
// Whether results may be written to `run_dir`: it does not exist, or it holds an interrupted run
// (whose resumption replaces it). A finished run's folder is never overwritten.
bool run_folder_writable(const std::string& run_dir);

// Writes the run folder <root>/<experiment>/<run_id>/ and returns its path. `results.run_id` must
// be set (see make_run_id) and the folder must be run_folder_writable (an interrupted run's folder
// is replaced). On any failure the partial folder is removed and the error rethrown. Call on one process only (rank 0)
// with the gathered results. `progress_json`: the run's last progress record (io/progress_file.hpp),
// written as progress.json beside the results when not empty (the partial folder's own
// progress.json goes with the rest of that folder).
std::string write_run_results(const RunResults& results, const ResultsWriteOptions& options = {},
                              const std::string& progress_json = "");

// Summary figures as JSON (null and NaN both null), as summary.json writes them.
nlohmann::json summary_values_json(const RunSummary& s);
nlohmann::json summary_values_json(const RankSummary& s);

// Reads run.h5, given the run folder or the file itself.
RunResults read_run_results(const std::string& path);

// The CSV columns of a run: experiment, run_id, the summary names in sorted order, then the
// provenance's (provenance_columns) where the results have one.
std::vector<std::string> summary_csv_header(const RunResults& results);

// Appends the run's row to a sweep-level CSV. A new (or empty) file gets the header first; an
// existing file keeps its header and the row follows its columns (empty for names the run lacks;
// names the header lacks are left out with a warning). Locked with flock and written with one
// append, so runs finishing together do not interleave.
void append_summary_csv(const std::string& csv_path, const RunResults& results);

}  // namespace cnnscale
