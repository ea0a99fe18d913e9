// What rank 0 of `cnnscale train` records as the run goes, beside what it prints: the training
// curve (loss, lr and samples/s at every display step, for run.h5's /curve) and the run's
// progress.json (io/progress_file.hpp), rewritten at each display step for a user or a notebook.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "io/progress_file.hpp"
#include "io/provenance.hpp"
#include "io/run_results.hpp"
#include "measure/energy_monitor.hpp"
#include "measure/power_sampler.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

class TrainWatch {
 public:
  // `run_id`: where the results go (empty with --no-results: no progress file, the curve only).
  // `energy`: rank 0's monitor, whose sampler's readings of the GPU's energy counter give the
  // progress's watts (null, no GPU or no sampler: none). The watch itself never reads the GPU.
  TrainWatch(const std::string& results_root, const std::string& experiment, const std::string& run_id,
             const Provenance& started, measure::EnergyMonitor* energy);

  void iteration(int64_t done, int64_t total);  // the first one writes a record without a loss yet
  void display(const DisplayInfo& d);

  // The curve so far (start_iteration: `start`, the iteration the run began at).
  TrainingCurve curve(int64_t start) const;
  // The last record with `status` (complete or interrupted) and `iteration`, as progress.json's text
  // for the finished folder; "" without a progress file.
  std::string final_progress(const std::string& status, int64_t iteration) const;
  std::string progress_path() const { return file_ ? file_->path() : std::string(); }
  // Ends the progress file's writes: before the results writer takes the partial folder over.
  void close() {
    if (file_) file_->close();
  }

 private:
  void write();
  std::unique_ptr<ProgressFile> file_;
  ProgressRecord record_;
  std::chrono::steady_clock::time_point since_;
  std::optional<measure::PowerSample> newest_sample() const;
  measure::EnergyMonitor* energy_ = nullptr;
  std::optional<measure::PowerSample> last_sample_;  // the reading the next display's watts start from
  bool started_ = false;
  TrainingCurve curve_;
};

// A resumed run's curve: the points up to `mine.start_iteration` from the interrupted run's folder
// ROOT/<experiment>/<run_id> (its results are about to be replaced), then `mine`. Unchanged when
// there is no such folder or it has no curve (a warning when it cannot be read).
TrainingCurve carry_curve(const std::string& results_root, const std::string& experiment, const std::string& run_id,
                          TrainingCurve mine);
// A resumed run's provenance (resumed_provenance): `mine` with the start and the earlier resumes of
// the interrupted run in the same folder, where it has one (a warning when it cannot be read).
Provenance carry_provenance(const std::string& results_root, const std::string& experiment, const std::string& run_id,
                            Provenance mine);

}  // namespace cnnscale
