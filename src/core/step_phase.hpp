// The phases of one training step, in the order of the results files' timeline axis (and of the
// HDF5 `phases` attribute). One enum for the timer that records them, the results that store
// them and the report that reads them; here because all three sit above core.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace cnnscale {

enum class TimelinePhase { Data, H2D, Forward, Backward, Allreduce, CommBusy, Update, Total };
inline constexpr std::array<std::string_view, 8> kTimelinePhaseNames = {"data",      "h2d",       "forward", "backward",
                                                                        "allreduce", "comm_busy", "update",  "total"};
inline constexpr int64_t kTimelinePhaseCount = static_cast<int64_t>(kTimelinePhaseNames.size());

}  // namespace cnnscale
