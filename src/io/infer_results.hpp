// `cnnscale infer` results: the run as a typed struct (InferResult) whose schema table (infer_results.cpp)
// writes the JSON object `--json` prints and the file `--results` saves, and reads it back for the
// report and the sweep. One file per run under ROOT/<experiment>/infer/, never half-written, never replaced.
#pragma once
#include <string>
#include <vector>

#include "io/provenance_field.hpp"
#include "io/result_schema.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

inline constexpr const char* kInferFormat = "cnnscale-infer-1";

// Latency statistics of queries or batches timed alone (nearest-rank percentiles), seconds.
struct InferLatency {
  CountFigure count;
  NumberFigure mean_s, p50_s, p90_s, p99_s, max_s;
  static std::span<const SchemaField<InferLatency>> fields();
  bool operator==(const InferLatency&) const = default;
};

// --precision int8: which layers ran as int8 kernels and with which table.
struct InferInt8 {
  TextFigure calibration;  // the table's path, or "synthetic"
  TextListFigure int8_layers, int8_outputs, kept;
  TextFigure between_layers;
  static std::span<const SchemaField<InferInt8>> fields();
  bool operator==(const InferInt8&) const = default;
};

// One rank's figures of an offline batch size in an mpirun job.
struct InferRankFigures {
  CountFigure rank;
  NumberFigure images_per_s, watts;
  static std::span<const SchemaField<InferRankFigures>> fields();
  bool operator==(const InferRankFigures&) const = default;
};

// One offline batch size (rank 0's figures; the job's sums under mpirun).
struct InferBatch {
  CountFigure batch, window_batches, latency_batches;
  NumberFigure images_per_s, window_seconds;
  NumberFigure latency_mean_s, latency_p50_s, latency_p90_s, latency_p99_s;
  NumberFigure joules_per_image, images_per_joule, watts;
  TextFigure energy_source;
  NumberFigure sm_clock_mhz;
  CountFigure peak_memory_bytes;
  Figure<std::vector<InferRankFigures>> ranks;
  NumberFigure job_images_per_s, job_watts, job_images_per_joule;
  static std::span<const SchemaField<InferBatch>> fields();
  bool operator==(const InferBatch&) const = default;
};

// --batch max: the batch size chosen and the memory model it was predicted from.
struct InferMaxBatch {
  CountFigure batch, limit_bytes, fixed_bytes, bytes_per_sample;
  CountListFigure listed_beyond;
  static std::span<const SchemaField<InferMaxBatch>> fields();
  bool operator==(const InferMaxBatch&) const = default;
};

// A server scenario's run at one offered rate.
struct InferServer {
  NumberFigure offered_rate, achieved_rate;
  CountFigure queries, batches;
  NumberFigure mean_batch, latency_bound_s;
  Figure<InferLatency> latency;
  NumberFigure within_bound;
  FlagFigure meets_bound;
  static std::span<const SchemaField<InferServer>> fields();
  bool operator==(const InferServer&) const = default;
};

struct InferResult {
  TextFigure format;   // kInferFormat in files; absent in --json's copy
  TextFigure time;     // UTC end
  TextFigure results;  // --json's copy only: the file written
  TextFigure command, scenario, run_id;
  TextFigure net, device, precision;
  Figure<InferInt8> int8;
  TextFigure checkpoint, fill;
  CountFigure folded_batch_norms, fused_epilogues;
  TextFigure fc_gemv, cuda_graph;
  CountFigure graph_replays;
  TextFigure engine_cache;
  CountFigure world_size;
  TextListFigure devices;
  // offline
  Figure<std::vector<InferBatch>> batches;
  Figure<InferMaxBatch> max_batch;
  // single-stream, server, server-search
  CountListFigure prepared_batch_sizes;
  NumberFigure padded_fraction, queries_per_s, job_queries_per_s;
  NumberListFigure rank_queries_per_s;
  NumberFigure joules_per_query, watts;
  TextFigure energy_source;
  CountFigure queries;
  Figure<InferLatency> latency;
  Figure<InferServer> server;
  NumberFigure best_rate, resolution;
  Figure<std::vector<InferServer>> trials;
  Figure<Provenance> provenance;  // absent in files written before it was recorded
  Figure<SettingValues> settings;  // infer's table (experiment/command_settings.hpp); absent likewise
  static std::span<const SchemaField<InferResult>> fields();
  bool operator==(const InferResult&) const = default;
};

nlohmann::json infer_result_json(const InferResult& r);
// ConfigError naming `file` and the key path for a field of the wrong type or a required one missing.
InferResult infer_result_from_json(const nlohmann::json& j, const std::string& file);

std::string infer_results_dir(const std::string& root, const std::string& experiment);  // ROOT/<experiment>/infer
// Where rank 0 saves the run's result: infer_results_dir, or "" for nowhere (no root, or
// `no_results`). Checked before any work: the names (ConfigError), a --run-id's file not there yet
// (a sweep counts it done and never runs it again), and on rank 0 a folder a file can be made in.
std::string prepare_infer_results(const std::string& root, const std::string& experiment, const std::string& run_id,
                                  bool no_results, bool rank0);
// `r` with "format" set, at the first free name <dir>/<stem>[-k].json. numbered false: <dir>/<stem>.json
// only (a sweep's run id), a RuntimeError when it exists. Returns the path.
std::string write_infer_result(const std::string& dir, const std::string& stem, InferResult r, bool numbered = true);
// Completes `r` when the run ends: its time (UTC now) and `run_id` (when given); saves it in `dir`
// (unless "") as <run_id>.json or <net>-<precision>-<scenario>-<device>-<YYYYmmddTHHMMSSZ>.json and
// sets `results` to the file written.
void save_infer_result(InferResult& r, const std::string& dir, const std::string& run_id);

}  // namespace cnnscale
