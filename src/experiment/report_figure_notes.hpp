// The notes of `cnnscale report`'s figures: what a figure's data can and cannot show, said under
// the figure itself (scripts/report_plots.py draws each as a footnote) and under its image in
// report.md. The words are the tables' notes, made once: emulation_notes (report_hetero.hpp) for
// figures that draw unequal ranks, thread_note (report_tables.hpp) for the scaling figures.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "experiment/report_data.hpp"

namespace cnnscale::report {

// figure,note: one line per figure that has a note, beside the tables the plot script reads.
inline const std::string kFigureNotesFile = "figure_notes.csv";

// Figure file name (report.hpp's kFigureNames, kHeteroFigures, kWeakScalingFigure) -> its note;
// figures without one are absent.
std::map<std::string, std::string> figure_notes(const std::vector<ConfigGroup>& groups);
std::string figure_notes_csv(const std::map<std::string, std::string>& notes);

}  // namespace cnnscale::report
