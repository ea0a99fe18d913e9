// What `--measure` asks for, as the one enum that goes from the command line through the trainer
// to the results (the summary's `measure` figure) and the report that reads them back.
#pragma once
#include <array>
#include <optional>
#include <string_view>
#include <utility>

namespace cnnscale {

// steady: whole-iteration energy from the steady window. phases: in addition, phase-isolated loops
// (forward only, forward+backward, full step) after training, for joules and seconds per phase.
enum class MeasureMode { Steady, Phases };

// The names on the command line and in the results files.
inline constexpr std::array<std::pair<std::string_view, MeasureMode>, 2> kMeasureModes = {
    {{"steady", MeasureMode::Steady}, {"phases", MeasureMode::Phases}}};

constexpr std::string_view measure_mode_name(MeasureMode mode) {
  for (const auto& [name, m] : kMeasureModes)
    if (m == mode) return name;
  return "";
}

// The mode of a name read back from a results file; nullopt for anything else.
constexpr std::optional<MeasureMode> measure_mode_from_name(std::string_view name) {
  for (const auto& [n, m] : kMeasureModes)
    if (n == name) return m;
  return std::nullopt;
}

}  // namespace cnnscale
