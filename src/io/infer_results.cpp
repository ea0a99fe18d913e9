// The schema tables of `cnnscale infer` results (see infer_results.hpp), in results/README.md's
// order, and the result files' folder and writing.
#include "io/infer_results.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "io/atomic_file.hpp"
#include "io/results_writer.hpp"

namespace cnnscale {

using namespace schema_presence;

std::span<const SchemaField<InferLatency>> InferLatency::fields() {
  using L = InferLatency;
  static const std::vector<SchemaField<L>> f = {
      field<&L::count>("count", "", R, "queries (or batches) timed"),
      field<&L::mean_s>("mean_s", "s", R, "mean latency"),
      field<&L::p50_s>("p50_s", "s", R, "median latency"),
      field<&L::p90_s>("p90_s", "s", R, "90th percentile (MLPerf's single-stream metric)"),
      field<&L::p99_s>("p99_s", "s", R, "99th percentile"),
      field<&L::max_s>("max_s", "s", R, "longest latency"),
  };
  return f;
}

std::span<const SchemaField<InferInt8>> InferInt8::fields() {
  using I = InferInt8;
  static const std::vector<SchemaField<I>> f = {
      field<&I::calibration>("calibration", "", R, "the calibration table's path, or synthetic"),
      field<&I::int8_layers>("int8_layers", "", R, "layers that ran as int8 kernels"),
      field<&I::int8_outputs>("int8_outputs", "", R, "int8 convolutions whose outputs stayed int8"),
      field<&I::kept>("kept", "", R, "layers that ran in the other precision"),
      field<&I::between_layers>("between_layers", "", R, "that other precision (bf16 on a GPU, fp32 on the CPU)"),
  };
  return f;
}

std::span<const SchemaField<InferRankFigures>> InferRankFigures::fields() {
  using K = InferRankFigures;
  static const std::vector<SchemaField<K>> f = {
      field<&K::rank>("rank", "", R, "the MPI rank"),
      field<&K::images_per_s>("images_per_s", "images/s", R, "its throughput"),
      field<&K::watts>("watts", "W", R, "its power over the window (null: not measured)"),
  };
  return f;
}

std::span<const SchemaField<InferBatch>> InferBatch::fields() {
  using B = InferBatch;
  static const std::vector<SchemaField<B>> f = {
      field<&B::batch>("batch", "images", R, "the batch size"),
      field<&B::images_per_s>("images_per_s", "images/s", R, "throughput of back-to-back batches"),
      field<&B::window_batches>("window_batches", "", O, "batches in the throughput window"),
      field<&B::window_seconds>("window_seconds", "s", O, "length of the throughput window"),
      field<&B::latency_batches>("latency_batches", "", O, "batches timed alone"),
      field<&B::latency_mean_s>("latency_mean_s", "s", O, "mean latency of a batch timed alone"),
      field<&B::latency_p50_s>("latency_p50_s", "s", R, "median latency"),
      field<&B::latency_p90_s>("latency_p90_s", "s", O, "90th percentile latency"),
      field<&B::latency_p99_s>("latency_p99_s", "s", R, "99th percentile latency"),
      field<&B::joules_per_image>("joules_per_image", "J", R, "energy per image over the window (null: not measured)"),
      field<&B::images_per_joule>("images_per_joule", "images/J", R, "images per joule (null: not measured)"),
      field<&B::watts>("watts", "W", O, "power over the window (null: not measured)"),
      field<&B::energy_source>("energy_source", "", O, "gpu (NVML), cpu (RAPL) or null"),
      field<&B::sm_clock_mhz>("sm_clock_mhz", "MHz", O, "SM clock during the window (null on CPUs)"),
      field<&B::peak_memory_bytes>("peak_memory_bytes", "bytes", R, "memory of this batch size's nets"),
      field<&B::ranks>("ranks", "", O, "mpirun: each rank's figures"),
      field<&B::job_images_per_s>("job_images_per_s", "images/s", O, "mpirun: the ranks' summed throughput"),
      field<&B::job_watts>("job_watts", "W", O, "mpirun: the ranks' summed power (null: not measured)"),
      field<&B::job_images_per_joule>("job_images_per_joule", "images/J", O, "mpirun: the job's images per joule"),
  };
  return f;
}

std::span<const SchemaField<InferMaxBatch>> InferMaxBatch::fields() {
  using M = InferMaxBatch;
  static const std::vector<SchemaField<M>> f = {
      field<&M::batch>("batch", "images", R, "the largest batch size that fits"),
      field<&M::limit_bytes>("limit_bytes", "bytes", R, "the memory budget"),
      field<&M::fixed_bytes>("fixed_bytes", "bytes", R, "the memory model's fixed part"),
      field<&M::bytes_per_sample>("bytes_per_sample", "bytes", R, "the memory model's part per sample"),
      field<&M::listed_beyond>("listed_beyond", "images", R, "listed batch sizes left out: beyond the budget"),
  };
  return f;
}

std::span<const SchemaField<InferServer>> InferServer::fields() {
  using S = InferServer;
  static const std::vector<SchemaField<S>> f = {
      field<&S::offered_rate>("offered_rate", "queries/s", R, "the Poisson arrivals' rate"),
      field<&S::achieved_rate>("achieved_rate", "queries/s", R, "queries / (last completion - first arrival)"),
      field<&S::queries>("queries", "", R, "queries served"),
      field<&S::batches>("batches", "", R, "dynamic batches run"),
      field<&S::mean_batch>("mean_batch", "queries", R, "mean dynamic batch size"),
      field<&S::latency_bound_s>("latency_bound_s", "s", R, "the bound on the p99 latency"),
      field<&S::latency>("latency", "", R, "latency from arrival to completion"),
      field<&S::within_bound>("within_bound", "", R, "fraction of queries within the bound"),
      field<&S::meets_bound>("meets_bound", "", R, "p99 <= bound"),
  };
  return f;
}

std::span<const SchemaField<InferResult>> InferResult::fields() {
  using F = InferResult;
  static const std::vector<SchemaField<F>> f = {
      field<&F::format>("format", "", O, "cnnscale-infer-1 (files only)"),
      field<&F::time>("time", "", O, "UTC end of the run"),
      field<&F::results>("results", "", O, "--json's copy only: the file written"),
      field<&F::command>("command", "", O, "infer"),
      field<&F::scenario>("scenario", "", O, "offline, single-stream, server or server-search (absent: offline)"),
      field<&F::run_id>("run_id", "", O, "--run-id's value"),
      field<&F::net>("net", "", R, "the network's name"),
      field<&F::device>("device", "", R, "rank 0's device"),
      field<&F::precision>("precision", "", R, "fp32, tf32, bf16, fp16 or int8"),
      field<&F::int8>("int8", "", O, "int8 only (null otherwise): the layers and the table"),
      field<&F::checkpoint>("checkpoint", "", O, "the checkpoint (null: initialised weights)"),
      field<&F::fill>("fill", "", O, "the input fill: gaussian or constant"),
      field<&F::folded_batch_norms>("folded_batch_norms", "", O, "batch norms folded into convolutions"),
      field<&F::fused_epilogues>("fused_epilogues", "", O, "layers that took over the ReLU or sum after them"),
      field<&F::fc_gemv>("fc_gemv", "", O, "GPU: batch-1 fully connected layers: auto, on or off (null on the CPU)"),
      field<&F::cuda_graph>("cuda_graph", "", O, "on, or off: <why>"),
      field<&F::graph_replays>("graph_replays", "", O, "forward passes replayed from CUDA graphs"),
      field<&F::engine_cache>("engine_cache", "", O, "CNNSCALE_ENGINE_CACHE's file (null: none)"),
      field<&F::world_size>("world_size", "", O, "ranks (absent: 1)"),
      field<&F::devices>("devices", "", O, "each rank's device in rank order"),
      field<&F::batches>("batches", "", O, "offline: one per batch size"),
      field<&F::max_batch>("max_batch", "", O, "--batch max only: the size chosen and its memory model"),
      field<&F::queries>("queries", "", O, "single-stream: queries served"),
      field<&F::latency>("latency", "", O, "single-stream: latency statistics"),
      field<&F::server>("server", "", O, "server, server-search: the run's figures"),
      field<&F::best_rate>("best_rate", "queries/s", O, "server-search: the highest rate that met the bound"),
      field<&F::resolution>("resolution", "queries/s", O, "server-search: the bisection's resolution"),
      field<&F::trials>("trials", "", O, "server-search: every trial's server figures"),
      field<&F::queries_per_s>("queries_per_s", "queries/s", O, "scenarios: rank 0's rate"),
      field<&F::job_queries_per_s>("job_queries_per_s", "queries/s", O, "scenarios: the sum over ranks"),
      field<&F::rank_queries_per_s>("rank_queries_per_s", "queries/s", O, "scenarios: each rank's rate"),
      field<&F::joules_per_query>("joules_per_query", "J", O, "scenarios: energy per query (null: not measured)"),
      field<&F::watts>("watts", "W", O, "scenarios: power (null: not measured)"),
      field<&F::energy_source>("energy_source", "", O, "scenarios: gpu, cpu or null"),
      field<&F::prepared_batch_sizes>("prepared_batch_sizes", "images", O, "scenarios: batch sizes nets were prepared for"),
      field<&F::padded_fraction>("padded_fraction", "", O, "scenarios: share of computed samples that were padding"),
      field<&F::provenance>("provenance", "", O, "the build, command line, start and end time and hosts"),
      field<&F::settings>("settings", "", O, "every setting of the command's table as it ran, {name: value} (absent in older files)"),
  };
  return f;
}

nlohmann::json infer_result_json(const InferResult& r) { return to_json_object(r); }

InferResult infer_result_from_json(const nlohmann::json& j, const std::string& file) {
  return from_json_object<InferResult>(j, file);
}

std::string infer_results_dir(const std::string& root, const std::string& experiment) {
  return (std::filesystem::path(root) / experiment / "infer").string();
}

std::string prepare_infer_results(const std::string& root, const std::string& experiment, const std::string& run_id,
                                  bool no_results, bool rank0) {
  if (no_results || root.empty()) {
    if (!run_id.empty()) throw_config("--run-id names a result file: give --results (or $CNNSCALE_RESULTS)");
    return "";
  }
  check_results_name("--experiment", experiment);
  const std::string dir = infer_results_dir(root, experiment);
  if (!run_id.empty()) {
    check_results_name("--run-id", run_id);
    std::error_code ec;
    const std::string file = (std::filesystem::path(dir) / (run_id + ".json")).string();
    if (std::filesystem::exists(file, ec))
      throw_config("--run-id {}: {} exists already; results are never replaced", run_id, file);
  }
  if (rank0) prepare_writable_dir(dir);
  return dir;
}

std::string write_infer_result(const std::string& dir, const std::string& stem, InferResult r, bool numbered) {
  r.format = std::string(kInferFormat);
  r.results = TextFigure();  // the file's own path is --json's, not the file's
  return write_new_file(dir, stem, ".json", infer_result_json(r).dump(2) + "\n", numbered);
}

void save_infer_result(InferResult& r, const std::string& dir, const std::string& run_id) {
  const auto [iso, stamp] = utc_times(std::chrono::system_clock::now());
  r.time = iso;
  if (dir.empty()) return;
  std::string stem = run_id;  // a sweep's run id, recorded in the file too
  if (stem.empty()) {
    std::string device = r.device.value_or("");
    std::replace(device.begin(), device.end(), ':', '_');
    stem = fmt::format("{}-{}-{}-{}-{}", r.net.value_or(""), r.precision.value_or(""), r.scenario.value_or("offline"),
                       device, stamp);
  } else {
    r.run_id = run_id;
  }
  // A run id names one file: if it appeared meanwhile, fail rather than write <id>-1.json, which a
  // sweep would never find.
  r.results = write_infer_result(dir, stem, r, run_id.empty());
}

}  // namespace cnnscale
