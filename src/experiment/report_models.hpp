// The report's comparison of GPU models (Castro et al.'s Table 10, Maxwell against Pascal): the same
// configuration measured on each GPU model found in the results, side by side, with each model's
// difference from a reference model. Only runs on GPUs of one model count: a job that mixes models,
// or runs unequal ranks, measures neither model alone (the heterogeneous tables show those).
#pragma once
#include <string>
#include <vector>

#include "experiment/report_data.hpp"
#include "experiment/report_table.hpp"

namespace cnnscale::report {

// The table's name: its file stem, and what tells the report to draw its figure.
inline const std::string kGpuModelsTable = "gpu_models";

// The GPU models of the groups that ran on GPUs of one model with equal ranks, sorted by name.
std::vector<std::string> gpu_models_of(const std::vector<ConfigGroup>& groups);

// One row per configuration (network, GPU count, global batch and every other identity key but the GPU
// model) measured on at least two models; per model (the reference first, then by name) the runs, step
// time, in-step forward and backward time and joules per batch (mean ± std over repeats), and per other
// model the difference of each from the reference's in % = (reference − model) / reference × 100,
// positive where the model takes less. The reference is the model measured in the most rows (ties: by
// name). Call only where gpu_models_of has two or more models; without a shared configuration the
// table has no rows and a note that says so.
Table gpu_models_table(const std::vector<ConfigGroup>& groups);

}  // namespace cnnscale::report
