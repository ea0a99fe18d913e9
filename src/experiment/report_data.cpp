// Scanning, reading and grouping of run folders for `cnnscale report` (see report_data.hpp).
// Statistics are over non-null values only, so a figure missing from one repeat does not turn the
// whole configuration into "unknown"; `n` says how many values went in.
#include "experiment/report_data.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <system_error>
#include <tuple>

#include "core/error.hpp"
#include "core/log.hpp"
#include "experiment/train_settings.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale::report {

namespace fs = std::filesystem;

namespace {
const std::vector<std::string> kFixedGroupKeys = {"net",
                                             "data",
                                             "device",
                                             "precision",
                                             "measure",
                                             "global_batch",
                                             "world_size",
                                             "allreduce_overlap",
                                             "one_rank_exchange",
                                             "allreduce_algo",
                                             "allreduce_dtype",
                                             "allreduce_tuning",
                                             "nccl_env",
                                             "gpu_names",
                                             "tag.gpu_mix",
                                             "threads_per_rank",
                                             "split",
                                             "mix"};

}  // namespace

// A label that is a fixed key (split, allreduce_dtype) is read from the run's summary, which holds the
// value as the run had it (the split's shares and refinement, the exchange's dtype of a run from before
// the configuration recorded it): no setting's.
const TrainSetting* setting_of_label(const std::string& key) {
  if (std::find(kFixedGroupKeys.begin(), kFixedGroupKeys.end(), key) != kFixedGroupKeys.end()) return nullptr;
  for (const TrainSetting& s : train_settings())
    if (!s.report_label.empty() && s.report_label == key) return &s;
  return nullptr;
}

const std::vector<std::string> kGroupKeys = [] {
  std::vector<std::string> keys = kFixedGroupKeys;
  // A setting whose label is a fixed key (split, allreduce_dtype) keeps that key's place.
  for (const TrainSetting& s : train_settings())
    if (!s.report_label.empty() && std::find(keys.begin(), keys.end(), s.report_label) == keys.end())
      keys.push_back(s.report_label);
  return keys;
}();

nlohmann::json run_config_of(const std::string& config_text) {
  const std::string marker = "\nrun: ";
  const size_t at = config_text.find(marker);
  if (at == std::string::npos) return nullptr;
  const size_t start = at + marker.size();
  const size_t end = config_text.find('\n', start);
  return nlohmann::json::parse(config_text.substr(start, end == std::string::npos ? end : end - start), nullptr,
                               false);
}

std::string seeds_mode(const std::vector<RunRecord>& runs) {
  std::set<std::string> modes;
  for (const RunRecord& r : runs)
    if (const SummaryValue v = summary_value(r.summary, "tag.seeds"); const std::string* s = std::get_if<std::string>(&v))
      modes.insert(*s);
  if (modes.empty()) return "";
  return modes.size() == 1 ? "seeds: " + *modes.begin() : "seeds: mixed";
}

namespace {

std::string number_text(double v) {
  if (std::isnan(v)) return "";
  if (std::abs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<long long>(v));
  return fmt::format("{}", v);
}

double to_number(const std::string& s) {
  if (s.empty()) return kMissing;
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    return used == s.size() ? v : kMissing;
  } catch (const std::exception&) {
    return kMissing;
  }
}

// Identity keys every table shows in a column of its own: never part of the variant.
bool own_column(const std::string& key) {
  return key == "net" || key == "global_batch" || key == "world_size" || key == "threads_per_rank";
}

// The keys of variant_identity, in the order the variant column lists them.
const std::vector<std::string>& variant_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const std::string& k : kGroupKeys)
      if (!own_column(k)) out.push_back(k == "gpu_names" ? "gpu" : k);
    return out;
  }();
  return keys;
}

}  // namespace

