// progress.json: a running run's progress, for a user or a notebook to watch while it trains. Rank 0
// rewrites it whole (a temporary file and a rename, never through a link) at each display step, in
// the run's partial folder ROOT/<experiment>/<run-id>.partial/, where the results are written at
// the end: nothing in a .partial folder counts as a result (sweep, report), so a running run never
// looks finished. The results writer puts the last record (status complete or interrupted) in the
// finished folder beside run.h5 (ResultsWriteOptions::progress_json).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace cnnscale {

inline constexpr std::string_view kProgressFormat = "cnnscale-progress-1";
inline constexpr std::string_view kProgressFile = "progress.json";

struct ProgressRecord {
  std::string experiment, run_id;
  std::string status = "running";  // running, complete or interrupted
  int64_t iteration = 0, total = 0;  // iterations completed, of the run's total
  double epoch = 0;                  // fractional
  double loss = 0;                   // mean training loss since the previous display step
  double lr = 0;
  double samples_per_s = 0;  // rank 0's host clock over the same iterations
  // Rank 0's GPU over the same iterations, from its energy counter; NaN (null) where not read.
  double watts = 0;
  std::string start_time, time;  // UTC ISO 8601: the run's start, this record's
  double elapsed_s = 0;          // seconds since the run's start
};

// {"format", "experiment", "run_id", "status", "iteration", "total", "epoch", "loss", "lr",
// "samples_per_s", "watts", "start_time", "time", "elapsed_s"}; non-finite numbers as null.
nlohmann::json progress_json(const ProgressRecord& r);

// The writer of one run's progress.json. The file is written on a thread of its own: a slow
// filesystem (a cluster's shared one) then never holds up the training step whose steady window is
// being timed; a record that arrives while one is being written replaces any still waiting.
class ProgressFile {
 public:
  ProgressFile(const std::string& results_root, const std::string& experiment, const std::string& run_id);
  // Stops the writer, then removes the partial folder where it is still there: a run that failed
  // (an error, not a kill) leaves no folder, as before it had one; a finished run's was renamed to
  // the run folder.
  ~ProgressFile();
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;

  // ROOT/<experiment>/<run-id>.partial/progress.json.
  const std::string& path() const { return path_; }
  // Hands the record to the writer, which rewrites the file. Its first write clears the partial
  // folder of a killed run of this id (as the results writer does) and makes it. A failure (a full
  // disk, a link where the folder goes) costs a warning, once, and no training: the run's results
  // are written at its end as ever.
  void write(const ProgressRecord& r);
  // Waits for the record in hand and ends the writer: called before the results writer takes the
  // partial folder over. Later writes are dropped.
  void close();

 private:
  void loop();
  void write_now(const std::string& text);
  std::string exp_dir_, partial_, path_;
  bool prepared_ = false, warned_ = false;  // the writer thread's
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::string> pending_;
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace cnnscale
