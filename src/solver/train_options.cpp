// The settings' own checks.
#include "solver/train_options.hpp"

#include "core/error.hpp"

namespace cnnscale {

void TrainMeasurement::check() const {
  if (!(min_window_seconds >= 0)) throw_config("--min-window must be >= 0 seconds");
  if (!(phase_window_seconds > 0)) throw_config("--phase-window must be > 0 seconds");
  if (phase_repeats < 1) throw_config("--phase-repeats must be >= 1, got {}", phase_repeats);
}

void check_input_decode(TrainOptions::InputDecode decode, bool cpu) {
  if (decode == TrainOptions::InputDecode::Host && cpu)
    throw_config("--host-decode applies to GPU runs: a CPU run normalises and augments on the host anyway");
}

}  // namespace cnnscale
