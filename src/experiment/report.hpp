// `cnnscale report RESULTS_DIR`: reads every complete run under a results directory (interrupted
// runs are named in report.md and left out), writes the
// tables (Markdown and/or CSV), the PNG figures (scripts/report_plots.py under Debian's python3
// with matplotlib) and report.md linking them all, into RESULTS_DIR/report/ unless told otherwise.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cnnscale::report {

struct ReportOptions {
  std::string results_dir;
  std::string out_dir;                            // "" = <results_dir>/report
  std::vector<std::string> formats{"md", "csv"};  // table files to write: md, csv
  bool plots = true;                              // false (--no-plots): tables and report.md only
  std::string power_run;                          // run id or folder for the power trace; "" = the run with most GPUs
  // time_to_accuracy's test top-1 target (a fraction); unset: per network, the highest every
  // configuration reaches on average.
  std::optional<double> target_top1;
  std::string python;                             // "" = $CNNSCALE_PYTHON, else /usr/bin/python3, else python3 on PATH
  std::string script;  // "" = $CNNSCALE_REPORT_SCRIPT, else the source tree's or installed copy
  // Another framework's measurements to put beside the runs' (report_baseline.hpp): the baseline table.
  std::vector<std::string> baselines;
};

struct ReportOutcome {
  std::string out_dir;
  std::string report_md;
  std::vector<std::string> files;                                     // every table file and figure written
  std::vector<std::string> figures;                                   // PNG paths
  std::vector<std::pair<std::string, std::string>> figures_left_out;  // figure name -> why (no data)
  std::vector<std::string> interrupted;  // folders of interrupted runs, left out of tables and figures
  int runs = 0, configurations = 0, unreadable = 0;
  std::string seeds;  // how the sweep runs' repeats were seeded (seeds_mode); "" when none says
  int allreduce_files = 0;  // `bench allreduce` results files in the allreduce table
  int infer_files = 0;      // `infer --results` files (the offline ones make the inference table)
  int calibration_files = 0;  // `calibrate --results` files (the int8 accuracy table)
  int kernel_files = 0;       // `bench gemm|conv --results` folders (the kernels tables)
  int kernel_profile_files = 0;  // `time|bench conv --kernels` folders (the kernel_profile tables)
};

inline const std::vector<std::string> kFigureNames = {"time_per_batch.png", "joules_per_batch.png", "scaling.png",
                                                      "power_trace.png", "phases.png"};
// Drawn when the heterogeneous tables are (report_hetero.hpp): each rank's busy and waiting time per
// mix and split, and the shares over the iterations of `auto` splits.
inline const std::vector<std::string> kHeteroFigures = {"rank_balance.png", "split_history.png"};
// Drawn when the weak_scaling table is (some configuration has the 1-GPU run of its per-GPU batch):
// weak-scaling efficiency against the GPU count per network and per-GPU batch.
inline const std::string kWeakScalingFigure = "weak_scaling.png";
// Drawn when the results hold `bench allreduce` files: busbw against message size per rank count.
inline const std::string kAllreduceFigure = "allreduce_busbw.png";
// With them, where those files measured energy: nJ per byte above idle against message size.
inline const std::string kAllreduceEnergyFigure = "allreduce_energy.png";
// From `infer` results (the inference table): throughput and images/J against batch size, p99 latency
// against throughput.
// Drawn when a `bench conv --sweep` folder is among the results: time and memory per cuDNN algorithm
// against the swept parameter (Li et al.'s Figures 3 and 5).
inline const std::vector<std::string> kConvSweepFigures = {"conv_sweep_time.png", "conv_sweep_memory.png"};
// From kernel_cases.csv: each benchmark's problems by share of the peak; least-energy variants'
// savings against their time cost.
inline const std::vector<std::string> kKernelFigures = {"kernels_peak.png", "kernels_energy.png"};
// Drawn when a kernel profile with metrics is among the results: the runtime share and each measured
// metric per layer type or algorithm and pass (kernel_profile_metrics table; Li et al.'s Fig. 6).
inline const std::string kKernelProfileFigure = "kernel_profile_metrics.png";
// Drawn when the gpu_models table is (the runs measured more than one GPU model): per network, time and
// joules per batch of each model per batch-GPUs combination (Castro et al.'s Figs. 5-8).
inline const std::string kGpuModelsFigure = "gpu_models.png";
inline const std::vector<std::string> kInferFigures = {"inference_throughput.png", "inference_efficiency.png",
                                                       "inference_latency.png"};

// Writes the report. Errors: a bad RESULTS_DIR, neither a complete run nor a `bench allreduce`
// file, or a bad option is a ConfigError (exit 2). With plots requested, a missing python/matplotlib or a failing plot
// script is a RuntimeError (exit 1) thrown after the tables and report.md were written, naming --no-plots.
ReportOutcome write_report(const ReportOptions& options);

}  // namespace cnnscale::report
