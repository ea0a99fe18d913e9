// `cnnscale train`'s measurement settings checked, the gathering of every rank's
// report (solver/run_report.hpp) and CUDA graph figures to rank 0, and those figures' summary entries.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "experiment/train_measure.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "io/results_writer.hpp"
#include "measure/matmul_peak.hpp"

namespace cnnscale {

void validate_measure_args(const MeasureArgs& a) {
  if (!(a.power_hz >= 0 && a.power_hz <= 1000)) throw_config("--power-hz must be in [0, 1000], got {}", a.power_hz);
  if (!(a.min_window >= 0)) throw_config("--min-window must be >= 0 seconds, got {}", a.min_window);
  if (!(a.phase_window > 0)) throw_config("--phase-window must be > 0 seconds, got {}", a.phase_window);
  if (!(a.mfu_window > 0 && a.mfu_window <= 3600))
    throw_config("--mfu-window must be in (0, 3600] seconds, got {}", a.mfu_window);
  if (a.phase_repeats < 1) throw_config("--phase-repeats must be >= 1, got {}", a.phase_repeats);
  if (a.whole_epochs < 0) throw_config("--whole-epochs must be >= 0, got {}", a.whole_epochs);
  if (a.whole_samples < 0) throw_config("--whole-samples must be >= 0, got {}", a.whole_samples);
  // Names become path components: no separators, no hidden or partial-looking folders.
  check_results_name("--experiment", a.experiment);
  if (!a.run_id.empty()) check_results_name("--run-id", a.run_id);
  if (a.run_id.ends_with(".partial"))
    throw_config("--run-id '{}': a name ending in .partial is an interrupted run's folder", a.run_id);
  static const std::regex tag_re("([A-Za-z0-9_.-]+)=(.*)");
  for (const auto& tag : a.tags)
    if (!std::regex_match(tag, tag_re)) throw_config("--tag '{}': expected KEY=VALUE", tag);
  if (!a.no_results && !a.run_id.empty()) {
    const auto folder = std::filesystem::path(a.results_root) / a.experiment / a.run_id;
    if (!run_folder_writable(folder.string()))
      throw_config("--run-id {}: {} already exists (a finished run is never overwritten)", a.run_id, folder.string());
  }
}

TrainMeasurement train_measurement(const MeasureArgs& a, measure::EnergyMonitor* energy) {
  return {.energy = energy,
          .measure = a.measure,
          .min_window_seconds = a.min_window,
          .phase_window_seconds = a.phase_window,
          .phase_repeats = a.phase_repeats};
}

GraphFigures graph_figures(const TrainResult& result) { return {result.graph_replays, result.graph_note}; }

std::string cuda_graph_text(const GraphFigures& g) {
  if (g.replays > 0) return "on";
  // No reason and no replay: the run ended before a step followed the uncaptured first one.
  if (g.note.empty()) return "off: no step ran after the first, uncaptured one";
  return "off: " + g.note;
}

GatheredRanks gather_rank_reports(const Job& job, const RankReport& mine, const GraphFigures& my_graph) {
  GatheredRanks all;
  if (job.size() == 1) {  // nothing to gather: not even the JSON round trip
    all.reports.push_back(mine);
    all.graphs.push_back(my_graph);
    return all;
  }
  const nlohmann::json text = {{"report", mine}, {"graph_replays", my_graph.replays}, {"graph_note", my_graph.note}};
  for (const std::string& t : job.gather(text.dump())) {
    const auto j = nlohmann::json::parse(t);
    all.reports.push_back(j.at("report").get<RankReport>());
    all.graphs.push_back({j.at("graph_replays").get<int64_t>(), j.at("graph_note").get<std::string>()});
  }
  return all;
}

void put_graph_figures(RunResults& results, const std::vector<GraphFigures>& graphs) {
  if (graphs.empty()) return;
  results.summary.cuda_graph = cuda_graph_text(graphs.front());
  results.summary.graph_replays = static_cast<double>(graphs.front().replays);
  results.methods["cuda_graph"] =
      "rank 0's (each rank's is in its own figures): on when training steps were replayed from a CUDA graph "
      "captured after the first step, otherwise why every step was queued op by op";
  // Rank figures exist only with a steady window; each names its rank.
  for (size_t i = 0; i < results.rank_summary.size(); ++i) {
    RankSummary& rank = results.rank_summary[i];
    const auto r = static_cast<size_t>(rank.rank.value_or(static_cast<double>(i)));
    if (r >= graphs.size()) continue;
    rank.cuda_graph = cuda_graph_text(graphs[r]);
    rank.graph_replays = static_cast<double>(graphs[r].replays);
  }
}

void put_mfu(RunResults& results, TrainResult& run, Backend& backend, Precision precision, int world_size,
             double window) {
  log::info("--mfu: measuring the device's matmul peak after training");
  const MatmulPeak peak = measure_matmul_peak(backend, compute_dtype(precision), matmul_peak_size(backend.device()),
                                              window, 3, [] { return stop_signal() != 0; });
  if (peak.stopped) {
    results.summary.matmul_peak_tflops = NumberFigure::null();
    results.summary.mfu = NumberFigure::null();
    results.methods["matmul_peak_tflops"] = "null: a stop signal ended the measurement";
    results.methods["mfu"] = "null: no matmul peak (a stop signal ended its measurement)";
    run.interrupted = true;
    run.stop_signal = stop_signal();
    run.interrupted_in = "the matmul peak measurement of --mfu";
    log::warn("stopped by {} during {} after training: the run is recorded as interrupted",
              stop_signal_name(run.stop_signal), run.interrupted_in);
    return;
  }
  results.summary.matmul_peak_tflops = peak.tflops;
  results.methods["matmul_peak_tflops"] = fmt::format(
      "rank 0's device after training: {0}x{0}x{0} {1} matmuls ({2}), {3} windows of {4} calls back to back on "
      "uniform [-1, 1) data, median; 2 n^3 FLOPs per call",
      peak.n, dtype_name(peak.dtype), precision == Precision::TF32 ? "TF32 tensor cores" : "the run's math mode",
      peak.windows, peak.calls_per_window);
  // Every rank is taken to reach rank 0's peak: exact on equal GPUs; on a mix of unequal GPUs the
  // fraction follows rank 0's device (too low when it is the fastest, too high when the slowest).
  if (results.summary.gflops.has_value() && peak.tflops > 0) {
    results.summary.mfu = results.summary.gflops.value() / 1e3 / (peak.tflops * world_size);
    results.methods["mfu"] = fmt::format("gflops / 1000 / (matmul_peak_tflops x {} ranks)", world_size);
  } else {
    results.summary.mfu = NumberFigure::null();
    results.methods["mfu"] = "null: no gflops (no steady window)";
  }
}

}  // namespace cnnscale
