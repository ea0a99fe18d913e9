// The settings of `cnnscale train`, declared once: each entry says its name, type, default, unit,
// help, CLI flag, experiment key, when it applies, whether and how it is part of the run's identity,
// and how the report labels and groups it. The CLI (app/train_setting_options.cpp), the experiment
// schema (fixed keys and matrix axes), the sweep's command lines, the recorded run configuration
// (app/train_steps.cpp describe_run) and the report's grouping are all made from this table.
//
// It lives in experiment/ because that is the lowest layer its users share: app/ (the CLI and the
// recorded configuration) sits above it and the schema, sweep and report are in it; nothing below
// (solver, io) needs to know a flag or an experiment key. The values themselves stay in the structs
// that use them (TrainOptions, SolverConfig): app/ binds each entry to its field by name.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cnnscale {

enum class SettingType {
  Integer,     // a whole number in [min, max]
  Number,      // a real number in [min, max] ((min, max] with min_open)
  Choice,      // one of `choices`
  NumberList,  // a comma-separated list of numbers in (min, max]
};

// What decides whether a setting applies to a run: the run's device and ranks.
struct RunContext {
  bool gpu = false;        // GPU ranks (not the CPU backend)
  int64_t world_size = 1;  // ranks of the job
  bool exchanges = false;  // gradients are exchanged (a job of 2+ ranks, or one with --one-rank-exchange)
};

// How a setting enters the run's recorded configuration (run_config, hashed into the run id).
enum class Record {
  Never,       // not part of the run's identity (how fast, not what is computed)
  Always,      // always, under `name`
  NotDefault,  // only where it differs from the default: runs from before it existed keep their ids
  SolverText,  // inside the solver's one-line description (run_config.solver), as runs always had it
};

struct TrainSetting {
  std::string name;  // the experiment key's last part and the matrix axis: "lr" (solver.lr, matrix.lr)
  SettingType type = SettingType::Number;
  nlohmann::json default_value;  // as the experiment and run_config write it
  std::string unit;              // "" for a plain number
  std::string help;
  std::string flag;     // train's option: "--lr"
  std::string section;  // the experiment mapping holding its fixed key ("solver"), or "" for top level
  double min = 0, max = 0;
  bool min_open = false;             // min itself is refused (a learning rate of 0)
  std::vector<std::string> choices;  // Choice
  bool cli_checks_range = false;     // the CLI refuses a value below min as it parses (else a later check does)
  Record record = Record::Never;
  // Whether the setting applies to a run: one where it does not is recorded without it and its value
  // has no effect. Null: always.
  std::function<bool(const RunContext&)> applies;
  std::string report_label;  // the report's name for it ("lr"); "" : not a report grouping key

  std::string experiment_key() const { return section.empty() ? name : section + "." + name; }
  bool applies_to(const RunContext& c) const { return !applies || applies(c); }
  bool identity() const { return record != Record::Never; }
  // The value's text as a command line and a run id write it ("0.1", "step", "30,60").
  std::string text(const nlohmann::json& value) const;
};

// Every train setting, in --help order.
const std::vector<TrainSetting>& train_settings();
// The entry named `name`, or nullptr.
const TrainSetting* find_train_setting(const std::string& name);

// The seed of repeat `repeat` (1-based) under base seed `base`: repeat 1 has the base seed itself (the
// runs made before repeats varied keep their ids), later repeats a deterministic mix of both, in
// [0, 2^62) as the experiment's seed is.
int64_t repeat_seed(int64_t base, int64_t repeat);

// The value a recorded run configuration (run_config, as train records it) holds for `s`: its key,
// or for a solver setting the number after its label in the solver's description. Null when the run
// did not record it; its default where the rule leaves a default unrecorded.
nlohmann::json recorded_setting(const TrainSetting& s, const nlohmann::json& run_config);

}  // namespace cnnscale
