// What makes a checkpoint belong to a run: the options that must match on resume, the solver
// settings and the network definition, as one JSON "identity", and the differences between two of
// them named by key path ("solver.lr", "network.layers[pool1].pool") with both values. Used when a
// run resumes (the checkpoint's identity against the command's) and when it claims a checkpoint
// directory (the owner's identity against its own).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "solver/solver_config.hpp"

namespace cnnscale {

// The settings of a solver as a JSON object, one key per field (stored in checkpoints).
nlohmann::json solver_settings(const SolverConfig& config);

// From the run configuration (JSON text, TrainJob::run_config), the solver settings (JSON text
// of solver_settings; "" for checkpoints from before they were stored: the run configuration's
// one-line "solver" summary is used instead) and the resolved network YAML ("": not compared).
// ConfigError naming `where` when a text does not parse.
nlohmann::json checkpoint_identity(const std::string& run_config, const std::string& solver,
                                   const std::string& network_yaml, const std::string& where);

struct IdentityDifference {
  std::string key;          // "batch", "solver.lr", "network.layers[pool1].pool"
  std::string was, is_now;  // JSON text of the values; "(absent)" where one side lacks the key
};
// Every difference, in key order. A key present on one side only counts; the network is compared
// only where both sides have one.
std::vector<IdentityDifference> identity_differences(const nlohmann::json& saved, const nlohmann::json& now);

// "" for one difference, " (and 1 more difference)", " (and 3 more differences)" for more.
std::string more_differences(const std::vector<IdentityDifference>& diffs);

// "solver.lr=0.02 there, solver.lr=0.01 here" style text for messages: "<key>=<was>, ... <key>=<now>".
std::string describe_difference(const IdentityDifference& d, const std::string& was_label,
                                const std::string& now_label);

}  // namespace cnnscale
