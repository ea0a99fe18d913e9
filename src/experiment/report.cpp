// `cnnscale report`: scan, group, write the tables, run the plot script, write report.md (see
// report.hpp). Every file is written under a temporary name and renamed (io/atomic_file.hpp), so a
// reader never sees half a table.
#include "experiment/report.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "core/log.hpp"
#include "experiment/report_allreduce.hpp"
#include "experiment/report_data.hpp"
#include "experiment/report_figure_notes.hpp"
#include "experiment/report_hetero.hpp"
#include "experiment/report_infer.hpp"
#include "experiment/report_kernel_profiles.hpp"
#include "experiment/report_kernels.hpp"
#include "experiment/report_models.hpp"
#include "experiment/report_plots.hpp"
#include "experiment/report_runs.hpp"
#include "experiment/report_tables.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale::report {

namespace fs = std::filesystem;

namespace {

// The run whose power trace is drawn: the one named, else the one with the most ranks (the first
// in path order among equals), preferring runs that have power samples, then GPU runs.
const RunRecord* power_run(const std::vector<RunRecord>& runs, const std::string& wanted) {
  if (!wanted.empty()) {
    for (const RunRecord& r : runs)
      if (r.run_id == wanted || fs::path(r.folder) == fs::path(wanted) ||
          fs::path(r.folder).filename() == fs::path(wanted).filename())
        return &r;
    throw_config("--power-run '{}' matches no complete run (give a run id or run folder)", wanted);
  }
  const RunRecord* best = nullptr;
  auto rank = [](const RunRecord& r) {
    const double world_size = r.summary.world_size.value_or(kMissing);
    return std::make_tuple(r.power_samples > 0 ? 1 : 0, r.summary.device.value_or("") == "gpu" ? 1 : 0,
                           std::isnan(world_size) ? 0.0 : world_size);
  };
  for (const RunRecord& r : runs)
    if (!best || rank(r) > rank(*best)) best = &r;
  return best;
}

std::string describe(const RunRecord& r) {
  const DeviceNoun noun =
      r.summary.device.value_or("") == "gpu" ? DeviceNoun{"GPU", "GPUs"} : DeviceNoun{"CPU rank", "CPU ranks"};
  return fmt::format("{} ({}, {}, global batch {})", r.run_id, r.summary.net.value_or(""),
                     noun.count(r.summary.world_size.value_or(kMissing)), r.text("global_batch"));
}

std::string report_markdown(const ReportOptions& options, const ReportOutcome& outcome,
                            const std::vector<Table>& tables, bool md, bool csv, const std::string& figures_note,
                            const std::string& power_desc, const DeviceNoun& noun,
                            const std::map<std::string, std::string>& notes) {
  std::string out = "# cnnscale report\n\n";
  out += fmt::format("Results: `{}` — {} complete run(s) in {} configuration(s)", options.results_dir, outcome.runs,
                     outcome.configurations);
  if (outcome.allreduce_files) out += fmt::format(", {} `bench allreduce` file(s)", outcome.allreduce_files);
  if (outcome.infer_files) out += fmt::format(", {} `infer` file(s)", outcome.infer_files);
  if (outcome.calibration_files) out += fmt::format(", {} `calibrate` file(s)", outcome.calibration_files);
  if (outcome.kernel_files) out += fmt::format(", {} `bench gemm|conv` result(s)", outcome.kernel_files);
  if (outcome.kernel_profile_files)
    out += fmt::format(", {} kernel profile(s) (`time|bench conv --kernels`)", outcome.kernel_profile_files);
  if (outcome.unreadable) out += fmt::format("; {} unreadable run folder(s) skipped", outcome.unreadable);
  // The identity keys are some sixty (kGroupKeys): named here by kind, not listed one by one.
  out += ". Values are mean ± sample standard deviation over repeats (runs equal in every identity key: the "
         "network, data, device, precision, measure mode, global batch, rank count, the gradient exchange's "
         "settings, the device models and every other setting a run records; runs.csv lists each run's); — is unknown "
         "(null).\n\n";
  // The source documents are five: a title's citation names its document, and the map says how
  // far each table and figure is reproduced. A path in words: no link works from a results folder.
  out += "Titles that cite a source document name it (Castro et al., Li et al.); `docs/seeds.md` in the cnnscale "
         "sources maps each of their tables and figures to the command that reproduces it, and what differs.\n\n";
  // Whether a ± over repeats includes the spread over seeds or is timing noise alone.
  if (outcome.seeds == "seeds: vary")
    out += "Repeats: each repeat of a sweep point trained with a seed of its own (seeds: vary), so ± includes the "
           "spread over seeds.\n\n";
  if (outcome.seeds == "seeds: fixed")
    out += "Repeats: every repeat of a sweep point trained with the point's one seed (seeds: fixed), so ± is "
           "timing noise and the accuracy repeats.\n\n";
  if (outcome.seeds == "seeds: mixed")
    out += "Repeats: some sweep points varied their repeats' seeds (seeds: vary), others kept one (seeds: "
           "fixed).\n\n";
  if (!outcome.interrupted.empty()) {
    // Their figures cover only the steps before the signal: averaging them in would mislead.
    out += fmt::format(
        "Left out: {} interrupted run(s) (stopped by a signal before the end; `--resume auto` "
        "continues them):",
        outcome.interrupted.size());
    for (const std::string& f : outcome.interrupted)
      out += " `" + fs::path(f).lexically_relative(options.results_dir).string() + "`";
    out += ".\n\n";
  }
  out += fmt::format("Every run, one row each with its recorded settings and figures: [{}]({}).\n\n", kRunsCsvFile,
                     kRunsCsvFile);
  out += "## Tables\n\n";
  for (const Table& t : tables) {
    out += fmt::format("- [{}](#{})", t.title, t.name);
    if (md) out += fmt::format(" — [{}.md]({}.md)", t.name, t.name);
    if (csv) out += fmt::format(" — [{}.csv]({}.csv)", t.name, t.name);
    out += "\n";
  }
  for (const Table& t : tables) {
    out += fmt::format("\n<a id=\"{}\"></a>\n\n### {}\n\n{}\n\n", t.name, t.title, t.caption);
    out += render_markdown(t);
  }
  out += "\n## Figures\n\n";
  if (outcome.figures.empty() && outcome.figures_left_out.empty()) {
    out += figures_note + "\n";
  } else {
    const std::string& many = noun.many;
    const std::map<std::string, std::string> captions = {
        {kFigureNames[0],
         "Time per batch of the full training step per batch-" + many + " combination (Castro et al., Figs. 5–8, left)"},
        {kFigureNames[1],
         "Energy per batch of the full training step per batch-" + many + " combination (Castro et al., Figs. 5–8, right)"},
        {kFigureNames[2], "Strong scaling: samples/s against " + many + " (by_gpus), with the ideal line"},
        {kFigureNames[3], "Power over time per GPU of " + power_desc},
        {kFigureNames[4],
         "Phase breakdown of the full training step per configuration (slowest rank, stacked "
         "parts adding up to the total)"},
        {kHeteroFigures[0],
         "Busy and waiting time per batch of each rank, per mix of unequal " + many +
             " and split policy: compute time with the wait for the slowest rank stacked on it (hetero_ranks "
             "table); a balanced split makes the bars end level with little waiting"},
        {kHeteroFigures[1],
         "Samples of the global batch assigned to each rank over the iterations under the split policies that "
         "refine their shares online (auto, energy, edp): each step is a refinement from the ranks' measured "
         "compute times (one run per configuration)"},
        {kAllreduceFigure, "Allreduce bus bandwidth against message size per rank count (allreduce table)"},
        {kAllreduceEnergyFigure,
         "Allreduce energy per byte of message above the GPUs' idle power against message size per rank count "
         "(allreduce_energy table)"},
        {kGpuModelsFigure,
         "GPU models compared: time (left) and joules (right) per batch of the full training step of each GPU "
         "model per batch-GPUs combination, one panel pair per network (gpu_models table; Castro et al., Figs. "
         "5–8)"},
        {kWeakScalingFigure, "Weak scaling: efficiency against " + many + " at a fixed batch per " + noun.one +
                                 " (weak_scaling table), 1 being ideal"},
        {kInferFigures[0],
         "Inference throughput against batch size per network, device and precision (inference "
         "table)"},
        {kInferFigures[1], "Inference images per joule against batch size per network, device and precision"},
        {kInferFigures[2], "Inference p99 latency against throughput, each point a batch size"},
        {kConvSweepFigures[0],
         "Convolution time per cuDNN algorithm against the swept parameter, per pass "
         "(conv_sweep table; Li et al., Fig. 3)"},
        {kConvSweepFigures[1],
         "Device memory of a convolution call (operands and workspace) per cuDNN algorithm "
         "against the swept parameter (conv_sweep table; Li et al., Fig. 5)"},
        {kKernelFigures[0],
         "Kernel benchmarks: each problem's fastest variant as a share of the measured peak, problems sorted "
         "(kernel_cases table)"},
        {kKernelFigures[1],
         "Kernel benchmarks: energy the least-energy variant saves against the time it costs, per problem where it "
         "is not the fastest (kernel_cases table)"},
        {kKernelProfileFigure,
         "Kernel profiles: share of the step's kernel time and each hardware metric per layer type or algorithm and "
         "pass, each kernel weighted by its time; hatched bars cover less than 95 % of their group's kernel time, "
         "the share they cover written on them (kernel_profile_metrics table; Li et al., Fig. 6)"}};
    for (const std::string& path : outcome.figures) {
      const std::string name = fs::path(path).filename().string();
      const std::string& caption = captions.at(name);
      out += fmt::format("### {}\n\n![{}]({})\n\n", caption, caption, name);
      // The note the figure carries under its plot, in words a reader can copy.
      if (const auto note = notes.find(name); note != notes.end()) out += "Note: " + note->second + "\n\n";
    }
    // A figure without data is no figure: one line instead of an empty image.
    for (const auto& [name, why] : outcome.figures_left_out) out += fmt::format("- `{}` not drawn: {}.\n", name, why);
  }
  return out;
}

}  // namespace

