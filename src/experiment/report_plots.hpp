// Runs scripts/report_plots.py (matplotlib) for `cnnscale report`: finds the Python that has
// Debian's modules (/usr/bin/python3, not a pyenv shim) and the script (source tree or installed
// copy), runs it without a shell and turns its failures into one clear error line.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace cnnscale::report {

struct PlotJob {
  std::string python;            // "" = default discovery
  std::string script;            // "" = default discovery
  std::string tables_dir;        // holds time.csv, energy.csv, by_gpus.csv, phases.csv
  std::string out_dir;           // where the PNGs go
  std::string power_h5;          // run.h5 of the run whose power trace is drawn ("" = none)
  std::string power_label;       // its description for the title
  bool training = true;          // the kFigureNames figures (needs the training tables)
  bool allreduce = false;        // kAllreduceFigure from allreduce.csv, kAllreduceEnergyFigure from allreduce_energy.csv
  bool hetero = false;           // kHeteroFigures from hetero_ranks.csv and split_history.csv
  std::string devices = "GPUs";  // what the parallel units are called in legends and axes ("ranks" on CPU)
  bool inference = false;        // kInferFigures from inference.csv
  bool weak_scaling = false;     // kWeakScalingFigure from weak_scaling.csv
  bool conv_sweep = false;       // kConvSweepFigures from conv_sweep.csv
  bool kernel_cases = false;     // kKernelFigures from kernel_cases.csv
  bool gpu_models = false;       // kGpuModelsFigure from gpu_models.csv
  bool kernel_profiles = false;  // kKernelProfileFigure from kernel_profile_metrics.csv
};

struct PlotOutcome {
  std::vector<std::string> figures;                           // PNG paths written
  std::vector<std::pair<std::string, std::string>> left_out;  // figure name -> why it has no data
};

std::string find_python(const std::string& requested);
std::string find_plot_script(const std::string& requested);

// Runs the script; throws RuntimeError with the script's last stderr line (matplotlib missing:
// exit 3) when it fails. Every figure the job asks for is either written or left out with the
// script's reason (no data to draw: no placeholder image is made).
PlotOutcome run_plot_script(const PlotJob& job);

}  // namespace cnnscale::report
