// `cnnscale report RESULTS_DIR`: the study's tables (Markdown, CSV), figures (PNG) and report.md
// from every complete run under a results directory (src/experiment/report.hpp does the work).
// Exit codes: 2 bad RESULTS_DIR or options, 1 plots not produced (tables are written anyway).
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "experiment/report.hpp"

namespace cnnscale::app {

namespace {

struct ReportArgs {
  report::ReportOptions options;
  bool no_plots = false;
  std::optional<double> target_percent;
};

}  // namespace

void register_report(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Tables (Markdown/CSV, mean ± std over repeats) and plots (PNG) from a results directory");
  cmd->add_option("results_dir", args->options.results_dir, "results directory, scanned recursively for run folders")
      ->required();
  cmd->add_option("--out", args->options.out_dir, "output directory (default: RESULTS_DIR/report)");
  cmd->add_option("--format", args->options.formats, "table formats, comma separated: md,csv")
      ->delimiter(',')
      ->default_str("md,csv");
  cmd->add_flag("--no-plots", args->no_plots, "write tables and report.md only (no python/matplotlib needed)");
  cmd->add_option("--power-run", args->options.power_run,
                  "run id or folder whose power trace is plotted (default: the run with the most GPUs)");
  cmd->add_option("--target-top1", args->target_percent,
                  "time_to_accuracy's target test top-1 in percent for every network (default: per network, the "
                  "highest every configuration reaches on average)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--baseline", args->options.baselines,
                  "JSON lines of another framework's training throughput (net, batch, mode, world, samples_per_s; "
                  "the PyTorch reference script's output) to put beside the runs: the baseline table (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--python", args->options.python,
                  "Python interpreter with matplotlib and h5py (default: $CNNSCALE_PYTHON, else /usr/bin/python3)");
  cmd->callback([args] {
    args->options.plots = !args->no_plots;
    if (args->target_percent) args->options.target_top1 = *args->target_percent / 100.0;
    const report::ReportOutcome out = report::write_report(args->options);
    std::cout << "report: " << out.runs << " run(s), " << out.configurations << " configuration(s)";
    if (out.allreduce_files) std::cout << ", " << out.allreduce_files << " allreduce bench file(s)";
    if (out.infer_files) std::cout << ", " << out.infer_files << " infer file(s)";
    if (out.calibration_files) std::cout << ", " << out.calibration_files << " calibration file(s)";
    std::cout << " -> " << out.report_md << "\n";
  });
}

}  // namespace cnnscale::app
