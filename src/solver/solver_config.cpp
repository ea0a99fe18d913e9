// SolverConfig parsing and validation, shared by the CLI and experiment files.
#include "solver/solver_config.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace cnnscale {

LrPolicy parse_lr_policy(const std::string& text) {
  if (text == "fixed") return LrPolicy::Fixed;
  if (text == "step") return LrPolicy::Step;
  if (text == "exp") return LrPolicy::Exp;
  if (text == "multistep") return LrPolicy::Multistep;
  if (text == "poly") return LrPolicy::Poly;
  throw_config("unknown learning-rate policy '{}' (expected fixed, step, exp, multistep or poly)", text);
}

std::string lr_policy_name(LrPolicy policy) {
  switch (policy) {
    case LrPolicy::Fixed:
      return "fixed";
    case LrPolicy::Step:
      return "step";
    case LrPolicy::Exp:
      return "exp";
    case LrPolicy::Multistep:
      return "multistep";
    case LrPolicy::Poly:
      return "poly";
  }
  return "?";
}

const std::vector<std::string>& SolverConfig::keys() {
  static const std::vector<std::string> k = {
      "lr",    "momentum",      "weight_decay",      "lr_policy",           "gamma",      "step",         "milestones",
      "power", "warmup_epochs", "warmup_iterations", "warmup_start_factor", "lr_scaling", "lr_base_batch"};
  return k;
}

SolverConfig SolverConfig::parse(const ConfigNode& node) {
  node.require_map();
  const auto& k = keys();
  node.check_keys(std::set<std::string>(k.begin(), k.end()));
  SolverConfig c;
  c.lr = node.get_or<double>("lr", c.lr);
  c.momentum = node.get_or<double>("momentum", c.momentum);
  c.weight_decay = node.get_or<double>("weight_decay", c.weight_decay);
  if (auto p = node.child("lr_policy")) {
    try {
      c.policy = parse_lr_policy(p->as<std::string>());
    } catch (const ConfigError& e) {
      p->fail(e.what());
    }
  }
  c.gamma = node.get_or<double>("gamma", c.gamma);
  c.step_epochs = node.get_or<double>("step", c.step_epochs);
  if (auto m = node.child("milestones")) c.milestones = m->as_list<double>();
  c.power = node.get_or<double>("power", c.power);
  c.warmup_epochs = node.get_or<double>("warmup_epochs", c.warmup_epochs);
  c.warmup_iterations = node.get_or<int64_t>("warmup_iterations", c.warmup_iterations);
  c.warmup_start_factor = node.get_or<double>("warmup_start_factor", c.warmup_start_factor);
  c.lr_scaling = node.get_or<std::string>("lr_scaling", c.lr_scaling);
  c.lr_base_batch = node.get_or<int64_t>("lr_base_batch", c.lr_base_batch);
  c.validate([&](const std::string& key, const std::string& message) {
    if (auto child = node.child(key)) child->fail(message);
    node.fail(key + ": " + message);
  });
  return c;
}

void SolverConfig::validate(const std::function<void(const std::string&, const std::string&)>& fail) const {
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(lr) || lr <= 0) fail("lr", fmt::format("must be > 0, got {}", lr));
  if (!finite(momentum) || momentum < 0 || momentum >= 1)
    fail("momentum", fmt::format("must be in [0, 1), got {}", momentum));
  if (!finite(weight_decay) || weight_decay < 0)
    fail("weight_decay", fmt::format("must be >= 0, got {}", weight_decay));
  if (!finite(gamma) || gamma <= 0) fail("gamma", fmt::format("must be > 0, got {}", gamma));
  if (policy == LrPolicy::Step && (!finite(step_epochs) || step_epochs <= 0))
    fail("step", fmt::format("must be > 0 epochs, got {}", step_epochs));
  if (policy == LrPolicy::Multistep) {
    if (milestones.empty()) fail("milestones", "the multistep policy needs at least one milestone epoch");
    for (size_t i = 0; i < milestones.size(); ++i) {
      if (!finite(milestones[i]) || milestones[i] <= 0)
        fail("milestones", fmt::format("epochs must be > 0, got {}", milestones[i]));
      if (i > 0 && milestones[i] <= milestones[i - 1]) fail("milestones", "epochs must be strictly increasing");
    }
  } else if (!milestones.empty()) {
    fail("milestones", fmt::format("only used by the multistep policy (policy is {})", lr_policy_name(policy)));
  }
  if (!finite(power) || power < 0) fail("power", fmt::format("must be >= 0, got {}", power));
  if (!finite(warmup_epochs) || warmup_epochs < 0)
    fail("warmup_epochs", fmt::format("must be >= 0, got {}", warmup_epochs));
  if (warmup_iterations < 0) fail("warmup_iterations", fmt::format("must be >= 0, got {}", warmup_iterations));
  if (warmup_epochs > 0 && warmup_iterations > 0)
    fail("warmup_iterations", "give warm-up either in epochs or in iterations, not both");
  if (!finite(warmup_start_factor) || warmup_start_factor < 0 || warmup_start_factor > 1)
    fail("warmup_start_factor", fmt::format("must be in [0, 1], got {}", warmup_start_factor));
  if (lr_scaling != "none" && lr_scaling != "linear")
    fail("lr_scaling", fmt::format("must be none or linear, got '{}'", lr_scaling));
  if (lr_base_batch < 1) fail("lr_base_batch", fmt::format("must be >= 1, got {}", lr_base_batch));
}

double SolverConfig::scaled_lr(int64_t global_batch) const {
  if (lr_scaling != "linear") return lr;
  return lr * static_cast<double>(global_batch) / static_cast<double>(lr_base_batch);
}

std::string SolverConfig::describe() const {
  std::string policy_text = lr_policy_name(policy);
  switch (policy) {
    case LrPolicy::Fixed:
      break;
    case LrPolicy::Step:
      policy_text += fmt::format("(gamma {}, every {} epochs)", gamma, step_epochs);
      break;
    case LrPolicy::Exp:
      policy_text += fmt::format("(gamma {} per epoch)", gamma);
      break;
    case LrPolicy::Multistep:
      policy_text += fmt::format("(gamma {} at epochs {})", gamma, fmt::join(milestones, ","));
      break;
    case LrPolicy::Poly:
      policy_text += fmt::format("(power {})", power);
      break;
  }
  std::string warm;
  if (warmup_epochs > 0) warm = fmt::format(", warm-up {} epochs from x{}", warmup_epochs, warmup_start_factor);
  if (warmup_iterations > 0)
    warm = fmt::format(", warm-up {} iterations from x{}", warmup_iterations, warmup_start_factor);
  const std::string scaling =
      lr_scaling == "linear" ? fmt::format(" scaled linearly from batch {}", lr_base_batch) : std::string();
  return fmt::format("lr {}{} momentum {} weight decay {} policy {}{}", lr, scaling, momentum, weight_decay,
                     policy_text, warm);
}

}  // namespace cnnscale
