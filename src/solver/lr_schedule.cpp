// LrSchedule: the policies documented in lr_schedule.hpp, computed in double precision.
#include "solver/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace cnnscale {

LrSchedule::LrSchedule(const SolverConfig& config, int64_t iterations_per_epoch, int64_t total_iterations)
    : config_(config), iterations_per_epoch_(iterations_per_epoch), total_iterations_(total_iterations) {
  CNNSCALE_CHECK(iterations_per_epoch_ > 0, "iterations per epoch must be > 0, got {}", iterations_per_epoch_);
  CNNSCALE_CHECK(total_iterations_ > 0, "total iterations must be > 0, got {}", total_iterations_);
  warmup_iterations_ = config_.warmup_iterations > 0 ? config_.warmup_iterations : to_iterations(config_.warmup_epochs);
}

double LrSchedule::lr(int64_t iteration) const {
  const double e = epoch(iteration);
  double rate = config_.lr;
  switch (config_.policy) {
    case LrPolicy::Fixed:
      break;
    case LrPolicy::Step: {
      int64_t step = std::max<int64_t>(1, to_iterations(config_.step_epochs));
      rate *= std::pow(config_.gamma, static_cast<double>(iteration / step));
      break;
    }
    case LrPolicy::Exp:
      rate *= std::pow(config_.gamma, e);
      break;
    case LrPolicy::Multistep: {
      auto passed = std::count_if(config_.milestones.begin(), config_.milestones.end(),
                                  [&](double m) { return iteration >= to_iterations(m); });
      rate *= std::pow(config_.gamma, static_cast<double>(passed));
      break;
    }
    case LrPolicy::Poly: {
      double remaining = 1.0 - static_cast<double>(std::min(iteration, total_iterations_)) / total_iterations_;
      rate *= std::pow(remaining, config_.power);
      break;
    }
  }
  if (iteration < warmup_iterations_) {
    double t = static_cast<double>(iteration) / warmup_iterations_;
    rate *= config_.warmup_start_factor + (1.0 - config_.warmup_start_factor) * t;
  }
  return rate;
}

}  // namespace cnnscale
