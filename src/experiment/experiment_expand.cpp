// Experiment -> runs: the matrix expanded in a fixed order (repeat outermost, so an interrupted sweep
// has one complete pass before the second repeat starts), each run with its resolved config, a
// stable hash of it and a readable id; the host's GPU count. (--only: experiment_only.cpp.)
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "data/datasets.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/experiment.hpp"
#include "experiment/network_id_part.hpp"
#include "experiment/train_settings.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale {

std::string stable_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

namespace {
// The mode's label: each of its fields' pieces (train_settings_parallel.cpp declares them), in table
// order: "ov", "noov-tree-bf16", "ov-bf16-c8", "ov-c8-eff-lowp", "ov-upafter", "ov-compute-gather".
std::string mode_label(const AllreduceMode& m, bool long_form) {
  std::string label;
  for (const TrainSetting& s : train_settings())
    if (s.part_of == "allreduce") label += s.id_piece(m.given(s.name), long_form);
  return label;
}
}  // namespace

std::string AllreduceMode::label() const { return mode_label(*this, false); }
std::string AllreduceMode::long_label() const { return mode_label(*this, true); }

nlohmann::json AllreduceMode::id_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const TrainSetting& s : train_settings())
    if (s.part_of == "allreduce")
      if (nlohmann::json v = s.id_value(given(s.name)); !v.is_null()) j[s.name] = std::move(v);
  return j;
}

nlohmann::json AllreduceMode::given(const std::string& name) const {
  if (name == "overlap") return overlap ? nlohmann::json() : nlohmann::json(false);
  if (name == "algo") return algo.empty() ? nlohmann::json() : nlohmann::json(algo);
  if (name == "dtype") return dtype.empty() ? nlohmann::json() : nlohmann::json(dtype);
  if (name == "max_ctas") return max_ctas > 0 ? nlohmann::json(max_ctas) : nlohmann::json();
  if (name == "cta_policy") return cta_policy.empty() ? nlohmann::json() : nlohmann::json(cta_policy);
  if (name == "priority") return priority.empty() ? nlohmann::json() : nlohmann::json(priority);
  if (name == "update") return update_per_bucket ? nlohmann::json() : nlohmann::json(false);
  if (name == "gather") return gather ? nlohmann::json(true) : nlohmann::json();
  throw_runtime("matrix.allreduce has no field '{}' (train_settings_parallel.cpp declares it)", name);
}

std::string GpuMix::label() const {
  if (sms.empty()) return fmt::format("{}", fmt::join(gpus, "."));
  std::vector<std::string> ranks;
  for (size_t i = 0; i < gpus.size(); ++i) ranks.push_back(fmt::format("{}@{}", gpus[i], sms[i]));
  return fmt::format("{}", fmt::join(ranks, "."));
}

std::string GpuMix::id_label() const {
  std::string s = label();
  std::replace(s.begin(), s.end(), '@', 's');
  return s;
}

std::string cpu_mix_label(const std::vector<double>& slowdown) {
  return fmt::format("{}", fmt::join(slowdown, "+"));
}

namespace {

nlohmann::json length_json(const RunLength& l) {
  return {{"iterations", l.iterations},     {"epochs", l.epochs},
          {"iteration_scale", l.scale},     {"min_iterations", l.min_iterations},
          {"whole_epochs", l.whole_epochs}, {"whole_samples", l.whole_samples}};
}

// Samples per epoch as train will see them, without opening the data.
int64_t epoch_samples(const DatasetSpec& d, int64_t batch) {
  return epoch_samples(dataset_info(d.name), d.train_samples(), batch);
}

}  // namespace

std::string network_id_part(const std::string& network) {
  std::string s = std::filesystem::path(network).stem().string();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return s;
}

const std::string* InferSpec::calibration_of(const std::map<std::string, std::string>& table, const std::string& net) {
  auto it = table.find(net);
  if (it == table.end()) it = table.find("*");
  return it == table.end() ? nullptr : &it->second;
}

