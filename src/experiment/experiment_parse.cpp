// Experiment YAML -> Experiment: overrides applied to the tree first, then every key validated
// (unknown key, wrong type, out of range, impossible combination) with the ConfigNode error format
// "file:line:col: key.path: message"; an overridden value is located in its command-line text.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/precision.hpp"
#include "core/text_file.hpp"
#include "data/datasets.hpp"
#include "experiment/experiment.hpp"
#include "experiment/experiment_reader.hpp"
#include "net/net.hpp"

namespace cnnscale {

namespace {

const std::set<std::string> kTopKeys = {"name",           "description",  "network",       "dataset",   "train",
                                        "solver",         "iterations",   "epochs",        "iteration_scale",
                                        "min_iterations", "whole_epochs", "whole_samples", "measure",
                                        "seed",           "device",       "extra_args",    "matrix",
                                        "networks",       "mode",         "infer",         "seeds"};
// What only a training experiment has: refused in an inference experiment, naming the mode.
const std::set<std::string> kTrainOnlyKeys = {"dataset",         "solver",         "iterations",   "epochs",
                                              "iteration_scale", "min_iterations", "whole_epochs", "whole_samples",
                                              "measure",         "networks",       "seeds",        "train"};
const std::set<std::string> kTrainOnlyMatrixKeys = {"batch", "batch_per_gpu", "cpu_mix", "split", "allreduce"};
const std::set<std::string> kLengthKeys = {"iterations",     "epochs",       "iteration_scale",
                                           "min_iterations", "whole_epochs", "whole_samples"};
const std::set<std::string> kMatrixKeys = {"network",   "batch",     "batch_per_gpu", "gpus",   "gpu_mix",
                                           "cpu_mix",   "split",     "precision",     "allreduce", "repeats"};
// The matrix's keys: its own axes and every train setting (train_settings.hpp); in an inference
// experiment also infer's keys (infer_experiment.cpp). A train setting's axis is refused there by name.
std::set<std::string> matrix_keys(bool infer) {
  std::set<std::string> keys = kMatrixKeys;
  for (const std::string& k : setting_axis_keys()) keys.insert(k);
  if (infer) keys.merge(infer_axis_keys());
  return keys;
}
// A whole number in the range train's entry `name` declares (train_settings_top.cpp).
int64_t int_as_train_takes(const ConfigNode& n, const char* name) {
  const TrainSetting& s = *find_train_setting(name);
  return int_in(n, static_cast<int64_t>(s.min), static_cast<int64_t>(s.max));
}

// Applies one level's run-length keys onto `len` (a network's entry replaces the top level's choice).
void read_length(const ExperimentReader& r, const ConfigNode& n, RunLength& len) {
  std::optional<ConfigNode> first_choice;
  for (const char* key : {"iterations", "epochs", "iteration_scale"}) {
    auto c = r.child(n, key);
    if (!c) continue;
    if (first_choice) c->fail(fmt::format("'{}' and '{}' are exclusive: give one", first_choice->path(), c->path()));
    first_choice = c;
    len.iterations = len.epochs = 0;
    len.scale = 0;
    if (std::string(key) == "iterations") len.iterations = int_as_train_takes(*c, "iterations");
    if (std::string(key) == "epochs") len.epochs = int_as_train_takes(*c, "epochs");
    if (std::string(key) == "iteration_scale") len.scale = number_in(*c, 0, 1, true);
  }
  if (auto c = r.child(n, "min_iterations")) len.min_iterations = int_in(*c, 1, int64_t(1) << 40);
  if (auto c = r.child(n, "whole_epochs")) len.whole_epochs = int_as_train_takes(*c, "whole_epochs");
  if (auto c = r.child(n, "whole_samples")) len.whole_samples = int_as_train_takes(*c, "whole_samples");
}

namespace fs = std::filesystem;

}  // namespace

// A relative path in an experiment file means the file's folder, so one experiment means the same
// files from any working directory (and in batch jobs); one typed in an override means the current
// directory, as any command-line path does. Absolute paths are kept. A file-relative path that does
// not exist, when the same path does from the current directory (files written before this rule),
// is taken from there with a warning rather than failing a sweep that used to work.
fs::path experiment_path(const ExperimentReader& r, const ConfigNode& n, const std::string& written) {
  const fs::path p(written);
  if (p.is_absolute() || r.overridden(n)) return fs::absolute(p).lexically_normal();
  const fs::path beside = fs::absolute(fs::path(r.root().file()).parent_path() / p).lexically_normal();
  std::error_code ec;
  if (fs::exists(beside, ec) || !fs::exists(p, ec)) return beside;
  const fs::path from_cwd = fs::absolute(p).lexically_normal();
  if (from_cwd != beside)
    log::warn(
        "{}: '{}' is not in the experiment file's folder; using {} (relative to the current directory). "
        "Paths in experiment files are relative to the file: write it as '{}'",
        n.where(), written, from_cwd.string(),
        from_cwd.lexically_relative(fs::absolute(fs::path(r.root().file()).parent_path())).string());
  return from_cwd;
}

// Where the experiment names network `name`: its matrix.network entry, or the top-level network.
namespace {

ConfigNode network_node(const ExperimentReader& r, const ConfigNode& root, const std::string& name) {
  if (auto c = r.child(r.get(root, "matrix"), "network"))
    for (const auto& n : list_items(*c))
      if (n.as<std::string>() == name) return n;
  return r.get(root, "network");
}

// The file train gets for a matrix network: a bare name (no folder, no extension) is a network of
// networks/ as for train's --net; anything else is a path (experiment_path).
std::string network_file(const ExperimentReader& r, const ConfigNode& n) {
  const std::string name = n.as<std::string>();
  const fs::path p(name);
  if (!p.has_parent_path() && !p.has_extension()) {
    try {
      return fs::absolute(resolve_network_path(name)).lexically_normal().string();
    } catch (const ConfigError& err) {
      n.fail(err.what());
    }
  }
  const fs::path file = experiment_path(r, n, name);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    n.fail(fmt::format("network file {} not found{}", file.string(),
                       p.is_absolute() || r.overridden(n) ? ""
                                                          : " (relative paths are read from the experiment file's "
                                                            "folder)"));
  return file.string();
}

AllreduceMode read_allreduce(const ExperimentReader& r, const ConfigNode& n, const Experiment& e) {
  AllreduceMode m;
  if (n.is_scalar()) {
    m.overlap = one_of(n, {"overlap", "no-overlap"}) == "overlap";
    return m;
  }
  // A mode's fields are train's settings that are part of it (train_settings_parallel.cpp), each read
  // as the table declares it.
  std::set<std::string> fields;
  for (const TrainSetting& s : train_settings())
    if (s.part_of == "allreduce") fields.insert(s.name);
  r.check_keys(n, fields);
  refuse_null_settings(r, n, train_settings(), fields);
  auto value = [&](const char* name) -> std::optional<nlohmann::json> {
    auto c = r.child(n, name);
    if (!c) return std::nullopt;
    return read_setting(*find_train_setting(name), *c);
  };
  if (auto v = value("overlap")) m.overlap = v->get<bool>();
  if (auto v = value("algo")) m.algo = v->get<std::string>();
  if (auto v = value("dtype")) m.dtype = v->get<std::string>();
  if (auto c = r.child(n, "max_ctas")) {
    m.max_ctas = static_cast<int>(int_in(*c, 1, 64));  // 0, NCCL's choice, is the mode without it
    // Here, not when the sweep reaches the run: train refuses it on CPU ranks (MPI, no CTAs).
    if (e.device == "cpu") c->fail("NCCL's CTAs apply to GPU ranks, and this experiment runs on the CPU");
  }
  // The defaults spelt out are the runs without them (the same ids); only the others need GPU ranks.
  if (auto v = value("cta_policy")) {
    if (*v != "default") m.cta_policy = v->get<std::string>();
    if (!m.cta_policy.empty() && e.device == "cpu")
      r.get(n, "cta_policy").fail("NCCL's CTA policy applies to GPU ranks, and this experiment runs on the CPU");
  }
  if (auto v = value("priority")) {
    if (*v == "low") m.priority = "low";
    if (!m.priority.empty() && e.device == "cpu")
      r.get(n, "priority")
          .fail("the priority of NCCL's stream applies to GPU ranks, and this experiment runs on the CPU");
  }
  // Also on CPU ranks: there the parts run after the whole exchange either way, the same arithmetic.
  if (auto v = value("update")) m.update_per_bucket = v->get<bool>();
  if (auto v = value("gather")) m.gather = v->get<bool>();
  return m;
}

void read_matrix(const ExperimentReader& r, const ConfigNode& root, const ConfigNode& m, Experiment& e,
                 const HostInfo& host) {
  const bool infer = e.mode == "infer";
  r.check_keys(m, matrix_keys(infer));
  check_matrix_size(r, m, infer);
  if (infer)
    for (const auto& key : kTrainOnlyMatrixKeys)
      if (auto c = r.child(m, key))
        c->fail("applies to training experiments; an inference run measures infer.batch's sizes on each rank set");
  if (infer)
    for (const auto& key : setting_axis_keys())
      if (auto c = infer_axis_keys().count(key) ? std::nullopt : r.child(m, key))
        c->fail("a train setting: its axis applies to training experiments");
  auto top_net = r.child(root, "network");
  if (auto c = r.child(m, "network")) {
    if (top_net) c->fail("the network is given twice (also as top-level 'network'): keep one");
    for (const auto& n : list_items(*c)) {
      std::string name = n.as<std::string>();
      e.network_paths[name] = network_file(r, n);
      e.networks.push_back(name);
    }
  } else if (top_net) {
    std::string name = top_net->as<std::string>();
    e.network_paths[name] = network_file(r, *top_net);
    e.networks.push_back(name);
  } else {
    m.fail("no network: set matrix.network (or a top-level 'network')");
  }
  // Global batches (strong scaling) and per-rank ones (weak scaling), either or both, in the range of
  // train's --batch (train_settings_ranks.cpp).
  const TrainSetting& batch = *find_train_setting("batch");
  auto batch_size = [&batch](const ConfigNode& n) { return read_setting(batch, n).get<int64_t>(); };
  const auto per_gpu = r.child(m, "batch_per_gpu");
  if (auto c = per_gpu || infer ? r.child(m, "batch") : std::optional<ConfigNode>(r.get(m, "batch")))
    for (const auto& n : list_items(*c)) e.batches.push_back(batch_size(n));
  if (per_gpu)
    for (const auto& n : list_items(*per_gpu)) e.batches_per_gpu.push_back(batch_size(n));

  read_rank_sets(r, m, e, host);
  if (infer)
    for (const auto& mix : e.gpu_mixes)
      if (!mix.sms.empty())
        r.get(m, "gpu_mix").fail("SM partitions (sms) apply to training experiments: infer runs whole GPUs");

  if (auto c = r.child(m, "precision")) {
    for (const auto& p : list_items(*c)) {
      std::string v = p.as<std::string>();
      if (v == "int8") {  // infer's: int8 kernels where a table has scales, on the CPU too
        if (!infer) p.fail("int8 is an inference precision (mode: infer with infer.calibration)");
        if (std::find(e.precisions.begin(), e.precisions.end(), v) != e.precisions.end())
          p.fail(fmt::format("'{}' is listed twice", v));
        e.precisions.push_back(v);
        continue;
      }
      Precision precision = Precision::FP32;
      try {
        precision = parse_precision(v, "precision");
      } catch (const ConfigError& err) {
        p.fail(err.what());
      }
      if (std::find(e.precisions.begin(), e.precisions.end(), v) != e.precisions.end())
        p.fail(fmt::format("'{}' is listed twice", v));
      // Here, not when the sweep reaches the run: train would refuse it on the CPU backend.
      if (precision != Precision::FP32 && e.device == "cpu")
        p.fail(fmt::format("precision '{}' runs on GPUs only, and this experiment runs on the CPU ({}); the CPU "
                           "backend is the fp32 reference",
                           v,
                           e.device_requested == "auto" ? "device: auto found too few GPUs on this node"
                                                        : "device: cpu"));
      e.precisions.push_back(v);
    }
  } else {
    e.precisions = {"fp32"};
  }
  // infer.calibration against the networks: each named one is in the matrix, and every network has
  // a table where int8 runs.
  std::optional<ConfigNode> calibration;
  if (auto i = r.child(root, "infer")) calibration = r.child(*i, "calibration");
  if (calibration && calibration->is_map())
    for (const auto& key : calibration->keys())
      if (std::find(e.networks.begin(), e.networks.end(), key) == e.networks.end())
        r.get(*calibration, key).fail(fmt::format("'{}' is no network of matrix.network", key));
  const auto int8 = std::find(e.precisions.begin(), e.precisions.end(), "int8");
  if (int8 != e.precisions.end()) {
    const ConfigNode where = list_items(r.get(m, "precision"))[static_cast<size_t>(int8 - e.precisions.begin())];
    for (const auto& net : e.networks)
      if (!InferSpec::calibration_of(e.infer.calibration, net))
        where.fail(
            fmt::format("int8 needs infer.calibration for {}: a table (cnnscale calibrate --out) or synthetic "
                        "(scales measured on the run's own input: speed only)",
                        net));
  } else if (calibration) {  // the shipped file with int8 overridden away, say: nothing to refuse
    log::warn("{}: infer.calibration is for int8 runs, and matrix.precision has none: unused", calibration->where());
  }
  if (auto c = r.child(m, "allreduce")) {
    for (const auto& a : list_items(*c)) e.allreduce.push_back(read_allreduce(r, a, e));
  } else {
    e.allreduce = {AllreduceMode{}};
  }
  if (auto c = r.child(m, "repeats")) e.repeats = int_in(*c, 1, 1000);
  if (infer)
    read_infer_axes(r, root, m, e);
  else
    read_setting_axes(r, root, m, e);
  check_distinct_axis_values(r, m, e);
}

}  // namespace

Experiment parse_experiment_text(const std::string& text, const std::string& file,
                                 const std::vector<std::string>& overrides, const HostInfo& host) {
  ExperimentReader r(ConfigNode::load_string(text, file), overrides);
  const ConfigNode& root = r.root();
  Experiment e;
  e.file = file;
  r.check_keys(root, kTopKeys);
  {
    ConfigNode n = r.get(root, "name");
    e.name = n.as<std::string>();
    // The name becomes a folder: keep it to one path component of plain characters.
    if (e.name.empty() ||
        e.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            std::string::npos ||
        e.name[0] == '.')
      n.fail(fmt::format("'{}' is not a usable folder name (letters, digits, '_', '-', '.')", e.name));
  }
  if (auto c = r.child(root, "description")) e.description = c->as<std::string>();
  if (auto c = r.child(root, "mode")) e.mode = one_of(*c, {"train", "infer"});
  const bool infer = e.mode == "infer";
  if (infer) {
    for (const auto& key : kTrainOnlyKeys)
      if (auto c = r.child(root, key))
        c->fail("applies to training experiments (mode: train); an inference experiment runs `cnnscale infer`");
    if (auto c = r.child(root, "infer")) read_infer(r, *c, e);
  } else if (auto c = r.child(root, "infer")) {
    c->fail("applies to inference experiments: add 'mode: infer'");
  }
  if (auto c = r.child(root, "device")) {
    e.device_requested = one_of(*c, {"cpu", "gpu", "auto"});
  } else {
    e.device_requested = "cpu";
  }
  // auto: the GPUs when this node has enough for every run, else the CPU backend (never an error).
  // cpu_mix emulates stragglers on CPU ranks: such a matrix is a CPU experiment.
  e.device = e.device_requested != "auto"                                              ? e.device_requested
             : !has_cpu_mix(r, root) && host.gpus.value_or(0) >= gpus_needed(r, root) ? "gpu"
                                                                                       : "cpu";
  // Not silent where GPUs are visible: every point, the 1-GPU ones too, then runs on the CPU.
  if (e.device_requested == "auto" && e.device == "cpu" && host.gpus.value_or(0) > 0 && !has_cpu_mix(r, root))
    log::warn(
        "device: auto: this node has {} GPU(s), the matrix needs {}: every run goes to the CPU backend (device=gpu "
        "with --only gpus=N runs the points that fit on the GPUs)",
        *host.gpus, gpus_needed(r, root));
  if (auto c = r.child(root, "dataset")) {
    e.dataset = read_dataset(r, *c);
  } else if (!infer) {
    root.fail(fmt::format("missing required key 'dataset' ({})", fmt::join(dataset_names(), " or ")));
  }
  if (auto c = r.child(root, "solver")) read_settings_section(r, *c, "solver", e.solver);
  if (auto c = r.child(root, "train")) read_settings_section(r, *c, "train", e.train);
  read_length(r, root, e.length);
  if (auto c = r.child(root, "measure")) {
    const std::vector<std::string>& modes = find_train_setting("measure")->choices;
    e.measure = one_of(*c, std::set<std::string>(modes.begin(), modes.end()));
  }
  refuse_null_settings(r, root, train_settings(), setting_keys(""));
  if (auto c = r.child(root, "seed")) e.seed = read_setting(*find_train_setting("seed"), *c).get<int64_t>();
  if (auto c = r.child(root, "seeds")) e.seeds = one_of(*c, {"vary", "fixed"});
  if (auto c = r.child(root, "extra_args")) read_extra_args(r, root, *c, infer, e);
  read_matrix(r, root, r.get(root, "matrix"), e, host);

  std::optional<ConfigNode> per_net = r.child(root, "networks");
  if (per_net) {
    per_net->require_map();
    for (const auto& key : per_net->keys()) {
      ConfigNode n = r.get(*per_net, key);
      std::set<std::string> allowed = kLengthKeys;
      allowed.insert("dataset");
      r.check_keys(n, allowed);
      RunLength len = e.length;
      read_length(r, n, len);
      e.per_network[key] = len;
      if (auto d = r.child(n, "dataset")) e.per_network_dataset[key] = read_dataset(r, *d);
    }
  }
  if (!infer) check_dataset_axes(r, root, e);
  // Each network must end up with exactly one way to count its iterations.
  for (const auto& net : infer ? std::vector<std::string>{} : e.networks) {
    auto it = e.per_network.find(net);
    const RunLength& len = it != e.per_network.end() ? it->second : e.length;
    const ConfigNode& where = it != e.per_network.end() ? r.get(*per_net, net) : root;
    if (len.iterations == 0 && len.epochs == 0 && len.scale == 0)
      where.fail(fmt::format("network {}: give iterations, epochs or iteration_scale", net));
    if (len.scale > 0 && len.whole_epochs == 0)
      where.fail(fmt::format("network {}: iteration_scale needs whole_epochs", net));
    const DatasetSpec& data = e.dataset_for(net);
    const bool sized = data.train_samples() > 0 || std::any_of(e.setting_axes.begin(), e.setting_axes.end(),
                                                               [](const auto& a) { return a.name == "train_samples"; });
    if (len.scale > 0 && len.whole_samples == 0 && dataset_info(data.name).synthetic && !sized)
      where.fail(fmt::format("network {}: iteration_scale needs whole_samples (the training set's size)", net));
    // A real dataset's samples and labels must be what the network was written for: train refuses
    // the run otherwise, and every run of the network would fail in turn.
    if (const DatasetInfo info = dataset_info(data.name); !info.synthetic) {
      const NetSpec spec = NetSpec::load(e.network_paths.at(net));
      const std::vector<int64_t> shape = spec.input_shape();
      if (shape != info.sample_shape)
        network_node(r, root, net).fail(fmt::format("{}: the network's input shape is {} (input.shape), but {} "
                                                    "samples are {}", e.network_paths.at(net), fmt::join(shape, "x"),
                                                    data.name, fmt::join(info.sample_shape, "x")));
      if (spec.classes() != info.classes)
        network_node(r, root, net).fail(fmt::format("{}: the network has {} classes (input.classes), but {} has {}",
                                                    e.network_paths.at(net), spec.classes(), data.name,
                                                    info.classes));
    }
  }
  check_settings_apply(r, root, e);
  return e;
}

Experiment load_experiment(const std::string& file, const std::vector<std::string>& overrides, const HostInfo& host) {
  return parse_experiment_text(read_config_text(file, "experiment file"), file, overrides, host);
}

}  // namespace cnnscale