ReportOutcome write_report(const ReportOptions& options) {
  bool md = false, csv = false;
  for (const std::string& f : options.formats) {
    if (f == "md")
      md = true;
    else if (f == "csv")
      csv = true;
    else
      throw_config("--format: unknown table format '{}' (expected md, csv or md,csv)", f);
  }
  if (!md && !csv) throw_config("--format: no table format given (expected md, csv or md,csv)");

  // Read before the runs are scanned: a bad line fails at once.
  std::vector<BaselineFile> baselines;
  for (const std::string& path : options.baselines) baselines.push_back(read_baseline(path));
  ReportOutcome outcome;
  std::vector<RunRecord> runs = scan_runs(options.results_dir, &outcome.unreadable, &outcome.interrupted);
  outcome.seeds = seeds_mode(runs);
  // `bench allreduce --results` files next to the runs (ROOT/<name>/allreduce/): a folder may hold
  // only those.
  const std::vector<AllreduceBenchFile> benches = find_allreduce_benches(options.results_dir);
  const std::vector<InferFile> inferences = find_infer_results(options.results_dir);
  const std::vector<CalibrationFile> calibrations = find_calibrations(options.results_dir);
  const std::vector<KernelBenchFile> kernels = find_kernel_benches(options.results_dir);
  const std::vector<KernelProfileFile> profiles = find_kernel_profiles(options.results_dir);
  if (runs.empty() && benches.empty() && inferences.empty() && calibrations.empty() && kernels.empty() &&
      profiles.empty())
    throw_config(
        "no complete runs under '{}' (a run folder holds run.h5; *.partial folders are ignored), no "
        "`bench allreduce` results (*/allreduce/*/summary.json or *.json), no `infer` results (*/infer/*.json) and no "
        "`calibrate` "
        "results (*/calibration/*.json), no `bench gemm|conv` results (*/bench/*/summary.json) and no kernel profiles "
        "(*/kernels/*/summary.json){}{}",
        options.results_dir, outcome.unreadable ? fmt::format("; {} unreadable run folder(s)", outcome.unreadable) : "",
        outcome.interrupted.empty() ? "" : fmt::format("; {} interrupted run(s) left out", outcome.interrupted.size()));
  const std::vector<ConfigGroup> groups = group_runs(runs);
  const DeviceNoun noun = device_noun(groups);
  std::vector<Table> tables;
  if (!baselines.empty() && runs.empty())
    throw_config("--baseline {}: no training runs under '{}' to put it beside", options.baselines.front(),
                 options.results_dir);
  if (!runs.empty()) tables = build_tables(groups, options.target_top1, baselines);
  const bool hetero = !hetero_groups(groups).empty();
  if (!benches.empty()) {
    tables.push_back(allreduce_table(benches));
    if (Table energy = allreduce_energy_table(benches); !energy.rows.empty()) tables.push_back(std::move(energy));
  }
  if (!inferences.empty()) tables.push_back(infer_table(inferences));
  if (!calibrations.empty()) tables.push_back(int8_accuracy_table(calibrations));
  bool conv_sweeps = false, kernel_cases = false;
  if (!kernels.empty()) {
    if (Table t = kernel_summary_table(kernels); !t.rows.empty()) tables.push_back(std::move(t));
    if (Table t = kernel_cases_table(kernels); !t.rows.empty()) {
      tables.push_back(std::move(t));
      kernel_cases = true;
    }
    if (Table t = conv_sweep_table(kernels); !t.rows.empty()) {
      tables.push_back(std::move(t));
      conv_sweeps = true;
    }
  }
  bool profile_metrics = false;
  if (!profiles.empty()) {
    tables.push_back(kernel_profile_top_table(profiles));
    tables.push_back(kernel_profile_resources_table(profiles));
    if (Table t = kernel_profile_metrics_table(profiles); !t.rows.empty()) {
      tables.push_back(std::move(t));
      profile_metrics = true;
    }
  }
  const RunRecord* power = options.plots && !runs.empty() ? power_run(runs, options.power_run) : nullptr;
  outcome.runs = static_cast<int>(runs.size());
  outcome.configurations = static_cast<int>(groups.size());
  outcome.allreduce_files = static_cast<int>(benches.size());
  outcome.infer_files = static_cast<int>(inferences.size());
  outcome.calibration_files = static_cast<int>(calibrations.size());
  outcome.kernel_files = static_cast<int>(kernels.size());
  outcome.kernel_profile_files = static_cast<int>(profiles.size());

  const fs::path out = options.out_dir.empty() ? fs::path(options.results_dir) / "report" : fs::path(options.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) throw_runtime("cannot create report directory {}: {}", out.string(), ec.message());
  outcome.out_dir = out.string();

  for (const Table& t : tables) {
    if (md) {
      write_file_atomically((out / (t.name + ".md")).string(),
                            "## " + t.title + "\n\n" + t.caption + "\n\n" + render_markdown(t));
      outcome.files.push_back((out / (t.name + ".md")).string());
    }
    if (csv) {
      write_file_atomically((out / (t.name + ".csv")).string(), render_csv(t));
      outcome.files.push_back((out / (t.name + ".csv")).string());
    }
  }
  // The auto split's history is per run and iteration, no table: data for its figure and for readers.
  // Every run in one file, whatever --format: the table a notebook starts from.
  write_file_atomically((out / kRunsCsvFile).string(), runs_csv(options.results_dir, runs, inferences, benches, kernels, calibrations, profiles));
  outcome.files.push_back((out / kRunsCsvFile).string());
  if (hetero && csv) {
    write_file_atomically((out / kSplitHistoryFile).string(), split_history_csv(groups));
    outcome.files.push_back((out / kSplitHistoryFile).string());
  }

  // The plot script reads the CSVs; without --format csv they go to a scratch folder.
  std::string plot_error;
  std::string figures_note = "Not produced: --no-plots.";
  const std::string power_desc = power ? describe(*power) : "";
  // Calibration files have tables and no figure.
  const bool drawable =
      !runs.empty() || !benches.empty() || !inferences.empty() || conv_sweeps || kernel_cases || profile_metrics;
  const std::map<std::string, std::string> notes = figure_notes(groups);
  if (options.plots && !drawable)
    figures_note = "None: the int8 accuracy table and kernel profiles without metrics have no figure.";
  if (options.plots && drawable) {
    const fs::path scratch = csv ? out : out / ".report_csv";
    try {
      if (!csv) {
        fs::create_directories(scratch);
        for (const Table& t : tables) write_file_atomically((scratch / (t.name + ".csv")).string(), render_csv(t));
        if (hetero) write_file_atomically((scratch / kSplitHistoryFile).string(), split_history_csv(groups));
      }
      write_file_atomically((scratch / kFigureNotesFile).string(), figure_notes_csv(notes));
      if (csv) outcome.files.push_back((scratch / kFigureNotesFile).string());
      PlotJob job{options.python,
                  options.script,
                  scratch.string(),
                  out.string(),
                  power ? (fs::path(power->folder) / "run.h5").string() : "",
                  power_desc,
                  !runs.empty(),
                  !benches.empty(),
                  hetero,
                  noun.many,
                  !inferences.empty(),
                  std::any_of(tables.begin(), tables.end(), [](const Table& t) { return t.name == "weak_scaling"; }),
                  conv_sweeps,
                  kernel_cases,
                  std::any_of(tables.begin(), tables.end(), [](const Table& t) { return t.name == kGpuModelsTable; }),
                  profile_metrics};
      PlotOutcome plotted = run_plot_script(job);
      outcome.figures = std::move(plotted.figures);
      outcome.figures_left_out = std::move(plotted.left_out);
    } catch (const Error& e) {
      plot_error = e.what();
      figures_note = "Not produced: " + plot_error;
    }
    if (!csv) fs::remove_all(scratch, ec);
  }
  outcome.files.insert(outcome.files.end(), outcome.figures.begin(), outcome.figures.end());

  outcome.report_md = (out / "report.md").string();
  write_file_atomically(outcome.report_md,
                        report_markdown(options, outcome, tables, md, csv, figures_note, power_desc, noun, notes));
  if (!plot_error.empty()) throw RuntimeError(plot_error);
  return outcome;
}

}  // namespace cnnscale::report