nlohmann::json Experiment::fixed_json() const {
  // An inference experiment has no data, solver or length; a training one keeps the keys it always
  // had (its hash, and so its runs' ids, must not move).
  if (mode == "infer") {
    nlohmann::json fixed = infer.to_json();
    for (const SettingAxis& axis : setting_axes) fixed.erase(axis.name);  // the matrix's: each run's own
    return {{"name", name}, {"mode", mode},     {"infer", fixed},
            {"seed", seed}, {"device", device}, {"extra_args", extra_args}};
  }
  nlohmann::json per_net = nlohmann::json::object();
  for (const auto& [net, len] : per_network) per_net[net] = {{"length", length_json(len)}};
  for (const auto& [net, d] : per_network_dataset) per_net[net]["data"] = d.to_json();
  nlohmann::json j = {{"name", name},
                      {"data", dataset.to_json()},
                      {"solver", solver},
                      {"length", length_json(length)},
                      {"networks", per_net},
                      {"measure", measure},
                      {"seed", seed},
                      {"device", device},
                      {"extra_args", extra_args}};
  if (!train.empty()) j["train"] = train;  // absent: the hash of the experiments from before it existed
  return j;
}

nlohmann::json Experiment::resolved_json() const {
  nlohmann::json j = fixed_json();
  nlohmann::json ar = nlohmann::json::array();
  for (const auto& a : allreduce) ar.push_back(a.id_json());
  j["description"] = description;
  j["device_requested"] = device_requested;
  // Where the relative paths of the file pointed at (not hashed: the same experiment may be run
  // from another checkout).
  j["network_files"] = network_paths;
  if (!dataset.data_path.empty()) j["data_path"] = dataset.data_path;
  // A mix of whole GPUs stays a list of indices, as before SM partitions existed.
  nlohmann::json mixes = nlohmann::json::array();
  for (const auto& m : gpu_mixes) {
    if (m.sms.empty()) {
      mixes.push_back(m.gpus);
      continue;
    }
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t i = 0; i < m.gpus.size(); ++i) ranks.push_back({{"gpu", m.gpus[i]}, {"sms", m.sms[i]}});
    mixes.push_back(ranks);
  }
  if (mode == "infer") {
    j["matrix"] = {{"network", networks},
                   {"gpus", gpu_counts},
                   {"gpu_mix", mixes},
                   {"precision", precisions},
                   {"repeats", repeats}};
    for (const SettingAxis& axis : setting_axes) j["matrix"][axis.name] = axis.values;
    return j;
  }
  j["matrix"] = {{"network", networks},     {"batch", batches},  {"gpus", gpu_counts},  {"gpu_mix", mixes},
                 {"cpu_mix", cpu_mixes},    {"split", splits},   {"precision", precisions},
                 {"allreduce", ar},         {"repeats", repeats}};
  if (!batches_per_gpu.empty()) j["matrix"]["batch_per_gpu"] = batches_per_gpu;  // absent: as before it existed
  for (const SettingAxis& axis : setting_axes) j["matrix"][axis.name] = axis.values;
  j["seeds"] = seeds;
  return j;
}

std::string Experiment::fixed_hash() const {
  return stable_hash(fixed_json().dump());
}

namespace {

struct RankSet {
  int64_t ranks;
  GpuMix mix;
  std::vector<double> slowdown;
};

// The setting of an axis of `e`: train's, or infer's in an inference experiment.
const Setting& axis_setting(const Experiment& e, const std::string& name) {
  return *(e.mode == "infer" ? find_setting(infer_settings(), name) : find_train_setting(name));
}

// The setting axes' points, the last axis fastest; one empty point without axes.
std::vector<nlohmann::json> setting_points(const Experiment& e) {
  std::vector<nlohmann::json> points = {nlohmann::json::object()};
  for (const Experiment::SettingAxis& axis : e.setting_axes) {
    std::vector<nlohmann::json> more;
    for (const nlohmann::json& p : points)
      for (const nlohmann::json& v : axis.values) {
        nlohmann::json q = p;
        q[axis.name] = v;
        more.push_back(std::move(q));
      }
    points = std::move(more);
  }
  return points;
}

// The id's part for a point's setting values: "-lr0.1-seed7" (characters a run id cannot hold as '_').
std::string settings_id_part(const Experiment& e, const nlohmann::json& point) {
  std::string out;
  for (const Experiment::SettingAxis& axis : e.setting_axes) {
    if (!point.contains(axis.name)) continue;  // a setting the run does not take (applying_point)
    std::string v = axis_setting(e, axis.name).text(point.at(axis.name));
    for (char& ch : v)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '+' && ch != '-') ch = '_';
    out += "-" + axis.name + v;
  }
  return out;
}

