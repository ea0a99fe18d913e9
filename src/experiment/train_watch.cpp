// TrainWatch, carry_curve and carry_provenance (train_watch.hpp).
#include "experiment/train_watch.hpp"

#include <cmath>
#include <filesystem>
#include <optional>
#include <utility>

#include "core/log.hpp"
#include "io/results_writer.hpp"

namespace cnnscale {

namespace {
double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

TrainWatch::TrainWatch(const std::string& results_root, const std::string& experiment, const std::string& run_id,
                       const Provenance& started, measure::EnergyMonitor* energy)
    : since_(std::chrono::steady_clock::now()), energy_(energy) {
  if (!run_id.empty()) file_ = std::make_unique<ProgressFile>(results_root, experiment, run_id);
  record_.experiment = experiment;
  record_.run_id = run_id;
  record_.start_time = started.start_time;
  record_.loss = record_.lr = record_.samples_per_s = record_.watts = record_.epoch = NAN;
}

// The sampler's newest reading of the GPU: its thread reads NVML, never this one. An NVML call
// takes up to milliseconds, and the display step that asks has just waited for the device, which
// would idle through a read made here.
std::optional<measure::PowerSample> TrainWatch::newest_sample() const {
  if (!energy_ || !energy_->gpu_available() || !energy_->sampler()) return std::nullopt;
  return energy_->sampler()->latest(0);
}

void TrainWatch::write() {
  if (!file_) return;
  const auto now = std::chrono::system_clock::now();
  record_.time = utc_iso(now);
  record_.elapsed_s = seconds_between(since_, std::chrono::steady_clock::now());
  file_->write(record_);
}

void TrainWatch::iteration(int64_t done, int64_t total) {
  if (started_) return;
  started_ = true;
  last_sample_ = newest_sample();
  record_.iteration = done;
  record_.total = total;
  write();
}

void TrainWatch::display(const DisplayInfo& d) {
  curve_.iteration.push_back(d.iteration);
  curve_.loss.push_back(d.loss);
  curve_.lr.push_back(d.lr);
  curve_.samples_per_s.push_back(d.samples_per_s);
  record_.iteration = d.iteration;
  record_.total = d.total;
  record_.epoch = d.epoch;
  record_.loss = d.loss;
  record_.lr = d.lr;
  record_.samples_per_s = d.samples_per_s;
  // The GPU's mean power between the sampler's readings of its total-energy counter at the last
  // display step and now (NVML updates it about every 100 ms: a rough figure over short intervals,
  // as a watcher needs). No newer reading since: the last figure stands.
  if (const std::optional<measure::PowerSample> now = newest_sample()) {
    if (last_sample_ && now->t_s > last_sample_->t_s) {
      record_.watts = measure::counter_watts(*last_sample_, *now).value_or(NAN);
      last_sample_ = now;
    } else if (!last_sample_) {
      last_sample_ = now;
    }
  }
  started_ = true;
  write();
}

TrainingCurve TrainWatch::curve(int64_t start) const {
  TrainingCurve c = curve_;
  c.start_iteration = start;
  return c;
}

std::string TrainWatch::final_progress(const std::string& status, int64_t iteration) const {
  if (!file_) return "";
  ProgressRecord r = record_;
  r.status = status;
  r.iteration = iteration;
  r.time = utc_iso(std::chrono::system_clock::now());
  r.elapsed_s = seconds_between(since_, std::chrono::steady_clock::now());
  return progress_json(r).dump(2) + "\n";
}

TrainingCurve carry_curve(const std::string& results_root, const std::string& experiment, const std::string& run_id,
                          TrainingCurve mine) {
  if (mine.start_iteration <= 0) return mine;
  const std::string folder = (std::filesystem::path(results_root) / experiment / run_id).string();
  if (results_status(folder) != kRunInterrupted) return mine;
  TrainingCurve before;
  try {
    before = read_run_results(folder).curve;
  } catch (const Error& e) {
    log::warn("the curve of the interrupted run in {} is not carried on: {}", folder, e.what());
    return mine;
  }
  if (before.start_iteration < 0) return mine;  // written before curves were recorded
  TrainingCurve out;
  out.start_iteration = before.start_iteration;
  for (size_t i = 0; i < before.iteration.size() && before.iteration[i] <= mine.start_iteration; ++i) {
    out.iteration.push_back(before.iteration[i]);
    out.loss.push_back(before.loss[i]);
    out.lr.push_back(before.lr[i]);
    out.samples_per_s.push_back(before.samples_per_s[i]);
  }
  for (size_t i = 0; i < mine.iteration.size(); ++i) {
    out.iteration.push_back(mine.iteration[i]);
    out.loss.push_back(mine.loss[i]);
    out.lr.push_back(mine.lr[i]);
    out.samples_per_s.push_back(mine.samples_per_s[i]);
  }
  return out;
}

Provenance carry_provenance(const std::string& results_root, const std::string& experiment, const std::string& run_id,
                            Provenance mine) {
  const std::string folder = (std::filesystem::path(results_root) / experiment / run_id).string();
  std::optional<Provenance> before;
  if (results_status(folder) == kRunInterrupted) {
    try {
      before = read_run_results(folder).provenance;
    } catch (const Error& e) {
      log::warn("the start time of the interrupted run in {} is not carried on: {}", folder, e.what());
    }
  }
  return resumed_provenance(std::move(mine), before);
}

}  // namespace cnnscale
