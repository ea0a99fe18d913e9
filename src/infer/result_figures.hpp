// The measured figures of inference (batch_measure.hpp, scenario_runs.hpp) as the typed result
// that `cnnscale infer` saves and prints (io/infer_results.hpp).
#pragma once
#include <vector>

#include "infer/batch_measure.hpp"
#include "infer/inference_engine.hpp"
#include "infer/scenario_runs.hpp"
#include "io/infer_results.hpp"

namespace cnnscale::infer {

// --precision int8: the layers `engine` ran as int8 kernels and those it kept in its other precision
// (outside the table, grouped, or reading too few channels); `calibration`: --calibration's value.
InferInt8 int8_result(const InferenceEngine& engine, const std::string& calibration);
InferLatency latency_result(const LatencyStats& s);
InferBatch batch_result(const BatchFigures& f);
InferServer server_result(const ServerResult& r);
// `chosen`: the batch size every rank runs (the smallest any rank fits); `beyond`: listed sizes left out.
InferMaxBatch max_batch_result(const MaxBatch& m, int64_t chosen, const std::vector<int64_t>& beyond);
// A job's batch size: each rank's images/s and watts (NaN: not measured) in rank order, and their
// sums. Images/s and watts add up over ranks (each streams its own batches); the latency and clock
// stay rank 0's. Every GPU rank reads its own GPU; on CPU ranks the first rank of each host reads
// the host's RAPL counters and the others none, so the sum over the ranks that read is the job's.
void add_job_figures(InferBatch& b, const std::vector<double>& images_per_s, const std::vector<double>& watts);
// The scenario figures of a single-stream, server or server-search run: rank 0's rate and each rank's.
void add_scenario_figures(InferResult& r, const ScenarioFigures& f, double rate, const std::vector<double>& rates);

}  // namespace cnnscale::infer
