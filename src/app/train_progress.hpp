// Progress of `cnnscale train` on stderr: on a terminal, one bar redrawn in place (at most ten
// times a second) with the last loss and samples/s; otherwise (logs, CI) a plain line per display
// interval. Epoch summaries and messages are always whole lines.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "solver/trainer.hpp"

namespace cnnscale::app {

class TrainProgress {
 public:
  explicit TrainProgress(int64_t iterations_per_epoch);
  void iteration(int64_t done, int64_t total);
  void display(const DisplayInfo& d);
  void epoch(const EpochInfo& e);
  void message(const std::string& text);  // a whole line, not interrupting the bar
  void finish();

 private:
  void draw(int64_t done, int64_t total);
  void clear_bar();

  bool tty_;
  int64_t iterations_per_epoch_;
  bool bar_shown_ = false;
  double last_loss_ = -1, last_rate_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace cnnscale::app
