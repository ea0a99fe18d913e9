// How a global batch is divided among unequal ranks: the split policies (--split), the per-rank cost
// models a start-up probe fits, the shares each model-based policy chooses, and the online
// refinement of `auto`, `energy` and `edp`. Pure arithmetic on host numbers: the Trainer measures, this decides.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cnnscale {

// even: shares differ by at most one. manual: given by hand. proportional: equal predicted compute
// time. auto: rebalanced online from measured compute time. energy / edp: the fewest predicted
// joules (or joules x seconds) per global batch, counting the power ranks draw while they wait,
// their time models refined online from measured compute time as auto's are.
enum class SplitPolicy { Even, Manual, Proportional, Auto, Energy, Edp };
SplitPolicy parse_split_policy(const std::string& text);  // ConfigError for an unknown name
// The policy of that name; nullopt for another (a results file's "", or a name this build lacks).
std::optional<SplitPolicy> split_policy_named(const std::string& text);
std::string to_string(SplitPolicy policy);
// Whether the policy needs the start-up probe's models (proportional, energy, edp).
bool split_needs_probe(SplitPolicy policy);
// Whether it needs each rank's energy besides its time (energy, edp).
bool split_needs_energy(SplitPolicy policy);
// Whether it refines its shares online from measured compute time (auto, energy, edp).
bool split_refines_online(SplitPolicy policy);

// The one check of each unequal-rank setting: `train` runs them before touching a device, the
// Trainer again for callers that build one directly. ConfigError naming the flag otherwise.
void check_rebalance_every(int64_t steps);  // >= 0 (0: no online refinement)
// Steps between online refinements unless --rebalance-every says otherwise (train's default, and
// what a sweep's runs use: part of their configuration where the policy refines).
inline constexpr int64_t kDefaultRebalanceEvery = 20;
// What the results record of how Rebalancer reads a measurement (below): the rank's whole probed
// step scaled by measured / expected. A sweep's refining runs carry it in their configuration, so
// runs refined another way (the time per sample alone, before it) are not taken as done.
inline constexpr const char* kRefineModel = "step_ratio";
void check_probe_seconds(double seconds);   // > 0
void check_slowdown(int rank, double factor);  // finite and >= 1

// A step's compute: its whole time less its exposed gradient exchange (what it waited for after
// backward; NaN, as in a single process, counts as none). What `auto` balances and what the results
// call compute_s.
inline double compute_seconds(double step_total, double exposed_exchange) {
  return step_total - (std::isnan(exposed_exchange) ? 0.0 : exposed_exchange);
}

// One rank's step as a function of its share n (samples): seconds = a + b n for forward+backward
// and joules = c + d n drawn meanwhile; while it waits at the gradient exchange for slower ranks it
// draws wait_watts. Energy terms are NaN when the rank has no energy reading.
struct RankCost {
  double seconds_fixed = 0, seconds_per_sample = 0;
  double joules_fixed = 0, joules_per_sample = 0;
  double wait_watts = 0;
  double seconds(int64_t n) const { return seconds_fixed + seconds_per_sample * static_cast<double>(n); }
  double joules(int64_t n) const { return joules_fixed + joules_per_sample * static_cast<double>(n); }
};

// A probe measurement: forward+backward of `batch` samples took `seconds` and `joules` per step.
struct ProbeSample {
  int64_t batch = 0;
  double seconds = 0;
  double joules = 0;  // NaN: not measured
};

// Least-squares lines through the samples (seconds and, when every sample has it, joules). With a
// single distinct batch size the line goes through the origin. The slope is kept positive (a rank
// cannot get faster per step by taking more samples): a negative fitted slope, which only noise
// makes, becomes the through-origin fit. `wait_watts` is copied in.
RankCost fit_rank_cost(const std::vector<ProbeSample>& samples, double wait_watts);

// The local batch sizes the probe times on every rank: around the even share e of `global_batch`
// over `ranks` (e/2, e, 2e), within [1, global_batch - ranks + 1], ascending, without repeats.
std::vector<int64_t> probe_batches(int64_t global_batch, int ranks);

// The job's gradient exchange, per step, beyond what the rank models hold: the seconds a step takes
// past its slowest rank's compute (the exchange's exposed tail, and what its kernels take from the
// backward they run beside) and the joules every rank draws past its compute and idle waiting. The
// gradients exchanged are the same at every split, so this is one cost, measured once, that moves
// every split's prediction alike (and edp's choice, whose product it changes).
struct ExchangeCost {
  double seconds = 0;
  double joules = 0;  // NaN: not measured
};

