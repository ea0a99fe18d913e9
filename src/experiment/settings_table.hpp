// A measuring command's settings, declared once: each entry of a command's table says a setting's
// name, type, default, unit, help, CLI flag, experiment key, when it applies, whether and how it is
// part of the run's identity, and how the report labels and groups it. A command declares its table
// (train's: train_settings.cpp) and binds each entry to the field that holds its value
// (setting_fields.hpp; app/setting_options.hpp makes the options); its CLI, its experiment schema,
// its sweep command lines, its recorded configuration and its report grouping are made from the table.
//
// It lives in experiment/ because that is the lowest layer its users share: app/ (the CLI and the
// recorded configuration) sits above it and the schema, sweep and report are in it; nothing below
// (solver, io) needs to know a flag or an experiment key. The values themselves stay in the structs
// that use them (TrainOptions, SolverConfig, ...).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cnnscale {

enum class SettingType {
  Integer,      // a whole number in [min, max]
  Number,       // a real number in [min, max] ((min, max] with min_open)
  Choice,       // one of `choices`
  NumberList,   // a comma-separated list of numbers in (min, max]
  Switch,       // true or false; its flag takes no value and sets the value that is not the default
                // (--no-graph sets false, --deterministic true)
  Text,         // free text, checked by the code that uses it
  IntegerList,  // a comma-separated list of whole numbers in [min, max]
  TextList,     // a comma-separated list of texts (a repeatable option where a text holds commas)
  Boolean,      // true or false; its flag takes the value (--update-per-bucket false). An experiment writes
                // the YAML booleans, or where `choices` holds two words, those for false and true
                // (update: after_exchange | per_bucket)
};

// What decides whether a setting applies to a run: the run's device and ranks.
struct RunContext {
  bool gpu = false;        // GPU ranks (not the CPU backend)
  std::string device = "cpu";  // the rank's device as the job bound it: cpu, gpu:N
  int64_t world_size = 1;  // ranks of the job
  bool exchanges = false;  // gradients are exchanged (a job of 2+ ranks, or one with --one-rank-exchange)
  bool graph = false;      // the run may replay its steps from a CUDA graph (a GPU run that does not turn it off)
  std::string precision = "fp32";  // --precision
  std::string split = "even";      // --split: the policy dividing the global batch among the ranks
  std::string auto_start = "probe";  // --auto-start: split auto's first shares, from the probe or even
  std::string measure = "steady";  // --measure: steady, or phases (the phase-isolated loops)
  bool mfu = false;                // --mfu: the matmul peak is measured after training
  // The data the run opened, and the network's input as it resolved (the data set's settings record
  // these): synthetic data, its training samples, the network's input shape and classes.
  bool synthetic = false;
  int64_t train_samples = 0;
  std::vector<int64_t> input_shape = {};
  int64_t classes = 0;
  int64_t global_batch = 0;        // the job's (--batch, or ranks x --batch with --batch-per-rank)
};

// How a setting enters the run's recorded configuration (run_config, hashed into the run id).
enum class Record {
  Never,       // not part of the run's identity (how fast, not what is computed)
  Always,      // always, under key()
  NotDefault,  // only where it differs from the default: runs from before it existed keep their ids
  SolverText,  // inside the solver's one-line description (run_config.solver), as runs always had it
  // Inside one description of several settings, under record_key, written by the code that uses them
  // (run_config.augment: "random crop, pad 4, mirror", AugmentOptions::describe), as runs always had it;
  // absent where every one of them has its default.
  Described,
};

// How the CLI checks a value's range as it parses it (CLI11 runs a check only on a value given). Every
// whole or real number is checked against the entry's range there, as the experiment schema checks it.
enum class CliCheck {
  Later,    // the entry's range (range_error); the code using it checks more, in its own words
  AtLeast,  // whole numbers of at least `min` ("--x: must be at least 1, got 0")
  Range,    // numbers in [min, max]
};

