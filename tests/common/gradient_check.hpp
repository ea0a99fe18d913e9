// Finite-difference gradient checker in the spirit of Caffe's GradientChecker: the objective is a
// fixed random projection of the tops, L = sum_j r_j * top_j (for loss layers r = loss_weight),
// and every analytic d L / d bottom and d L / d param is compared with a central difference.
// CPU only: it perturbs tensors in place through host pointers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layer_harness.hpp"

namespace cnnscale::testing {

struct GradCheckOptions {
  float step = 1e-2f;
  // |analytic - numeric| <= threshold * max(|analytic|, |numeric|, floor). Caffe uses floor 1; 0.1
  // is tighter (catches errors in small gradients) and still ~10x above the float noise of the
  // objective divided by 2 * step for the tensor sizes these tests use.
  float threshold = 1e-2f;
  float floor = 0.1f;
  // Bottom elements x with |x - kink| < kink_range are skipped (ReLU: kink 0); negative disables.
  float kink = 0.0f;
  float kink_range = -1.0f;
  uint64_t seed = 1701;  // of the projection r
  Phase phase = Phase::Train;
  std::vector<int> bottoms;  // which bottoms to check; empty: every f32 bottom
  bool check_params = true;
};

struct GradCheckResult {
  int64_t checked = 0;
  int64_t skipped = 0;
  int64_t failures = 0;
  double max_error = 0.0;  // largest |analytic - numeric| / max(|a|, |n|, floor)
  std::string report;      // the first failures, one per line
};

GradCheckResult check_gradients(LayerHarness& h, const GradCheckOptions& options = {});

}  // namespace cnnscale::testing
