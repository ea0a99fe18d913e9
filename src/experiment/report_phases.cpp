// Step partition of one run for the phases table and figure (see report_phases.hpp). Phase marks
// are consecutive on one rank, so its phases and the gap before the first mark tile the iteration;
// only the data phase (a host wait, counted by the host clock even on GPUs) can overlap the rest.
#include "experiment/report_phases.hpp"

#include <cmath>
#include <string_view>
#include <vector>

namespace cnnscale::report {

namespace {

// The index of a kTimelinePhaseNames name (every kStepParts part but "other", "comm_busy", "total").
size_t phase_index(std::string_view name) {
  for (size_t p = 0; p < kTimelinePhaseNames.size(); ++p)
    if (kTimelinePhaseNames[p] == name) return p;
  return static_cast<size_t>(TimelinePhase::Total);  // not reached
}

// Fills `other` and scales the measured parts down when they sum past the total.
void close_partition(StepPartition& p) {
  double sum = 0;
  for (const char* part : kStepParts)
    if (std::string_view(part) != "other") sum += p.seconds[part];
  if (sum <= p.total) {
    p.seconds["other"] = p.total - sum;
    return;
  }
  p.excess = sum - p.total;
  for (const char* part : kStepParts) p.seconds[part] *= p.total / sum;
  p.seconds["other"] = 0;
}

}  // namespace

StepPartition partition_step(const Timeline& timeline, const RunSummary& summary) {
  StepPartition out;
  const int64_t ranks = timeline.ranks();
  // Mean per rank and phase over the steady rows, as the summary's time_<phase>_s are.
  std::vector<std::array<double, kTimelinePhaseCount>> mean(static_cast<size_t>(std::max<int64_t>(ranks, 0)));
  std::vector<std::array<int64_t, kTimelinePhaseCount>> count(mean.size());
  for (auto& m : mean) m.fill(0);
  for (auto& c : count) c.fill(0);
  for (int64_t row = 0; row < timeline.iterations(); ++row) {
    if (timeline.warmup()[static_cast<size_t>(row)]) continue;
    for (int64_t r = 0; r < ranks; ++r)
      for (int64_t p = 0; p < kTimelinePhaseCount; ++p) {
        const double v = timeline.at(row, r, static_cast<TimelinePhase>(p));
        if (std::isfinite(v))
          mean[static_cast<size_t>(r)][static_cast<size_t>(p)] += v,
              ++count[static_cast<size_t>(r)][static_cast<size_t>(p)];
      }
  }
  const auto total_index = static_cast<size_t>(TimelinePhase::Total);
  int64_t slowest = -1;
  for (int64_t r = 0; r < ranks; ++r) {
    auto& m = mean[static_cast<size_t>(r)];
    const auto& c = count[static_cast<size_t>(r)];
    for (size_t p = 0; p < m.size(); ++p) m[p] = c[p] ? m[p] / static_cast<double>(c[p]) : kMissing;
    if (std::isfinite(m[total_index]) &&
        (slowest < 0 || m[total_index] > mean[static_cast<size_t>(slowest)][total_index]))
      slowest = r;
  }
  // Seconds per iteration of one phase: the slowest rank's mean, or without a timeline the summary's.
  auto phase = [&](std::string_view name) {
    return slowest >= 0 ? mean[static_cast<size_t>(slowest)][phase_index(name)]
                        : (summary.*kPhaseTimeFigures[phase_index(name)]).value_or(kMissing);
  };
  out.rank = slowest;
  out.total = phase("total");
  out.comm_busy = phase("comm_busy");
  if (!std::isfinite(out.total)) return out;
  for (const char* part : kStepParts) {
    if (std::string_view(part) == "other") continue;
    const double v = phase(part);
    out.seconds[part] = std::isfinite(v) ? v : 0.0;  // a phase this run does not have (h2d on CPU)
  }
  close_partition(out);
  return out;
}

}  // namespace cnnscale::report