std::set<std::string> gpu_name_set(const ConfigGroup& g) {
  std::set<std::string> names;
  const std::string& list = g.key.at("gpu_names");
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    names.insert(list.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

namespace {

bool is_partial(const fs::path& p) {
  return p.filename().string().ends_with(".partial");
}

}  // namespace

std::string RunRecord::text(const std::string& key) const {
  if (key == "split" && summary.split.value_or("") == "manual" && summary.split_shares.has_value())
    return std::string("manual ").append(summary.split_shares.value());
  // `auto` from the probe's shares (train's default) and from even shares (--auto-start even, and
  // every auto run written before the probe start) are different configurations: only the former
  // fitted models.
  //
  // The policies that refine their shares online (auto, energy, edp) against the same policy with
  // its start-up shares kept (--rebalance-every 0, and energy and edp in files from before they
  // refined: no refine_every recorded) are different configurations too.
  if (key == "split") {
    const std::string policy = summary.split.value_or("");
    const std::optional<SplitPolicy> named = split_policy_named(policy);
    const bool online = named && split_refines_online(*named);
    const bool kept = split.refine_every == 0 || (split.refine_every < 0 && policy != "auto");
    std::string label = policy == "auto" && split.models.empty() ? "auto from even" : policy;
    // Kept shares came from the probe, or, for auto from even, were the even ones.
    if (online && kept) return label + (split.models.empty() ? " (kept)" : " (probe only)");
    // Refined from the probe's models before the refinement was recorded: the time per sample
    // re-estimated alone (auto from even, with no probe, refined the same way either way).
    if (online && split.refine_model.empty() && !split.models.empty()) return label + " (slope-refined)";
    if (online) return label;
  }
  // A run without a split figure (one rank on a whole device, files from before splits were
  // recorded) divided its batch evenly: the same key as a recorded even split, so scaling finds its
  // one-rank baseline.
  if (key == "split" && !summary.split.has_value()) return "even";
  // Not a summary figure: what NCCL read from the environment, recorded beside the library versions.
  if (key == "nccl_env") return nccl_env;
  // A train setting, from the recorded configuration; the seed of a sweep's run as its point's.
  if (const TrainSetting* s = setting_of_label(key)) {
    if (key == "seed")
      if (const SummaryValue v = summary_value(summary, "tag.seed_base"); std::holds_alternative<std::string>(v))
        return std::get<std::string>(v);
    // Not in the recorded configuration: the value the sweep tagged the run with ("" outside a sweep
    // that set it: train_arguments).
    if (!s->identity())
      if (const SummaryValue v = summary_value(summary, "tag." + s->name); std::holds_alternative<std::string>(v))
        return std::get<std::string>(v);
    const nlohmann::json value = recorded_setting(*s, run_config);
    if (value.is_null()) return "";
    return s->report_text ? s->report_text(value, run_config) : s->text(value);
  }
  // Runs from before mixed precision computed and exchanged gradients in fp32 (and said nothing of
  // the exchange): the same keys as a recorded fp32 run, so they stay its repeats and baselines.
  const SummaryValue v = summary_value(summary, key);
  if ((key == "precision" || key == "allreduce_dtype") && std::holds_alternative<std::monostate>(v)) return "fp32";
  // Files from before the CTA policy and stream priority were recorded used NCCL's defaults.
  if (key == "allreduce_tuning" && std::holds_alternative<std::monostate>(v)) return "default";
  if (const std::string* s = std::get_if<std::string>(&v)) return *s;
  if (const double* d = std::get_if<double>(&v)) return number_text(*d);
  return "";
}

Stat stat_of(const std::vector<double>& values) {
  Stat s;
  double sum = 0;
  for (double v : values) {
    if (std::isnan(v)) continue;
    sum += v;
    s.min = s.n == 0 ? v : std::min(s.min, v);
    s.max = s.n == 0 ? v : std::max(s.max, v);
    ++s.n;
  }
  if (s.n == 0) return s;
  s.mean = sum / s.n;
  if (s.n >= 2) {
    double squares = 0;
    for (double v : values)
      if (!std::isnan(v)) squares += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(squares / (s.n - 1));
  }
  return s;
}

double ConfigGroup::global_batch() const {
  return to_number(key.at("global_batch"));
}
double ConfigGroup::world_size() const {
  return to_number(key.at("world_size"));
}

Stat ConfigGroup::stat(NumberFigure RunSummary::*figure) const {
  std::vector<double> values;
  for (const RunRecord* r : runs) values.push_back(r->number(figure));
  return stat_of(values);
}

std::string ConfigGroup::method(const std::string& summary_key) const {
  for (const RunRecord* r : runs) {
    auto it = r->methods.find(summary_key);
    if (it != r->methods.end() && !it->second.empty()) return it->second;
  }
  return "";
}

namespace {
// Visits every entry under the results directory, depth first, except what lies in a partial folder
// (a run still being written or killed midway: nothing in it counts). `visit` returns false to leave
// a directory's contents unvisited.
void walk_results(const std::string& results_dir, const std::function<bool(const fs::directory_entry&)>& visit) {
  std::error_code ec;
  if (!fs::is_directory(results_dir, ec))
    throw_config("'{}' is not a directory (expected a results directory)", results_dir);
  fs::recursive_directory_iterator it(results_dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) throw_config("cannot read results directory '{}': {}", results_dir, ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw_runtime("cannot scan '{}': {}", results_dir, ec.message());
    const bool dir = it->is_directory(ec);
    if ((dir && is_partial(it->path())) || !visit(*it)) {
      if (dir) it.disable_recursion_pending();
    }
  }
}
}  // namespace

std::vector<fs::path> find_json_files(const std::string& results_dir, const std::string& folder) {
  std::vector<fs::path> paths;
  walk_results(results_dir, [&](const fs::directory_entry& e) {
    std::error_code ec;
    const fs::path& p = e.path();
    if (p.extension() == ".json" && p.parent_path().filename() == folder && !p.filename().string().starts_with(".") &&
        e.is_regular_file(ec))
      paths.push_back(p);
    return true;
  });
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::vector<fs::path> find_json_files_named(const std::string& results_dir, const std::string& name) {
  std::vector<fs::path> paths;
  walk_results(results_dir, [&](const fs::directory_entry& e) {
    std::error_code ec;
    if (e.path().filename() == name && e.is_regular_file(ec)) paths.push_back(e.path());
    return true;
  });
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::vector<RunRecord> scan_runs(const std::string& results_dir, int* unreadable,
                                 std::vector<std::string>* interrupted) {
  std::error_code ec;
  if (!fs::exists(results_dir, ec)) throw_config("results directory '{}' does not exist", results_dir);
  std::vector<fs::path> folders;
  std::vector<std::string> without_h5;  // a training run's summary files, its run.h5 missing
  walk_results(results_dir, [&](const fs::directory_entry& e) {
    std::error_code ec2;
    if (!e.is_directory(ec2)) return true;
    if (!fs::is_regular_file(e.path() / "run.h5", ec2)) {
      if (fs::is_regular_file(e.path() / "summary.csv", ec2) && fs::is_regular_file(e.path() / "summary.json", ec2) &&
          !is_partial(e.path().string()))
        without_h5.push_back(e.path().string());
      return true;
    }
    folders.push_back(e.path());
    return false;  // a run folder holds no further runs
  });
  // Not silently: such a folder lost its run.h5 (copied without it, or deleted), and every table
  // is read from run.h5.
  if (!without_h5.empty()) {
    std::sort(without_h5.begin(), without_h5.end());
    log::warn("report: {} run folder(s) without run.h5 left out (copied without it?), e.g. {}", without_h5.size(),
              without_h5.front());
  }
  // The results root itself may be a single run folder.
  if (fs::is_regular_file(fs::path(results_dir) / "run.h5", ec) && !is_partial(results_dir))
    folders.push_back(results_dir);
  std::sort(folders.begin(), folders.end());

  std::vector<RunRecord> runs;
  int bad = 0;
  for (const fs::path& folder : folders) {
    try {
      RunResults r = read_run_results(folder.string());
      if (r.status == kRunInterrupted) {
        if (interrupted) interrupted->push_back(folder.string());
        continue;
      }
      size_t samples = 0;
      for (const PowerSeries& p : r.power) samples += p.t_s.size();
      StepPartition step = partition_step(r.timeline, r.summary);
      runs.push_back(RunRecord{folder.string(), r.run_id, std::move(r.summary), std::move(r.methods), samples,
                               std::move(step), std::move(r.rank_summary), std::move(r.split),
                               r.system.nccl_env.value_or(""), std::move(r.epochs), r.config_text,
                               run_config_of(r.config_text), std::move(r.provenance)});
    } catch (const std::exception& e) {
      ++bad;
      log::warn("report: skipping unreadable run folder {}: {}", folder.string(), e.what());
    }
  }
  if (unreadable) *unreadable = bad;
  return runs;
}

std::vector<ConfigGroup> group_runs(const std::vector<RunRecord>& runs) {
  std::map<std::map<std::string, std::string>, ConfigGroup> by_key;
  for (const RunRecord& r : runs) {
    std::map<std::string, std::string> key;
    for (const std::string& k : kGroupKeys) key[k] = r.text(k);
    ConfigGroup& g = by_key[key];
    g.key = key;
    g.runs.push_back(&r);
  }
  std::vector<ConfigGroup> groups;
  for (auto& [key, g] : by_key) groups.push_back(std::move(g));
  auto order = [](const ConfigGroup& g) {
    return std::make_tuple(g.key.at("net"), g.key.at("device"), g.key.at("precision"), g.global_batch(), g.world_size(),
                           g.key);
  };
  std::stable_sort(groups.begin(), groups.end(),
                   [&](const ConfigGroup& a, const ConfigGroup& b) { return order(a) < order(b); });
  return groups;
}

std::string DeviceNoun::count(double n) const {
  return fmt::format("{:g} {}", n, n == 1 ? one : many);
}

DeviceNoun device_noun(const std::vector<ConfigGroup>& groups) {
  const bool all_gpu = !groups.empty() && std::all_of(groups.begin(), groups.end(),
                                                      [](const ConfigGroup& g) { return g.key.at("device") == "gpu"; });
  return all_gpu ? DeviceNoun{"GPU", "GPUs"} : DeviceNoun{};
}

std::string gpu_model(const ConfigGroup& group) {
  const std::set<std::string> names = gpu_name_set(group);
  return names.size() == 1 ? *names.begin() : group.key.at("gpu_names");
}

bool is_gpu_mix(const ConfigGroup& group) {
  return !group.key.at("tag.gpu_mix").empty() || gpu_name_set(group).size() > 1;
}

bool is_unequal(const ConfigGroup& group) {
  const std::string& split = group.key.at("split");
  return !group.key.at("mix").empty() || split != "even";
}

bool is_one_rank_exchange(const ConfigGroup& group) {
  return !group.key.at("one_rank_exchange").empty();
}

Identity variant_identity(const ConfigGroup& group) {
  Identity id;
  for (const std::string& k : kGroupKeys) {
    if (own_column(k) || irrelevant(k, group)) continue;
    if (k == "gpu_names")
      id["gpu"] = gpu_model(group);
    else
      id[k] = variant_value(k, group);
  }
  return id;
}

// A data set's size, classes and input shape are what it is: beside its name they say something
// only where runs of the same data set differ in them (a sweep over matrix.train_samples), not
// where two data sets differ (synthetic data's 10 classes against a file's own).
static bool of_the_data(const std::string& key) {
  return key == "train_samples" || key == "classes" || key == "input_shape";
}

VaryingKeys varying_keys(const std::vector<std::pair<std::string, Identity>>& identities) {
  VaryingKeys out;
  for (const auto& [net, id] : identities) out[net];
  for (const std::string& k : variant_keys()) {
    std::map<std::string, std::string> first;  // net (and data, for a key of the data) -> the first value seen
    std::set<std::string> varies;
    for (const auto& [net, id] : identities) {
      auto it = id.find(k);
      if (it == id.end()) continue;
      const auto data = id.find("data");
      const std::string within = of_the_data(k) && data != id.end() ? net + "\n" + data->second : net;
      auto [f, fresh] = first.emplace(within, it->second);
      if (!fresh && f->second != it->second) varies.insert(net);
    }
    for (const std::string& net : varies) out[net].push_back(k);
  }
  return out;
}

VaryingKeys varying_keys(const std::vector<ConfigGroup>& groups) {
  std::vector<std::pair<std::string, Identity>> identities;
  for (const ConfigGroup& g : groups) identities.emplace_back(g.net(), variant_identity(g));
  return varying_keys(identities);
}

bool any_varying(const VaryingKeys& varying) {
  for (const auto& [net, keys] : varying)
    if (!keys.empty()) return true;
  return false;
}

std::string variant_label(const std::string& net, const Identity& identity, const VaryingKeys& varying) {
  auto keys = varying.find(net);
  if (keys == varying.end()) return "";
  std::string out;
  for (const std::string& k : keys->second) {
    auto it = identity.find(k);
    if (it == identity.end()) continue;
    // Only the one-rank exchange runs say so: the others are what every table shows anyway.
    if (k == "one_rank_exchange" && it->second.empty()) continue;
    if (!out.empty()) out += " ";
    // A precision's name says what it is ("resnet34 bf16" in a legend); the others need their key.
    if (k == "precision") {
      out += it->second;
      continue;
    }
    out += (k == "tag.gpu_mix" ? "gpu_mix" : k) + "=" + (it->second.empty() ? "none" : it->second);
  }
  return out;
}

std::string variant_label(const ConfigGroup& group, const VaryingKeys& varying) {
  return variant_label(group.net(), variant_identity(group), varying);
}

const ConfigGroup* baseline_of(const ConfigGroup& group, const std::vector<ConfigGroup>& groups) {
  return baseline_at_batch(group, groups, group.key.at("global_batch"));
}

const ConfigGroup* baseline_at_batch(const ConfigGroup& group, const std::vector<ConfigGroup>& groups,
                                     const std::string& batch) {
  const std::string names = group.key.at("gpu_names");
  const std::string first_gpu = names.substr(0, names.find(','));
  const ConfigGroup* best = nullptr;
  int best_score = -1;
  for (const ConfigGroup& g : groups) {
    if (g.world_size() != 1 || is_one_rank_exchange(g)) continue;
    bool same = true, exact = true;
    for (const std::string& k : kGroupKeys)
      // A sweep gives a single CPU rank all the cores' BLAS threads: its thread count differs on
      // purpose (the scaling table notes it).
      // A one-rank exchange run's own baseline is the GPU alone: the cost of the path it measured.
      // A key irrelevant to the one rank (bucket_mb) need not match; where a setting's does, that run
      // is preferred (results from before a sweep made one 1-rank run for all values of it).
      if (k != "world_size" && k != "gpu_names" && k != "tag.gpu_mix" && k != "threads_per_rank" &&
          k != "one_rank_exchange" && g.key.at(k) != (k == "global_batch" ? batch : group.key.at(k))) {
        if (!irrelevant(k, g)) same = false;
        if (setting_of_label(k)) exact = false;
      }
    if (!same) continue;
    const int score = (exact ? 4 : 0) + (g.key.at("gpu_names") == first_gpu ? 2 : 0) +
                      (g.key.at("tag.gpu_mix").empty() ? 1 : 0);
    if (score > best_score) best = &g, best_score = score;
  }
  return best;
}

}  // namespace cnnscale::report
