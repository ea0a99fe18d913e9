// The data side of `cnnscale report`: find the complete run folders under a results directory, read
// their summaries, and group runs that differ only by repeat into configurations with mean, sample
// standard deviation and count per figure. The tables (report_tables.hpp) are built from these.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/run_results.hpp"

namespace cnnscale::report {

// One complete run folder (a folder holding run.h5; *.partial folders are never listed).
struct RunRecord {
  std::string folder;  // the run folder
  std::string run_id;
  std::map<std::string, SummaryValue> summary;
  std::map<std::string, std::string> methods;

  double number(const std::string& key) const;     // NaN when missing, null or a string
  std::string text(const std::string& key) const;  // "" when missing or null; numbers printed
};

// Summary keys that identify a configuration: runs equal in all of them are repeats of one
// configuration. The seed, the run id and the tags (tag.repeat, sweep hashes) are left out on purpose.
extern const std::vector<std::string> kGroupKeys;

// mean, sample standard deviation (n - 1; NaN for n < 2), min and max over the non-null values.
struct Stat {
  double mean = kMissing;
  double std = kMissing;
  double min = kMissing;
  double max = kMissing;
  int n = 0;  // number of non-null values
  bool null() const { return n == 0; }
};
Stat stat_of(const std::vector<double>& values);  // NaNs are skipped

// The repeats of one configuration.
struct ConfigGroup {
  std::map<std::string, std::string> key;  // kGroupKeys -> value as text
  std::vector<const RunRecord*> runs;

  std::string net() const { return key.at("net"); }
  double global_batch() const;
  double world_size() const;
  Stat stat(const std::string& summary_key) const;  // over the runs' values of that key
  // First non-empty method string of the key among the runs ("" when none).
  std::string method(const std::string& summary_key) const;
};

// Every complete run folder under `results_dir`, recursively, sorted by path. A folder that holds
// run.h5 but cannot be read is skipped with a warning (counted in `unreadable`). Throws a
// ConfigError when `results_dir` is not a readable directory.
std::vector<RunRecord> scan_runs(const std::string& results_dir, int* unreadable = nullptr);

// Groups runs by kGroupKeys; groups ordered by net, device, precision, global batch, world size,
// then the remaining keys.
std::vector<ConfigGroup> group_runs(const std::vector<RunRecord>& runs);

// The group keys (besides net, global_batch and world_size, which the tables always show) whose
// value differs between groups: the tables show them in a "variant" column.
std::vector<std::string> varying_keys(const std::vector<ConfigGroup>& groups);
std::string variant_label(const ConfigGroup& group, const std::vector<std::string>& varying);

// The 1-GPU (world_size 1) group with the same configuration apart from world size and GPU names,
// preferring one whose GPU is the first of `group`'s; nullptr when there is none.
const ConfigGroup* baseline_of(const ConfigGroup& group, const std::vector<ConfigGroup>& groups);

}  // namespace cnnscale::report
