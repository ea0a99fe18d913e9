// The table of train's settings (train_settings.hpp) and what reads a setting back from a recorded
// run configuration. To add a setting: one entry below, its field in train_setting_fields.cpp,
// and the code that uses it; docs/architecture.md ("Settings") says what each part makes of it.
#include "experiment/train_settings.hpp"

#include <map>
#include <optional>

namespace cnnscale {

namespace {

constexpr double kBig = 1e6;
constexpr int64_t kSeedLimit = int64_t(1) << 62;

// A solver setting: in section solver, recorded in the solver's description.
Setting solver(Setting s) {
  s.section = "solver";
  s.record = Record::SolverText;
  s.group = option_group::kNetworkSolver;
  return s;
}
Setting number(std::string name, double def, std::string help, double min, double max, bool min_open) {
  return solver(number_setting(std::move(name), def, std::move(help), min, max, min_open));
}
Setting integer(std::string name, int64_t def, std::string help, double min, double max) {
  return solver(integer_setting(std::move(name), def, std::move(help), min, max));
}
Setting choice(std::string name, std::string def, std::string help, std::vector<std::string> choices) {
  return solver(choice_setting(std::move(name), std::move(def), std::move(help), std::move(choices)));
}

SettingTable make_settings() {
  SettingTable all;
  auto add = [&](TrainSetting s, const std::string& flag = "", std::string report = "", std::string unit = "") {
    if (!flag.empty()) s.flag = flag;
    s.report_label = std::move(report);
    s.unit = std::move(unit);
    all.push_back(std::move(s));
  };
  add_top_settings(all);
  // The seed is recorded always (run_config.seed); the report groups a sweep's runs by the base seed
  // of their point (tag seed_base), so that repeats of varied seeds stay one configuration.
  {
    TrainSetting seed = integer_setting("seed", 1, "Seed of weight init, shuffling, dropout and synthetic data", 0,
                                        static_cast<double>(kSeedLimit));
    seed.record = Record::Always;
    seed.group = option_group::kNetworkSolver;
    add(std::move(seed), "", "seed");
  }
  // The solver's settings are recorded in its one-line description (run_config.solver), as every run
  // id so far was made from: a value that changes the training changes that text.
  add(number("lr", 0.01, "Base learning rate", 0, kBig, true), "", "lr");
  {
    TrainSetting s = choice("lr_scaling", "none",
                            "linear: train the global batch B with lr x B / --lr-base-batch (the linear scaling "
                            "rule; pair it with --warmup); none: lr as given",
                            {"none", "linear"});
    add(std::move(s), "", "lr_scaling");
  }
  {
    TrainSetting s = integer("lr_base_batch", 64, "the global batch --lr is meant for under --lr-scaling linear", 1,
                             double(int64_t(1) << 30));
    s.cli_check = CliCheck::AtLeast;
    add(std::move(s), "", "lr_base_batch", "samples");
  }
  add(number("momentum", 0.9, "SGD momentum", 0, 1, false), "", "momentum");
  add(number("weight_decay", 5e-4, "L2 weight decay", 0, kBig, false), "", "weight_decay");
  add(choice("lr_policy", "fixed", "fixed, step, exp, multistep or poly", {"fixed", "step", "exp", "multistep", "poly"}),
      "", "lr_policy");
  add(number("gamma", 0.1, "step/exp/multistep factor", 0, kBig, true), "", "gamma");
  add(number("step", 1.0, "step: epochs between lr drops", 0, kBig, true), "", "step", "epochs");
  {
    TrainSetting s = number("milestones", 0, "multistep: epochs of lr drops (comma-separated)", 0, kBig, true);
    s.type = SettingType::NumberList;
    s.default_value = nlohmann::json::array();
    add(std::move(s), "", "milestones", "epochs");
  }
  add(number("power", 1.0, "poly: exponent", 0, kBig, false), "", "power");
  add(number("warmup", 0.0, "Linear warm-up length in epochs", 0, kBig, false), "", "warmup", "epochs");
  add(integer("warmup_iterations", 0, "Linear warm-up length in iterations", 0, double(int64_t(1) << 40)), "",
      "warmup_iterations", "iterations");
  add(number("warmup_start_factor", 0.1, "Warm-up starts at lr x this", 0, 1, false), "", "warmup_start_factor");
  add_run_settings(all);
  add_checkpoint_settings(all);
  add_measure_settings(all);
  add_parallel_settings(all);
  add_data_settings(all);
  add_rank_settings(all);
  return all;
}

// Where a solver setting stands in SolverConfig::describe()'s text: the words before its value and,
// where two settings share them, the words after it.
struct InText {
  std::string before, after;
};
const std::map<std::string, InText>& solver_text_places() {
  static const std::map<std::string, InText> places = {
      {"lr", {"lr ", ""}},
      {"momentum", {" momentum ", ""}},
      {"weight_decay", {" weight decay ", ""}},
      {"lr_policy", {" policy ", ""}},
      {"gamma", {"(gamma ", ""}},
      {"step", {" every ", " epochs"}},
      {"milestones", {" at epochs ", ")"}},
      {"power", {"(power ", ")"}},
      {"warmup", {", warm-up ", " epochs"}},
      {"warmup_iterations", {", warm-up ", " iterations"}},
      {"warmup_start_factor", {" from x", ""}},
      {"lr_base_batch", {" scaled linearly from batch ", ""}},
  };
  return places;
}

// The value after `place.before` in `text`, up to a space, comma or parenthesis, or nullopt; with
// `place.after`, only where those words follow it.
std::optional<std::string> value_in_text(const std::string& text, const InText& place) {
  for (size_t at = text.find(place.before); at != std::string::npos; at = text.find(place.before, at + 1)) {
    const size_t start = at + place.before.size();
    size_t end = start;
    while (end < text.size() && text[end] != ' ' && text[end] != '(' && text[end] != ')' &&
           (text[end] != ',' || place.after == ")"))
      ++end;
    if (end == start) continue;
    if (!place.after.empty() && text.compare(end, place.after.size(), place.after) != 0) continue;
    return text.substr(start, end - start);
  }
  return std::nullopt;
}

}  // namespace

const SettingTable& train_settings() {
  static const SettingTable settings = make_settings();
  return settings;
}

const TrainSetting* find_train_setting(const std::string& name) { return find_setting(train_settings(), name); }

int64_t repeat_seed(int64_t base, int64_t repeat) {
  if (repeat <= 1) return base;
  // splitmix64 of the pair: neighbouring bases and repeats give unrelated seeds.
  uint64_t z = static_cast<uint64_t>(base) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(repeat);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<int64_t>(z >> 2);  // < 2^62
}

nlohmann::json recorded_setting(const TrainSetting& s, const nlohmann::json& run_config) {
  if (!run_config.is_object()) return nullptr;
  if (s.record == Record::SolverText) {
    const auto solver = run_config.find("solver");
    if (solver == run_config.end() || !solver->is_string()) return nullptr;
    const std::string text = solver->get<std::string>();
    if (s.name == "lr_scaling") return text.find(" scaled linearly ") != std::string::npos ? "linear" : "none";
    const auto place = solver_text_places().find(s.name);
    if (place == solver_text_places().end()) return nullptr;
    const std::optional<std::string> value = value_in_text(text, place->second);
    // Not in the text: the setting did not apply (gamma of a fixed policy), so its value changed nothing.
    if (!value) return s.default_value;
    return *value;
  }
  if (s.record == Record::Described) {
    // AugmentOptions::describe's text ("random crop, pad 4, mirror"); none where neither is on.
    const auto text = run_config.find(s.key());
    if (text == run_config.end() || !text->is_string()) return s.default_value;
    const std::string described = text->get<std::string>();
    if (s.name == "mirror") return described.find("mirror") != std::string::npos;
    if (s.name == "crop_pad") {
      const std::optional<std::string> pad = value_in_text(described, {"pad ", ""});
      if (!pad) return s.default_value;
      if (pad->find_first_not_of("0123456789") != std::string::npos || pad->size() > 18) return nullptr;
      return std::stoll(*pad);
    }
    return nullptr;
  }
  const auto it = run_config.find(s.key());
  if (it != run_config.end()) return *it;
  return s.record == Record::NotDefault ? s.default_value : nlohmann::json(nullptr);
}

}  // namespace cnnscale
