// The measurement side of `cnnscale train`: its bookkeeping settings (--results, --measure, --tag, ...,
// whose flags are the command's; the measurement settings --power-hz, --min-window, ... are entries of
// train's settings table) and their checks,
// each rank's report (identity, timeline, power samples, windows, CUDA graph) as JSON gathered to
// rank 0 over the job (job/job.hpp, which also owns each rank's energy monitor), and the assembly of the job's RunResults with its summary figures
// (job = slowest rank's time, energy summed over every GPU) for the results folder and --json.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "job/job.hpp"
#include "solver/run_report.hpp"
#include "measure/energy_monitor.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

struct MeasureArgs {
  std::string results_root = "results";
  std::string experiment = "train";
  std::string run_id;  // empty: generated
  bool no_results = false;
  MeasureMode measure = MeasureMode::Steady;
  double power_hz = 10.0;
  double min_window = 3.0;
  double phase_window = 1.0;
  int phase_repeats = 3;
  double mfu_window = 0.2;    // --mfu: shortest window of the matmul peak in seconds
  int64_t whole_epochs = 0;   // 0: the run's epochs (at least 1)
  int64_t whole_samples = 0;  // 0: the training set's size
  std::vector<std::string> tags;  // KEY=VALUE
};
// ConfigError (exit 2) for a bad mode, rate, tag, name, or a run folder that already exists.
void validate_measure_args(const MeasureArgs& args);
// The trainer's measurement from the flags, with this rank's energy monitor (null: none).
TrainMeasurement train_measurement(const MeasureArgs& args, measure::EnergyMonitor* energy);

// A rank's CUDA graph figures (TrainResult::graph_replays and graph_note), gathered beside its
// RankReport so that rank 0 can write each rank's.
struct GraphFigures {
  int64_t replays = 0;  // steps replayed from the captured graph
  std::string note;     // why no step was captured; "" when one was
};
GraphFigures graph_figures(const TrainResult& result);
// The summary's cuda_graph text: "on" when steps were replayed, otherwise "off: <note>".
std::string cuda_graph_text(const GraphFigures& graph);

// Every rank's report and graph figures, in rank order (collective over the job's ranks; a job of
// one rank returns its own). Each rank's pair travels as one JSON text (the report's keys are
// solver/rank_report.hpp's) and arrives as a RankReport and its GraphFigures.
struct GatheredRanks {
  std::vector<RankReport> reports;
  std::vector<GraphFigures> graphs;
};
GatheredRanks gather_rank_reports(const Job& job, const RankReport& mine, const GraphFigures& my_graph);

// Writes the gathered graph figures into assembled results: the job's cuda_graph and graph_replays
// are rank 0's (every rank gives the same reason), each rank's figures its own.
void put_graph_figures(RunResults& results, const std::vector<GraphFigures>& graphs);

// --mfu: measures the square-matmul peak of `backend` in `precision`'s compute dtype (windows of
// `window` seconds) and writes it and the model FLOPs utilisation (the job's gflops over world_size
// peaks) into the summary. Rank 0 alone measures, after the other ranks are done: a stop signal to it
// ends the measurement, leaves both figures null and marks `run` interrupted, as a stop in the other
// loops after training does (the caller then exits for requeue).
void put_mfu(RunResults& results, TrainResult& run, Backend& backend, Precision precision, int world_size,
             double window);

}  // namespace cnnscale
