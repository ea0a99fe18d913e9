// The scenarios of infer/scenario.hpp on a real network: dynamic batch sizes served by nets of a few
// prepared sizes, each run followed by a device synchronisation, inside an energy window.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/batch_measure.hpp"
#include "infer/inference_engine.hpp"
#include "infer/scenario.hpp"
#include "measure/energy_monitor.hpp"

namespace cnnscale::infer {

// A batch of n samples runs on the net of the smallest prepared size >= n: powers of two up to
// max_batch, and max_batch itself. A server's batch sizes vary from one batch to the next; building
// a net for each would put allocations and algorithm searches inside the timed run, and inference
// servers (Triton's preferred batch sizes, TensorRT's optimisation profiles) pad the same way. The
// padding is counted.
class PaddedBatchRunner {
 public:
  PaddedBatchRunner(InferenceEngine& engine, int64_t max_batch);
  // Builds every prepared size and runs each `runs` times (allocation, algorithm search, clocks).
  void warm(int64_t runs);
  // One batch of n samples to completion: the RunBatch of the scenarios.
  void operator()(int64_t n);
  int64_t size_for(int64_t n) const;
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t samples() const { return samples_; }  // asked for since construction
  int64_t padded() const { return padded_; }    // computed beyond them
  void reset_counts() { samples_ = padded_ = 0; }

 private:
  InferenceEngine& engine_;
  std::vector<int64_t> sizes_;
  int64_t samples_ = 0, padded_ = 0;
};

struct ScenarioFigures {
  std::string scenario;  // "single-stream", "server", "server-search"
  std::optional<SingleStreamResult> single_stream;
  std::optional<ServerResult> server;          // server, or the search's best run
  std::optional<RateSearchResult> search;      // server-search
  std::vector<int64_t> prepared_sizes;
  double padded_fraction = 0;                  // padded samples / samples computed
  WindowEnergy energy;                       // of the single-stream or server run (not the search)
};

// Single-stream: one sample at a time for at least `seconds` and `min_queries`.
ScenarioFigures run_single_stream_scenario(InferenceEngine& engine, measure::EnergyMonitor* energy, double seconds,
                                           int64_t min_queries);
// Server at one offered rate.
ScenarioFigures run_server_scenario(InferenceEngine& engine, measure::EnergyMonitor* energy,
                                    const ServerOptions& options);
// The highest rate meeting the bound: hi <= 0 takes the offline throughput at max_batch (no server
// can beat it), lo <= 0 takes hi / 64.
ScenarioFigures run_server_search(InferenceEngine& engine, const ServerOptions& base, double lo, double hi, int steps);

}  // namespace cnnscale::infer
