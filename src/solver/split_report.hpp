// The summary figures of a run on unequal ranks (split policy and shares, imbalance, waiting,
// efficiency against the ideal combined throughput), per rank and for the job; see run_summary.hpp.
#pragma once
#include <vector>

#include "io/run_results.hpp"
#include "solver/rank_report.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

// Fills res.split and the split figures of res.summary and res.rank_summary from the timeline already
// in `res`, rank 0's split record and every rank's report. A single rank on a whole device with the
// even split gets none of them (nothing is unequal).
void put_split_figures(RunResults& res, const TrainResult& rank0_result, const std::vector<RankReport>& ranks);

}  // namespace cnnscale
