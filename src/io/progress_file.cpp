// ProgressFile (progress_file.hpp): the record's JSON, and its atomic rewrites in the partial folder.
#include "io/progress_file.hpp"

#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "io/atomic_file.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

nlohmann::json progress_json(const ProgressRecord& r) {
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"format", kProgressFormat},     {"experiment", r.experiment},
          {"run_id", r.run_id},            {"status", r.status},
          {"iteration", r.iteration},      {"total", r.total},
          {"epoch", num(r.epoch)},         {"loss", num(r.loss)},
          {"lr", num(r.lr)},               {"samples_per_s", num(r.samples_per_s)},
          {"watts", num(r.watts)},         {"start_time", r.start_time},
          {"time", r.time},                {"elapsed_s", num(r.elapsed_s)}};
}

ProgressFile::ProgressFile(const std::string& results_root, const std::string& experiment, const std::string& run_id)
    : exp_dir_((fs::path(results_root) / experiment).string()),
      partial_((fs::path(exp_dir_) / (run_id + ".partial")).string()),
      path_((fs::path(partial_) / kProgressFile).string()),
      thread_([this] { loop(); }) {}

ProgressFile::~ProgressFile() {
  close();
  if (prepared_) clear_abort_cleanup();
  std::error_code ec;
  if (prepared_) fs::remove_all(partial_, ec);  // best effort: a leftover is cleared by the next run of the id
}

void ProgressFile::write(const ProgressRecord& r) {
  std::string text = progress_json(r).dump(2) + "\n";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_) return;
    pending_ = std::move(text);
  }
  wake_.notify_one();
}

void ProgressFile::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void ProgressFile::loop() {
  // Stop signals go to the training's threads, as before this one existed (core/stop_signal.hpp).
  sigset_t stops;
  sigemptyset(&stops);
  for (int signo : {SIGTERM, SIGUSR1, SIGINT}) sigaddset(&stops, signo);
  ::pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  for (;;) {
    std::string text;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return closing_ || pending_.has_value(); });
      if (!pending_) return;  // closing, nothing left in hand
      text = std::move(*pending_);
      pending_.reset();
    }
    write_now(text);
  }
}

void ProgressFile::write_now(const std::string& text) {
  try {
    if (!prepared_) {
      std::error_code ec;
      refuse_link(exp_dir_);  // the partial folder would go where it points
      fs::create_directories(exp_dir_, ec);
      if (ec) throw_runtime("{}: cannot create: {}", exp_dir_, ec.message());
      refuse_link(partial_);
      fs::remove_all(partial_, ec);  // a killed run's leftover of this id: nothing in it was published
      if (!fs::create_directory(partial_, ec) || ec) throw_runtime("{}: cannot create: {}", partial_, ec.message());
      prepared_ = true;
      // A user's second stop signal aborts at once: it takes the file and the folder with it.
      set_abort_cleanup(path_.c_str(), temp_path_for(path_).c_str(), partial_.c_str());
    }
    // Rewritten many times and of no use after a crash (the partial folder is then a killed run's):
    // renamed into place, so never seen half-written, but not flushed to disk each time.
    replace_file_unsynced(path_, text);
  } catch (const Error& e) {
    if (!warned_) log::warn("progress file not written ({}); training goes on", e.what());
    warned_ = true;
  }
}

}  // namespace cnnscale
