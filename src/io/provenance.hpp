// Where a result came from: the cnnscale build, the command line as given, when it ran (UTC) and
// on which hosts. One struct for every product (training, inference, benchmarks, calibration),
// with one JSON form (a "provenance" object), one run.h5 form (a /provenance group) and one set of
// CSV columns, so that each product's schema adds it the same way. Absent from files written
// before it was recorded (readers return nullopt).
#pragma once
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/hdf5_file.hpp"

namespace cnnscale {

struct Provenance {
  std::string version;       // cnnscale's version (core/build_info.hpp): "0.1.0"
  std::string git_describe;  // the source's `git describe --always --dirty --tags`; "" when not built from git
  std::vector<std::string> command_line;  // argv as given, the program first
  // UTC, ISO 8601: "2026-12-06T09:13:06Z". A run resumed from a checkpoint keeps the start of the
  // run it continues (resumed_provenance).
  std::string start_time, end_time;
  std::vector<std::string> hosts;       // every rank's host, each once, rank 0's first
  std::vector<std::string> resumed_at;  // UTC, ISO 8601: each resume's start, in order; empty: never resumed
  bool operator==(const Provenance&) const = default;
};

// Keeps the process's command line (main calls it first, before any library may edit argv);
// recorded_command_line() is empty in a process that never did (the tests' own).
void record_command_line(int argc, const char* const* argv);
const std::vector<std::string>& recorded_command_line();

// ISO 8601 UTC with seconds, as start_time and end_time hold it.
std::string utc_iso(std::chrono::system_clock::time_point t);

// A provenance started now: the build's version, the recorded command line, start_time now and
// this host; end_time is the caller's (set_end at the end), and so are the hosts of a job of several
// ranks, once every rank's is known.
Provenance start_provenance();
// end_time = now.
void set_end(Provenance& p);
// The provenance of a run resumed from a checkpoint: `mine` (this process's, started at the resume)
// with the start of the run it continues and that run's resumes, this one added. `before`: the
// interrupted run's provenance where its results were found; without them the earlier start is
// unknown and stays this process's, the resume still recorded.
Provenance resumed_provenance(Provenance mine, const std::optional<Provenance>& before);
// Each host once, in the order of first appearance (rank order: rank 0's first).
std::vector<std::string> distinct_hosts(const std::vector<std::string>& rank_hosts);

// The command line as one shell-quoted line: words with anything but [A-Za-z0-9_./:=,+@%-] in
// single quotes, so that it can be pasted into a shell and split back (CSV column command_line).
std::string shell_line(const std::vector<std::string>& words);

// summary.json's "provenance": {"version", "git_describe" (null when ""), "command_line" (array of
// strings), "start_time", "end_time", "hosts" (array), "resumed_at" (array; absent in files written
// before it was recorded, read as empty)}.
nlohmann::json provenance_json(const Provenance& p);
// The inverse; ConfigError naming `where` and the key for a missing key or a value of another type.
Provenance provenance_from_json(const nlohmann::json& j, const std::string& where);

// run.h5's /provenance group (`group`): attributes version, git_describe, start_time, end_time
// (strings; git_describe null when ""), datasets command_line, hosts and resumed_at (string arrays;
// resumed_at absent in files written before it was recorded, read as empty).
void write_provenance_h5(h5::Writer& w, const std::string& group, const Provenance& p);
// nullopt when the file has no such group (written before provenance was recorded).
std::optional<Provenance> read_provenance_h5(const h5::Reader& in, const std::string& group);

// The CSV columns, in this order, with their values: version, git_describe, command_line (shell_line),
// start_time, end_time, hosts (comma-separated), resumed_at (comma-separated; empty: never resumed).
std::vector<std::pair<std::string, std::string>> provenance_columns(const Provenance& p);

}  // namespace cnnscale
