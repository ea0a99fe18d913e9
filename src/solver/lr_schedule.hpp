// Learning rate as a function of the iteration. Policies are defined over the fractional epoch
// e = iteration / iterations_per_epoch (iteration counts completed steps, so the first step uses
// e = 0); only poly is defined over iterations (1 - iteration / total_iterations):
//   fixed      lr
//   step       lr * gamma ^ floor(e / step_epochs)
//   exp        lr * gamma ^ e                      (continuous: x gamma per whole epoch)
//   multistep  lr * gamma ^ (number of milestones <= e)
//   poly       lr * (1 - iteration / total_iterations) ^ power
// Epoch boundaries (step_epochs, milestones, warmup_epochs) are rounded to the nearest iteration,
// so a step "every 0.5 epochs" falls on an exact iteration and floating-point noise never moves it.
// Warm-up multiplies the policy's value by a factor rising linearly from warmup_start_factor at
// iteration 0 to 1 at the end of the warm-up (Goyal et al., 2017), and by 1 afterwards.
#pragma once
#include <cmath>
#include <cstdint>

#include "solver/solver_config.hpp"

namespace cnnscale {

class LrSchedule {
 public:
  LrSchedule(const SolverConfig& config, int64_t iterations_per_epoch, int64_t total_iterations);

  double lr(int64_t iteration) const;
  double epoch(int64_t iteration) const { return static_cast<double>(iteration) / iterations_per_epoch_; }
  int64_t warmup_iterations() const { return warmup_iterations_; }
  int64_t to_iterations(double epochs) const {
    return static_cast<int64_t>(std::llround(epochs * static_cast<double>(iterations_per_epoch_)));
  }

 private:
  SolverConfig config_;
  int64_t iterations_per_epoch_;
  int64_t total_iterations_;
  int64_t warmup_iterations_;
};

}  // namespace cnnscale
