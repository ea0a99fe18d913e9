// The figures' notes of `cnnscale report` (see report_figure_notes.hpp).
#include "experiment/report_figure_notes.hpp"

#include "experiment/report.hpp"
#include "experiment/report_hetero.hpp"
#include "experiment/report_table.hpp"
#include "experiment/report_tables.hpp"

namespace cnnscale::report {

namespace {

std::string joined(const std::vector<std::string>& sentences) {
  std::string out;
  for (const std::string& s : sentences) out += (out.empty() ? "" : " ") + s;
  return out;
}

}  // namespace

std::map<std::string, std::string> figure_notes(const std::vector<ConfigGroup>& groups) {
  std::vector<const ConfigGroup*> all;
  for (const ConfigGroup& g : groups) all.push_back(&g);
  // The time, energy and phase figures draw every configuration, unequal ranks among them; the
  // scaling figures leave those out and compare rank counts, where the BLAS threads matter.
  const std::string every = joined(emulation_notes(all));
  std::map<std::string, std::string> notes = {
      {kFigureNames[0], every},
      {kFigureNames[1], every},
      {kFigureNames[2], thread_note(groups, Scaling::Strong)},
      {kFigureNames[4], every},
      {kWeakScalingFigure, thread_note(groups, Scaling::Weak)},
      {kHeteroFigures[0], joined(emulation_notes(hetero_groups(groups)))},
      {kHeteroFigures[1], joined(emulation_notes(refined_online_groups(groups)))}};
  std::erase_if(notes, [](const auto& n) { return n.second.empty(); });
  return notes;
}

std::string figure_notes_csv(const std::map<std::string, std::string>& notes) {
  std::string out = "figure,note\n";
  for (const auto& [figure, note] : notes) out += csv_field(figure) + "," + csv_field(note) + "\n";
  return out;
}

}  // namespace cnnscale::report
