// What `cnnscale infer` does, below the command: the job (one rank per process; under mpirun every
// rank streams its own batches on its own device and rank 0 gathers their figures), the network and
// its engine, the batch list (or the largest batch that fits) or a scenario, and the result saved
// for `report`. The command parses, calls run_infer and prints.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/precision.hpp"
#include "infer/batch_measure.hpp"
#include "infer/inference_engine.hpp"
#include "infer/scenario.hpp"
#include "infer/scenario_runs.hpp"
#include "io/infer_results.hpp"
#include "io/setting_values.hpp"

namespace cnnscale::infer {

// --calibration's value for a table measured on the run's own input (run_infer measures it).
inline constexpr const char* kSyntheticCalibration = "synthetic";

// infer's settings (experiment/infer_settings.cpp declares each, its flag and default) and where
// its result goes.
struct InferRequest {
  std::string net;         // name or path; default: the checkpoint's own network
  std::string checkpoint;  // a `train` checkpoint: its weights (and network, without --net)
  // Batch sizes: a list of positive integers, "max" alone, or a list ending with max (these sizes,
  // then the largest that fits: a sweep from batch 1 to the memory limit).
  std::vector<std::string> batches = {"1", "8", "64"};
  std::string precision = "fp32";
  std::string calibration;  // --precision int8: the calibration table (cnnscale calibrate --out) or "synthetic"
  std::string device = "cpu";
  std::vector<int> gpus;  // under mpirun: the GPU of each node-local rank
  std::string fill = "gaussian";
  double memory_limit_gib = 0;  // --batch max: 0 = the device's memory (GPU) or half the host's free memory
  uint64_t seed = 1;
  double power_hz = 10;
  bool fold = true;
  bool fuse = true;
  std::string fc_gemv = "auto";  // batch-1 fully connected layers as GEMV (GPU): auto, on or off
  bool graph = true;
  BatchMeasureOptions measure;
  // Scenarios after MLPerf Inference: offline (each batch size's throughput), single-stream, server
  // (Poisson arrivals at `rate`, dynamic batching) and server-search (the highest rate whose p99
  // meets the bound). MLPerf's ResNet-50 server bound is 15 ms.
  std::string scenario = "offline";
  double rate = 0;
  int64_t max_batch = 64;
  double latency_bound = 0.015;
  double rate_lo = 0, rate_hi = 0;
  int rate_steps = 6;
  int64_t min_queries = 100;
  std::string results_root;  // "": nothing saved
  std::string experiment = "infer";
  std::string run_id;  // names the result file (a sweep's run id); "": net, precision, scenario, device and time
  bool no_results = false;
  SettingValues settings;  // every entry of infer's table as the run was given it (the result records it)
};

// What the request asks for, as the run takes it.
struct InferPlan {
  Precision precision = Precision::FP32;  // of the network around int8's layers, or of the whole
  bool int8 = false;
  bool synthetic_table = false;  // --calibration synthetic: the scales are measured before the run
  bool offline = true;
  std::vector<int64_t> sizes;  // the listed batch sizes
  bool max = false;            // then the largest that fits
  EngineOptions engine;        // int8's scales read from the table file, unless synthetic
  ServerOptions server;
};

// ConfigError for every flag that is wrong or does not go with the others, before anything is
// loaded or a device opened; `together`: the job has 2+ ranks (server-search is refused there).
// Reads --calibration's table file, the one thing it loads.
InferPlan check_infer_request(const InferRequest& r, bool together = false);

// A run as rank 0 has it, for the command to print (every other rank's run is empty).
struct InferRun {
  bool rank0 = false;
  InferPlan plan;
  InferResult result;  // as saved (provenance and settings included)
  std::string backend_description;
  bool on_cpu = true;
  std::size_t folded_batch_norms = 0, fused_epilogues = 0;
  std::string cuda_graph;
  int64_t graph_replays = 0;
  bool distributed = false;
  int ranks = 1;
  // offline: each batch size's figures, in result.batches' order; with max, the fit found.
  std::vector<BatchFigures> rows;
  std::optional<MaxBatch> max;
  // the other scenarios: the run's figures and rank 0's rate (queries/s, or the server's achieved).
  std::optional<ScenarioFigures> scenario;
  double rate = 0;
};

// Checks `r` (check_infer_request), runs it as the job its launch makes and saves rank 0's result
// where `r` says. A listed batch size beyond the largest that fits is left out, said on stderr.
InferRun run_infer(const InferRequest& r);

}  // namespace cnnscale::infer