struct Setting {
  std::string name;  // the experiment key's last part and the matrix axis: "lr" (solver.lr, matrix.lr)
  SettingType type = SettingType::Number;
  nlohmann::json default_value;  // as the experiment and run_config write it
  std::string unit;              // "" for a plain number
  std::string help;
  std::string flag;     // the command's option: "--lr"
  std::string section;  // the experiment mapping holding its fixed key ("solver"), or "" for top level
  double min = 0, max = 0;
  bool min_open = false;             // min itself is refused (a learning rate of 0)
  std::vector<std::string> choices;  // Choice
  CliCheck cli_check = CliCheck::Later;
  Record record = Record::Never;
  std::string record_key;  // its key in the recorded configuration where not `name` ("fused_epilogues")
  // Whether the setting applies to a run: one where it does not is recorded without it and its value
  // has no effect. Null: always.
  std::function<bool(const RunContext&)> applies;
  // Where `applies` holds, in words ("runs of split auto"), for a setting the command refuses on a run
  // it does not apply to (--auto-start without --split auto): an experiment's sweep writes it only on
  // the runs it applies to, a matrix axis over it multiplies only those runs, and its key or axis in an
  // experiment none of whose runs it applies to is refused at its key path (experiment_settings.cpp).
  // "": the sweep writes it on every run, where it applies or not (the command ignores it there).
  std::string applies_only_to;
  // What the experiment's null (`display: ~`, or a key with nothing after it) means for it, where it
  // means anything: "" (every entry so far) refuses it at its key path, since the reader would
  // otherwise take it for a key left out and run the default without a word.
  std::string null_means;
  // The values only a GPU run takes, where train refuses them on the CPU (--layout nhwc, --batchnorm
  // cudnn, --host-decode): an experiment on the CPU is refused at the key path giving one, before
  // any of its runs would fail. Null: none.
  std::function<bool(const nlohmann::json& value)> gpu_only;
  std::string report_label;  // the report's name for it ("lr"); "" : not a report grouping key
  // A field of each entry of a compound matrix axis ("allreduce": matrix.allreduce's `name`) rather
  // than a fixed key and an axis of its own: such a mode is one axis value, named in the run id as a
  // whole (ov-c8-eff-lowp). Where part_of is the setting's own name (split), the setting is that
  // matrix axis itself, whose values and run-id part the experiment's own code makes. "" : a key and
  // an axis of its own.
  std::string part_of;
  // For an entry the experiment's own code reads (part_of its own name) as a key of the experiment's
  // own form rather than as the matrix axis of its name: where the experiment gives it ("epochs (or
  // iterations)", "device", "measure"). "" : that axis, matrix.<name>.
  std::string own_key;
  // Why the setting is a fixed key only, no matrix axis (matrix.<name> is refused with it), or "" where
  // it may be one: dataset.data_dir names a folder, not what a run computes.
  std::string no_axis;
  // Why the setting is no experiment key at all, only the command's option, or "" where it is one
  // (a fixed key or a matrix axis, or a field of one): --resume names a run's own checkpoint, which a
  // sweep's runs would share. The table declares it all the same, so that its option, its recording
  // rule and the reason it stays out of experiments are in one place.
  std::string no_key;
  // Its flag was accepted in an experiment's extra_args before the setting was a key (--crop-pad): it
  // still is where the file gives neither the key nor its axis, so those files read and expand as
  // they did. (A setting recorded Never is accepted so always.)
  bool extra_arg_before = false;
  // Where the experiment gives it: "matrix.allreduce's algo", "matrix.split", "train.bucket_mb (or
  // matrix.bucket_mb)".
  std::string experiment_place() const;
  std::string group;  // the --help group it is listed under; "" : the command's own options
  // A Boolean's second flag, alone giving false (--no-overlap beside --allreduce-overlap true|false):
  // the two exclude each other, and a command line writes it for false. "" : none.
  std::string false_flag;
  // The value a run records for the value given, where that depends on the run (--allreduce-dtype
  // compute records the dtype the precision stores); its rule compares that with the default. Null: as
  // given.
  std::function<nlohmann::json(const nlohmann::json& value, const RunContext&)> resolve;
  // For a field of a compound axis (part_of another name): its piece of the label that names the
  // axis's value in run ids, tags and --only (matrix.allreduce's "ov-tree-c8-lowp"), in table order.
  // For a value an axis entry gives: the word `id_words` holds for the value's text, else "-",
  // id_prefix and the text ("-tree", "-c8"); for one it leaves to the default, the word id_words holds
  // for the default, or none (the overlap is always named: ov, noov). `id_long_words`: --only's
  // spelt-out words where they differ (overlap, no-overlap).
  std::string id_prefix;
  std::map<std::string, std::string> id_words, id_long_words;
  // For a field of a compound axis: what the run's hashed configuration names where an entry gives no
  // value (null: nothing), as the configurations before the table named it.
  nlohmann::json id_absent;
  // The report's text for a recorded value, where that is not text(value): train_samples leaves out
  // the size a run chose itself (the data set's own, synthetic data's for its batch), so that runs of
  // other batches stay comparable. Null: text(value).
  std::function<std::string(const nlohmann::json& value, const nlohmann::json& run_config)> report_text;

