// An experiment's extra_args, checked when the file is read: a flag the sweep already writes on the
// run's command line (sweep_command.cpp) would repeat it, and train or infer refuses a repeated
// flag only when each run starts, so every run of the sweep would fail one after another. Each such
// flag is refused at its own file:line:col, naming the key that sets it; so is a flag extra_args
// itself gives twice.
#include <fmt/format.h>

#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "experiment/command_settings.hpp"
#include "experiment/experiment_reader.hpp"

namespace cnnscale {

const std::map<std::string, std::string>& sweep_train_flags() {
  static const std::map<std::string, std::string> flags = [] {
    std::map<std::string, std::string> f;
    // Every train setting of the table (train_settings.hpp): its key, or its matrix axis (the network,
    // the precision, the batch, the rank sets, the split), or the field of one (matrix.allreduce's,
    // matrix.gpu_mix's sms), or the experiment's own key (epochs, device, measure). An option of train
    // alone (Setting::no_key: --resume, --batch-per-rank) is the sweep's to leave be.
    for (const TrainSetting& s : train_settings()) {
      if (!s.in_experiments()) continue;
      f[s.flag] = s.experiment_place();
      if (!s.false_flag.empty()) f[s.false_flag] = s.experiment_place();
    }
    return f;
  }();
  return flags;
}

namespace {

std::map<std::string, std::set<std::string>>& command_flags() {
  static std::map<std::string, std::set<std::string>> flags;
  return flags;
}

// An item that is a flag rather than a flag's value: "--x" or "-x"; "-1" and "-0.5" are values.
bool looks_like_flag(const std::string& arg) {
  return arg.size() >= 2 && arg[0] == '-' && (arg[1] == '-' || std::isalpha(static_cast<unsigned char>(arg[1])));
}

// A flag the run's command does not know, or one that makes it print and exit, would end every run
// of the sweep as it starts (or leave it with no result): refused when the file is read.
void check_known_flag(const ConfigNode& a, const std::string& flag, const std::string& command) {
  if (flag == "--help" || flag == "-h")
    a.fail(fmt::format("'{}' would print {}'s help instead of running", flag, command));
  if (flag == "--version") a.fail(fmt::format("'--version' would print the version instead of running {}", command));
  const auto known = command_flags().find(command);
  if (known == command_flags().end() || known->second.empty()) return;
  if (!known->second.count(flag))
    a.fail(fmt::format("'{}' is no option of cnnscale {} (see cnnscale {} --help)", flag, command, command));
}

// Where the results go and which run they are: the sweep's own bookkeeping, in either mode.
const std::set<std::string> kSweepOwnArgs = {"--results", "--run-id", "--experiment", "--no-results", "--json"};
// Tags the sweep writes itself (train_arguments): report and sweep state read them back.
const std::set<std::string> kSweepTags = {"repeat",  "config_hash", "sweep_hash", "network", "allreduce",
                                          "split",   "gpu_mix",     "cpu_mix",    "seed_base", "seeds"};

// An inference experiment's flags: those the sweep sets from the file (infer's own refusal of a
// repeated flag would fail every run only when it starts), nor a scenario's: the sweep counts a run
// done by its offline result, a table of batch sizes.
// `axes`: the infer: keys the file sweeps (matrix.<name>), read after extra_args.
void check_infer_extra_arg(const ConfigNode& a, const std::string& flag, const InferSpec& s,
                           const std::set<std::string>& axes) {
  // The flags the sweep writes from the matrix and the top level, and those of the infer: section
  // (its axes' first, so that the message names the axis).
  std::map<std::string, std::string> set = {{"--device", "device (and matrix.gpu_mix)"}};
  for (const Setting& t : infer_settings())
    if (t.section == "matrix" || (t.section.empty() && t.identity())) set.emplace(t.flag, t.experiment_key());
  for (const Setting& t : infer_settings())
    if (t.section == "infer" && axes.count(t.name)) set.emplace(t.flag, "matrix." + t.name);
  set.merge(s.flags_set());
  if (auto it = set.find(flag); it != set.end()) a.fail(fmt::format("'{}' is set by {}", flag, it->second));
  // infer's own settings, outside any experiment key: the scenarios' (and the checkpoint's).
  const Setting* own = find_setting_by_flag(infer_settings(), flag);
  if (own && own->section.empty() && !own->identity() && own->name != "checkpoint")
    a.fail(fmt::format("'{}': an inference sweep runs the offline scenario", flag));
  if (flag == "--memory-limit" && (s.batches.empty() || s.batches.back() != "max"))
    a.fail("'--memory-limit' is the budget of a batch list ending with max (infer.batch)");
}

}  // namespace

void set_command_flags(const std::string& command, std::set<std::string> flags) {
  command_flags()[command] = std::move(flags);
}

namespace {

// Whether the experiment gives `s` a value: its fixed key or its matrix axis.
bool gives(const ExperimentReader& r, const ConfigNode& root, const Setting& s) {
  const std::optional<ConfigNode> section = s.section.empty() ? root : r.child(root, s.section);
  if (section && section->is_map() && r.child(*section, s.name)) return true;
  const std::optional<ConfigNode> matrix = r.child(root, "matrix");
  return matrix && matrix->is_map() && r.child(*matrix, s.name);
}

}  // namespace

void read_extra_args(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& list, bool infer,
                     Experiment& e) {
  const std::vector<ConfigNode> items = list_items(list);
  std::set<std::string> infer_axes;  // the infer: keys the matrix sweeps
  if (const std::optional<ConfigNode> matrix = infer ? r.child(root, "matrix") : std::nullopt;
      matrix && matrix->is_map())
    for (const std::string& key : infer_axis_keys())
      if (r.child(*matrix, key)) infer_axes.insert(key);
  std::map<std::string, size_t> first;  // each flag given, at its first entry
  for (size_t i = 0; i < items.size(); ++i) {
    const ConfigNode& a = items[i];
    const std::string arg = a.as<std::string>();
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if (looks_like_flag(arg)) check_known_flag(a, flag, infer ? "infer" : "train");
    // A flag given twice: train and infer refuse a second value (--tag alone is repeatable), and
    // every run would fail as it starts; a switch twice says nothing more than once.
    if (looks_like_flag(arg) && flag != "--tag")
      if (const auto [at, fresh] = first.emplace(flag, i); !fresh)
        a.fail(fmt::format("'{}' is given twice (also extra_args[{}]): give it once", flag, at->second));
    if (kSweepOwnArgs.count(flag)) a.fail(fmt::format("'{}' is set by the sweep itself", flag));
    if (infer) {
      // A second --precision would contradict the run's id and results: the matrix owns it.
      if (flag == "--precision") a.fail("'--precision' is set by matrix.precision");
      check_infer_extra_arg(a, flag, e.infer, infer_axes);
    } else if (auto it = sweep_train_flags().find(flag); it != sweep_train_flags().end()) {
      const Setting* s = find_setting_by_flag(train_settings(), flag);
      // A setting train takes on some runs only (--shares) would fail the others: never in extra_args. The
      // data set's flags were always the dataset section's alone (its keys not recorded, data_dir and
      // test_samples, are in the sweep's run ids all the same).
      // A flag files passed here before its setting was a key (--crop-pad) still may be.
      if (!s || (s->identity() && !s->extra_arg_before) || !s->part_of.empty() || s->refused_elsewhere() ||
          s->section == "dataset" || gives(r, root, *s))
        a.fail(fmt::format("'{}' is set by {}", flag, it->second));
    }
    if (flag == "--tag") {  // --tag=KEY=VALUE or --tag KEY=VALUE: more tags are welcome, not the sweep's
      const bool joined = eq != std::string::npos;
      if (!joined && i + 1 == items.size()) a.fail("'--tag' needs KEY=VALUE after it");
      const ConfigNode& value_node = joined ? a : items[i + 1];
      const std::string value = joined ? arg.substr(eq + 1) : value_node.as<std::string>();
      const std::string key = value.substr(0, value.find('='));
      const TrainSetting* tagged = find_train_setting(key);  // a Never setting's tag (train_arguments)
      if (kSweepTags.count(key) || (tagged && !tagged->identity() && !tagged->report_label.empty()))
        value_node.fail(fmt::format("tag '{}' is written by the sweep itself (report and resume read it back)", key));
    }
    // A sweep's 1-GPU runs are its baselines: they measure the GPU alone, whatever launches them.
    if (flag == "--one-rank-exchange")
      a.fail(
          "'--one-rank-exchange' would make the 1-GPU baselines measure the data-parallel path: use cnnscale "
          "train under mpirun -np 1 for that measurement");
    e.extra_args.push_back(arg);
  }
}

}  // namespace cnnscale