RunSpec make_run(const Experiment& e, const std::string& net, int64_t batch, const RankSet& rs,
                 const std::string& precision, const AllreduceMode& allreduce, const std::string& split_policy,
                 const nlohmann::json& point, int64_t repeat) {
  auto it = e.per_network.find(net);
  const RunLength& len = it != e.per_network.end() ? it->second : e.length;
  RunSpec r;
  r.network = net;
  r.network_path = e.network_paths.at(net);
  r.batch = batch;
  r.ranks = rs.ranks;
  r.gpu_mix = rs.mix.gpus;
  r.gpu_sms = rs.mix.sms;
  r.slowdown = rs.slowdown;
  // even is train's default: without the axis, nothing is passed, as before it existed.
  r.split = rs.ranks == 1 ? "even" : split_policy;
  r.pass_split = rs.ranks > 1 && (e.split_given || r.split != "even");
  r.precision = precision;
  r.allreduce = allreduce;
  r.repeat = repeat;
  r.whole_epochs = len.whole_epochs;
  r.whole_samples = len.whole_samples;
  r.dataset = e.dataset_for(net);
  // A dataset axis's value is the run's data (its epoch's size among them), where a fixed key stands.
  for (const auto& [name, value] : point.items())
    if (find_train_setting(name)->section == "dataset") r.dataset.given[name] = value;
  const int64_t samples = len.whole_samples > 0 ? len.whole_samples : epoch_samples(r.dataset, batch);
  const int64_t per_epoch_whole = (samples + batch - 1) / batch;  // as train's whole columns
  if (len.epochs > 0) {
    r.epochs = len.epochs;
    r.iterations = std::max<int64_t>(1, epoch_samples(r.dataset, batch) / batch) * len.epochs;
  } else if (len.iterations > 0) {
    r.iterations = len.iterations;
  } else {
    r.iterations = std::max<int64_t>(
        len.min_iterations,
        static_cast<int64_t>(std::ceil(double(per_epoch_whole * len.whole_epochs) * len.scale)));
  }
  const int64_t whole_epochs = len.whole_epochs > 0 ? len.whole_epochs : std::max<int64_t>(1, r.epochs);
  r.whole_iterations = per_epoch_whole * whole_epochs;

  nlohmann::json c = e.fixed_json();
  c.erase("name");  // the same configuration under another experiment is the same run
  c.erase("networks");
  c.erase("length");
  c["data"] = r.dataset.to_json();
  c["network"] = net;
  c["batch"] = batch;
  c["ranks"] = rs.ranks;
  c["gpu_mix"] = rs.mix.gpus;
  // New keys only where they differ from a run made before they existed, so those runs
  // keep their hashes (and ids) and stay done.
  if (!rs.mix.sms.empty()) c["gpu_sms"] = rs.mix.sms;
  if (!rs.slowdown.empty()) c["slowdown"] = rs.slowdown;
  if (r.split != "even") c["split"] = r.split;
  // energy and edp refine their shares online (train's default interval): runs made before they did
  // kept the probe's shares, and must not count as done. auto always refined and keeps its ids.
  const SplitPolicy policy = parse_split_policy(r.split);
  if (split_needs_energy(policy)) c["refine_every"] = kDefaultRebalanceEvery;
  // How the refinement reads a measurement changed (the whole step scaled, not the time per sample
  // re-estimated): refining runs made before have other hashes, and are run again.
  if (split_refines_online(policy)) c["refine_model"] = kRefineModel;
  c["precision"] = precision;
  c["allreduce"] = rs.ranks == 1 ? nlohmann::json() : r.allreduce.id_json();
  c["epochs"] = r.epochs;
  c["iterations"] = r.epochs > 0 ? 0 : r.iterations;
  c["whole_epochs"] = r.whole_epochs;
  c["whole_samples"] = r.whole_samples;
  // The point's setting values, where the fixed ones stand (a run without axes: none, the same hash).
  for (const auto& [name, value] : point.items()) {
    const TrainSetting& s = *find_train_setting(name);
    if (s.section != "dataset") (s.section.empty() ? c : c[s.section])[name] = value;  // the data's: above
  }
  r.settings = point;
  r.context = run_context(e, r);
  // A fixed key the run does not take (train.auto_start on a run of another split, graph_copies on a
  // CPU run) changes nothing it computes: its run keeps the id it has without the key. Absent once
  // none is left, as experiments from before the section had it.
  if (const auto train = c.find("train"); train != c.end()) {
    for (auto it = train->begin(); it != train->end();)
      it = find_train_setting(it.key())->applies_to(r.context) ? std::next(it) : train->erase(it);
    if (train->empty()) c.erase(train);
  }
  r.seed_base = point.contains("seed") ? point["seed"].get<int64_t>() : e.seed;
  r.seed = e.seeds == "vary" ? repeat_seed(r.seed_base, repeat) : r.seed_base;
  c["seed"] = r.seed_base;
  // The configuration hash is the point's, shared by its repeats; the run's own configuration and the
  // hash in its id carry its seed. Repeat 1 keeps the point's seed, so its id is what it was before
  // seeds varied (as every repeat's is with seeds: fixed).
  r.config_hash = stable_hash(c.dump());
  c["seed"] = r.seed;
  r.config = c;
  const std::string id_hash = r.seed == r.seed_base ? r.config_hash : stable_hash(c.dump());

  std::string mix;
  if (!rs.mix.gpus.empty()) mix.append("-m").append(rs.mix.id_label());
  if (!rs.slowdown.empty()) mix.append("-c").append(cpu_mix_label(rs.slowdown));
  // "split-" keeps a policy apart from an allreduce algorithm ("ov-auto" is one).
  const std::string split = r.split == "even" ? "" : fmt::format("-split-{}", r.split);
  r.id = fmt::format("{}-b{}-g{}{}-{}-{}{}{}-r{}-{}", network_id_part(net), batch, rs.ranks, mix, precision,
                     rs.ranks == 1 ? "single" : r.allreduce.label(), split, settings_id_part(e, point), repeat,
                     id_hash.substr(0, 8));
  return r;
}