  std::string experiment_key() const { return section.empty() ? name : section + "." + name; }
  const std::string& key() const { return record_key.empty() ? name : record_key; }
  bool applies_to(const RunContext& c) const { return !applies || applies(c); }
  bool refused_elsewhere() const { return !applies_only_to.empty(); }
  bool identity() const { return record != Record::Never; }
  // Whether an experiment can give it: a key, an axis or a field of one (no no_key).
  bool in_experiments() const { return no_key.empty(); }
  // A whole or real number's range, as the command line and the experiment schema both check it:
  // "in (0, 3600]", "at least 1" (no upper bound: kUnbounded or more), "> 0"; "" for another type.
  std::string range_text() const;
  // Why `value` is outside that range ("must be in (0, 3600], got 4000"), or "" where it is inside.
  std::string range_error(double value) const;
  // The help text with the unit and range the entry declares: "... window (s, in (0, 3600])".
  std::string help_text() const;
  // The value's text as a command line and a run id write it ("0.1", "step", "30,60", "true").
  std::string text(const nlohmann::json& value) const;
  // The command-line words that give `value`: {flag, text}; a Switch's flag alone where the value is
  // not the default, nothing where it is.
  std::vector<std::string> arguments(const nlohmann::json& value) const;
  // `value` as an experiment writes it: a Boolean of two words by its word (update: after_exchange).
  nlohmann::json experiment_value(const nlohmann::json& value) const;
  // For a field of a compound axis, given `given` by an axis entry (null: none): its piece of the
  // entry's label (id_words above), and its value in the run's hashed configuration (null: none).
  std::string id_piece(const nlohmann::json& given, bool long_form = false) const;
  nlohmann::json id_value(const nlohmann::json& given) const;
  // The value a run of context `c` records for `value` given (resolve's, else `value`).
  nlohmann::json resolved(const nlohmann::json& value, const RunContext& c) const {
    return resolve ? resolve(value, c) : value;
  }
  // Whether the run's configuration records `value` (where the setting applies).
  bool records(const nlohmann::json& value) const {
    return record == Record::Always || (record == Record::NotDefault && value != default_value);
  }
};

using SettingTable = std::vector<Setting>;

// A maximum this large stands for no upper bound (decl::kBig).
inline constexpr double kUnbounded = 1e15;

// The entry named `name` in `table`, or nullptr.
const Setting* find_setting(const SettingTable& table, const std::string& name);
// The entry whose flag is `flag`, or nullptr.
const Setting* find_setting_by_flag(const SettingTable& table, const std::string& flag);

// Entries made the common way: the flag is "--" and the name with '-' for '_', the section "", the
// rule Record::Never; the caller sets the rest.
Setting number_setting(std::string name, double def, std::string help, double min, double max, bool min_open = false);
Setting integer_setting(std::string name, int64_t def, std::string help, double min, double max);
Setting choice_setting(std::string name, std::string def, std::string help, std::vector<std::string> choices);
Setting switch_setting(std::string name, bool def, std::string help, std::string flag);
Setting text_setting(std::string name, std::string def, std::string help);
// "--" + name with '-' for '_'.
std::string default_flag(const std::string& name);

}  // namespace cnnscale
