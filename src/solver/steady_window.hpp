// SteadyWindow: the timed iterations of a run. Their host-clock seconds give samples/s, and with an
// energy monitor they are its steady window; both pause while the run evaluates or checkpoints.
#pragma once
#include <chrono>

#include "measure/energy_monitor.hpp"

namespace cnnscale {

class SteadyWindow {
 public:
  explicit SteadyWindow(measure::EnergyMonitor* energy) : energy_(energy) {}

  bool timing() const { return timing_; }
  double seconds() const { return seconds_; }  // timed so far, pauses left out

  // Both after a synchronisation, so the clock brackets completed work only.
  void start() {
    timing_ = true;
    since_ = std::chrono::steady_clock::now();
    if (energy_) energy_->open() ? energy_->resume() : energy_->begin("steady window");
  }
  void stop() {
    if (timing_) seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (timing_ && energy_) energy_->pause();
    timing_ = false;
  }

 private:
  measure::EnergyMonitor* energy_;
  bool timing_ = false;
  std::chrono::steady_clock::time_point since_{};
  double seconds_ = 0;
};

}  // namespace cnnscale