// One `cnnscale infer` of the experiment's batch list on a rank set in one precision, with a point's
// values of the experiment's axes over infer's keys.
RunSpec make_infer_run(const Experiment& e, const std::string& net, const RankSet& rs, const std::string& precision,
                       const nlohmann::json& point, int64_t repeat) {
  RunSpec r;
  r.infer = true;
  r.network = net;
  r.network_path = e.network_paths.at(net);
  r.ranks = rs.ranks;
  r.gpu_mix = rs.mix.gpus;
  r.precision = precision;
  r.repeat = repeat;
  nlohmann::json c = e.fixed_json();
  c.erase("name");  // the same configuration under another experiment is the same run
  c["network"] = net;
  c["ranks"] = rs.ranks;
  c["gpu_mix"] = rs.mix.gpus;
  c["precision"] = precision;
  // An int8 run's table, as written, is part of what it measured; the other precisions' runs keep
  // their configurations (and ids) whatever the experiment's int8 tables are.
  if (precision == "int8")
    if (const std::string* table = InferSpec::calibration_of(e.infer.calibration, net))
      c["infer"]["calibration"] = *table;
  // The point's values where the fixed ones stand, each by its entry's rule (a value recorded Never,
  // or a NotDefault one at its default, is named by the id's axis part alone).
  for (const auto& [name, value] : point.items())
    if (axis_setting(e, name).records(value)) c["infer"][name] = value;
  r.settings = point;
  r.seed_base = r.seed = e.seed;  // every repeat's (--only seed=N)
  r.config = c;
  r.config_hash = stable_hash(c.dump());
  const std::string mix = rs.mix.gpus.empty() ? "" : "-m" + rs.mix.id_label();
  r.id = fmt::format("{}-infer-g{}{}-{}{}-r{}-{}", network_id_part(net), rs.ranks, mix, precision, settings_id_part(e, point),
                     repeat, r.config_hash.substr(0, 8));
  return r;
}

}  // namespace

