// SolverConfig: SGD hyper-parameters and the learning-rate schedule, from command-line flags or an
// experiment file's `solver:` mapping. Schedules are written in epochs (fractions allowed) so that
// one configuration means the same training whatever the batch size or GPU count.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace cnnscale {

enum class LrPolicy { Fixed, Step, Exp, Multistep, Poly };

LrPolicy parse_lr_policy(const std::string& text);  // ConfigError listing the choices
std::string lr_policy_name(LrPolicy policy);

struct SolverConfig {
  double lr = 0.01;  // base learning rate
  double momentum = 0.9;
  double weight_decay = 5e-4;
  LrPolicy policy = LrPolicy::Fixed;
  double gamma = 0.1;              // step, exp, multistep: factor per step / per epoch
  double step_epochs = 1.0;        // step: epochs between two multiplications by gamma
  std::vector<double> milestones;  // multistep: epochs at which lr is multiplied by gamma
  double power = 1.0;              // poly: lr * (1 - iteration / total_iterations) ^ power
  // Linear warm-up from lr * warmup_start_factor to the schedule's lr; at most one of the two
  // lengths is non-zero.
  double warmup_epochs = 0.0;
  int64_t warmup_iterations = 0;
  double warmup_start_factor = 0.1;
  // The linear scaling rule (Goyal et al.): "linear" trains a global batch B with lr * B /
  // lr_base_batch (pair it with a warm-up); "none" takes lr as given.
  std::string lr_scaling = "none";
  int64_t lr_base_batch = 64;

  // lr for a global batch under lr_scaling.
  double scaled_lr(int64_t global_batch) const;

  // Keys of the YAML form; CLI flags are the same names with '-' for '_' (lr_policy: --lr-policy).
  static const std::vector<std::string>& keys();
  // From a mapping such as {lr: 0.1, lr_policy: multistep, milestones: [30, 60]}; unknown keys and
  // invalid values fail with the file, line and key path.
  static SolverConfig parse(const ConfigNode& node);

  // Calls fail(key, message) for the first invalid value (callers turn key into a flag or a path).
  void validate(const std::function<void(const std::string& key, const std::string& message)>& fail) const;
  // A one-line summary for logs: "lr 0.01 momentum 0.9 wd 0.0005 policy step(gamma 0.1, every 1 epochs)".
  std::string describe() const;
};

}  // namespace cnnscale
