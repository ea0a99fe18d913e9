// The scenarios on a real network: padded batch sizes, warm-up, and the energy window.
#include "infer/scenario_runs.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace cnnscale::infer {

PaddedBatchRunner::PaddedBatchRunner(InferenceEngine& engine, int64_t max_batch) : engine_(engine) {
  if (max_batch < 1) throw_config("--max-batch must be >= 1, got {}", max_batch);
  for (int64_t s = 1; s < max_batch; s *= 2) sizes_.push_back(s);
  sizes_.push_back(max_batch);
}

int64_t PaddedBatchRunner::size_for(int64_t n) const {
  CNNSCALE_CHECK(n >= 1 && n <= sizes_.back(), "batch of {} for prepared sizes up to {}", n, sizes_.back());
  return *std::lower_bound(sizes_.begin(), sizes_.end(), n);
}

void PaddedBatchRunner::warm(int64_t runs) {
  engine_.release_nets();
  for (int64_t s : sizes_)
    for (int64_t i = 0; i < std::max<int64_t>(runs, 1); ++i) engine_.run(s);
  engine_.synchronize();
}

void PaddedBatchRunner::operator()(int64_t n) {
  const int64_t size = size_for(n);
  engine_.run(size);
  engine_.synchronize();
  samples_ += n;
  padded_ += size - n;
}

namespace {

double padded_fraction(const PaddedBatchRunner& r) {
  const int64_t computed = r.samples() + r.padded();
  return computed > 0 ? static_cast<double>(r.padded()) / static_cast<double>(computed) : 0.0;
}

}  // namespace

namespace {
// One scenario run on prepared, warmed nets inside an energy window: `run(clock, runner)` returns
// the scenario's result and `samples(result)` how many queries it served.
template <class Run, class Samples>
ScenarioFigures measured_run(InferenceEngine& engine, measure::EnergyMonitor* energy, int64_t max_batch,
                             const char* scenario, Run&& run, Samples&& samples) {
  PaddedBatchRunner runner(engine, max_batch);
  runner.warm(3);
  SteadyClock clock;
  ScenarioFigures f;
  f.scenario = scenario;
  f.prepared_sizes = runner.sizes();
  EnergyWindow window(energy, scenario, !engine.backend().device().is_cpu());
  const int64_t served = samples(run(clock, runner, f));
  f.energy = window.close(served, static_cast<double>(served));
  f.padded_fraction = padded_fraction(runner);
  return f;
}
}  // namespace

ScenarioFigures run_single_stream_scenario(InferenceEngine& engine, measure::EnergyMonitor* energy, double seconds,
                                           int64_t min_queries) {
  return measured_run(
      engine, energy, 1, "single-stream",
      [&](SteadyClock& clock, PaddedBatchRunner& runner, ScenarioFigures& f) -> const SingleStreamResult& {
        return f.single_stream.emplace(run_single_stream(clock, [&](int64_t n) { runner(n); }, {seconds, min_queries}));
      },
      [](const SingleStreamResult& r) { return r.queries; });
}

ScenarioFigures run_server_scenario(InferenceEngine& engine, measure::EnergyMonitor* energy,
                                    const ServerOptions& options) {
  return measured_run(
      engine, energy, options.max_batch, "server",
      [&](SteadyClock& clock, PaddedBatchRunner& runner, ScenarioFigures& f) -> const ServerResult& {
        return f.server.emplace(run_server(clock, [&](int64_t n) { runner(n); }, options));
      },
      [](const ServerResult& r) { return r.queries; });
}

ScenarioFigures run_server_search(InferenceEngine& engine, const ServerOptions& base, double lo, double hi,
                                  int steps) {
  PaddedBatchRunner runner(engine, base.max_batch);
  runner.warm(3);
  SteadyClock clock;
  if (hi <= 0) {
    const OfflineResult offline = run_offline(clock, [&](int64_t n) { runner(n); }, {base.max_batch, 1.0, 5});
    hi = offline.samples_per_s;
    runner.reset_counts();  // the calibration's full batches are not the search's padding
  }
  if (lo <= 0) lo = hi / 64;
  if (!(lo < hi)) throw_config("--rate-lo ({}) must be below --rate-hi ({})", lo, hi);
  ScenarioFigures f;
  f.scenario = "server-search";
  f.prepared_sizes = runner.sizes();
  f.search = find_max_server_rate(clock, [&](int64_t n) { runner(n); }, base, lo, hi, steps);
  f.server = f.search->best;
  f.padded_fraction = padded_fraction(runner);
  return f;
}

}  // namespace cnnscale::infer