std::vector<RunSpec> expand_runs(const Experiment& e) {
  std::vector<RankSet> rank_sets;  // an inference experiment has no cpu_mix (refused when read)
  for (int64_t g : e.gpu_counts) rank_sets.push_back({g, {}, {}});
  for (const auto& m : e.gpu_mixes) rank_sets.push_back({static_cast<int64_t>(m.gpus.size()), m, {}});
  for (const auto& s : e.cpu_mixes) rank_sets.push_back({static_cast<int64_t>(s.size()), {}, s});

  const std::vector<nlohmann::json> points_of_settings = setting_points(e);
  if (e.mode == "infer") {  // one run per network, rank set, precision, setting point and repeat: no batch axis
    std::vector<RunSpec> runs;
    for (int64_t repeat = 1; repeat <= e.repeats; ++repeat)
      for (const auto& net : e.networks)
        for (const auto& rs : rank_sets)
          for (const auto& precision : e.precisions)
            for (const nlohmann::json& point : points_of_settings)
              runs.push_back(make_infer_run(e, net, rs, precision, point, repeat));
    return runs;
  }

  // (global batch, rank set) points: every global batch on every rank set (strong scaling), then each
  // per-rank batch times each set's rank count (weak scaling) where that point is not there already
  // (per-rank 64 on 2 ranks is global 128 on 2 ranks: one run).
  std::vector<std::pair<int64_t, size_t>> points;
  for (int64_t batch : e.batches)
    for (size_t k = 0; k < rank_sets.size(); ++k) points.emplace_back(batch, k);
  for (int64_t per_rank : e.batches_per_gpu)
    for (size_t k = 0; k < rank_sets.size(); ++k) {
      const std::pair<int64_t, size_t> point{per_rank * rank_sets[k].ranks, k};
      if (std::find(points.begin(), points.end(), point) == points.end()) points.push_back(point);
    }

  std::vector<RunSpec> runs;
  for (int64_t repeat = 1; repeat <= e.repeats; ++repeat)
    for (const auto& net : e.networks)
      for (const auto& [batch, k] : points) {
        const RankSet& rs = rank_sets[k];
        for (const auto& precision : e.precisions)
          for (size_t a = 0; a < e.allreduce.size(); ++a)
            for (size_t s = 0; s < e.splits.size(); ++s) {
              // One rank has nothing to reduce and nothing to split: its allreduce and split variants
              // would be identical runs.
              if (rs.ranks == 1 && (a > 0 || s > 0)) break;
              // A setting that does not apply to a run (auto_start off split auto, bucket_mb on one rank):
              // such a run goes without it, once rather than once per value of its axis.
              std::set<std::string> made;
              for (const nlohmann::json& point : points_of_settings) {
                RunSpec run = make_run(e, net, batch, rs, precision, e.allreduce[a], e.splits[s], point, repeat);
                const nlohmann::json own = applying_point(point, run_context(e, run));
                if (!made.insert(own.dump()).second) continue;
                if (own != point)
                  run = make_run(e, net, batch, rs, precision, e.allreduce[a], e.splits[s], own, repeat);
                runs.push_back(std::move(run));
              }
            }
      }
  return runs;
}

}  // namespace cnnscale
