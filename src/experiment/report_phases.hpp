// The step partition of `cnnscale report`: one run's iteration split into phases that add up to the
// measured total (data, h2d, forward, backward, exposed allreduce, update, other), taken from one
// rank (the slowest) so that phases of different ranks are never stacked on one another.
#pragma once
#include <array>
#include <map>
#include <string>

#include "io/run_results.hpp"

namespace cnnscale::report {

// The parts of a step, in stacking order; "other" is what no phase timer covers.
inline constexpr std::array<const char*, 7> kStepParts = {"data",      "h2d",    "forward", "backward",
                                                          "allreduce", "update", "other"};

struct StepPartition {
  std::map<std::string, double> seconds;  // kStepParts -> mean seconds per iteration; empty: unknown
  double total = kMissing;                // the measured whole iteration (the stack's height)
  double comm_busy = kMissing;            // overlaps the parts: not one of them
  double excess = 0;  // > 0: the measured phases summed to total + excess and were scaled down to total
  int64_t rank = -1;  // the rank whose step it is (-1: from the summary, no timeline)
};

// The partition of the slowest rank (largest mean total over the non-warm-up rows of the timeline).
// Without a timeline, the summary's time_<phase>_s figures (each the slowest rank's of its own
// phase). Phases that sum past the total (the host-clock data wait overlapping device work on a
// GPU, or maxima of different ranks) are scaled by total / sum, with other = 0; `excess` says how
// much was taken off.
StepPartition partition_step(const Timeline& timeline, const RunSummary& summary);

}  // namespace cnnscale::report