// What a split costs per global batch under the models: the step is as long as its slowest rank's
// compute plus the exchange, every rank draws its compute joules plus wait_watts for the time it
// waits, and the exchange adds its joules.
struct SplitCost {
  double seconds = 0;  // max over ranks of seconds(n_r), + exchange seconds
  double joules = 0;   // sum over ranks of joules(n_r) + wait_watts (compute max - seconds(n_r)), + exchange joules
};
SplitCost predict_split(const std::vector<int64_t>& shares, const std::vector<RankCost>& models,
                        const ExchangeCost& exchange = {});

// The exchange's cost from whole steps (forward, backward with the exchange, update) timed on every
// rank together at `shares`, one sample per rank (seconds and joules per step; all ranks take the
// same steps): the longest rank's step less the models' compute for those shares, and the ranks'
// summed joules less the models' joules for them, each at least 0 (a model that overestimates its
// compute leaves no negative exchange). Joules NaN when a step or a model has none.
ExchangeCost fit_exchange_cost(const std::vector<int64_t>& shares, const std::vector<RankCost>& models,
                               const std::vector<ProbeSample>& steps);

// The shares (whole samples, >= 1 each, summing to global_batch) that minimise the predicted step
// time (proportional), joules (energy) or joules x seconds (edp). Exact for the linear models above.
// ConfigError when the global batch is smaller than the number of ranks.
std::vector<int64_t> choose_split(SplitPolicy policy, int64_t global_batch, const std::vector<RankCost>& models,
                                  const ExchangeCost& exchange = {});

// Imbalance of per-rank compute seconds: (max - mean) / max (0 when all are equal or none is > 0).
double imbalance(const std::vector<double>& compute_seconds);

// The online refinement of `auto`, `energy` and `edp`: after each interval of measured steps,
// each rank's measured compute seconds over what its model expected at its current share (the
// ratio: how much longer the running job makes its step) is folded into a running estimate (an
// exponential average, so one noisy interval moves it only part of the way), and the shares the
// policy's objective prefers under the refined models are proposed when they improve that
// objective by more than `hysteresis` (a fraction): noise does not make the split oscillate, and a
// split within a few percent of the optimum stays.
// - auto (and the default): equal estimated compute times, proposed when they shorten the slowest
//   rank's estimated compute by more than the hysteresis (the exchange, the same at every split, is
//   left out of that comparison).
// - energy / edp (start_from with the policy): the fewest predicted joules (or joules x seconds),
//   proposed when the prediction at the shares in force is higher by more than the hysteresis.
//   The probe's power readings, taken over whole windows, are what the run cannot measure per
//   interval: each rank keeps its probed power, over a step as much longer as the ratio says (its
//   joules scale with its time); the idle power and the exchange's cost are kept.
// The refined model of a rank is its probe's line a + b n with both terms scaled by the ratio; with
// no probe (auto from even) it is all per sample, b = compute / n. One measurement cannot tell a
// fixed extra (the exchange's kernels beside a small partition's backward) from a slower sample.
// Scaling the line errs on such an extra by X b (n' - n) / (a + b n) at another share n', less
// than the X (n' - n) / n of charging it to the slope alone, which reads a rank cut to a few
// samples as many times slower per sample and cuts it further; and the next interval measures
// again at the new share. A split with a large fixed part (the update, per-layer overhead) is
// balanced as the probe balanced it, not as if every second scaled with the share.
class Rebalancer {
 public:
  explicit Rebalancer(double hysteresis = 0.03, double smoothing = 0.5)
      : hysteresis_(hysteresis), smoothing_(smoothing) {}
  // From here on the objective of `policy` (auto: time; energy, edp: joules, joules x seconds, which
  // need every model's energy terms, with the exchange's cost) and each rank's probed line, which
  // the measured / expected ratio scales. Without a call: auto, each rank's line all per sample.
  void start_from(SplitPolicy policy, const std::vector<RankCost>& models, const ExchangeCost& exchange = {});
  // `shares` in force and each rank's compute seconds per step with them (a robust average over
  // the interval); nullopt: keep them.
  std::optional<std::vector<int64_t>> propose(const std::vector<int64_t>& shares,
                                              const std::vector<double>& compute_seconds);

 private:
  double hysteresis_, smoothing_;
  SplitPolicy policy_ = SplitPolicy::Auto;
  std::vector<RankCost> models_;    // the probe's models (empty: none; then no fixed parts)
  ExchangeCost exchange_;           // energy / edp: the exchange's cost per step (auto: none)
  std::vector<double> ratio_;       // estimated measured / expected compute, by rank (0: none yet)
};

}  // namespace cnnscale
