// The matrix's rank sets and batch split policies: plain rank counts (gpus), explicit per-rank GPUs
// with optional SM partitions (gpu_mix), CPU ranks with emulated stragglers (cpu_mix), and the split
// axis; every bad value fails at its own node ("file:line:col: matrix.gpu_mix[0][1].sms: ...").
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/checked_math.hpp"
#include "core/config.hpp"
#include "experiment/experiment.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale {

namespace {

// One rank's value of a per-rank list of train's table (--gpus, --sm-counts), in the entry's range.
int64_t list_value(const TrainSetting& s, const ConfigNode& n) {
  return int_in(n, static_cast<int64_t>(s.min), static_cast<int64_t>(s.max));
}

// One gpu_mix entry: ranks as plain indices (0) or mappings ({gpu: 0, sms: 66}), mixed freely.
GpuMix read_gpu_mix(const ExperimentReader& r, const ConfigNode& mix_node, const HostInfo& host) {
  // A single mapping is a one-rank mix, as a single index is.
  const std::vector<ConfigNode> ranks = mix_node.is_map() ? std::vector<ConfigNode>{mix_node} : list_items(mix_node);
  GpuMix mix;
  std::vector<std::optional<int64_t>> sms;
  for (const auto& sel : ranks) {
    if (sel.is_map()) r.check_keys(sel, {"gpu", "sms"});
    // Initialised, never assigned: assigning a ConfigNode writes through to the YAML node it refers to.
    const ConfigNode gpu_node = sel.is_map() ? r.get(sel, "gpu") : sel;
    std::optional<int64_t> rank_sms;
    // A green-context partition; whether the GPU has that many SMs (and the partition granularity)
    // only train can tell, on the GPU itself.
    if (auto c = sel.is_map() ? r.child(sel, "sms") : std::nullopt) rank_sms = list_value(*find_train_setting("sms"), *c);
    const int64_t index = list_value(*find_train_setting("gpu_mix"), gpu_node);
    if (std::find(mix.gpus.begin(), mix.gpus.end(), index) != mix.gpus.end())
      gpu_node.fail(fmt::format("GPU {} is listed twice: two ranks cannot share a GPU", index));
    if (const std::string why = host.lacks_gpu_index(index); !why.empty()) gpu_node.fail(why);
    mix.gpus.push_back(index);
    sms.push_back(rank_sms);
  }
  // train's --sm-counts has no "whole GPU" value, so a partitioned mix names every rank's SMs.
  const auto named = std::find_if(sms.begin(), sms.end(), [](const auto& s) { return s.has_value(); });
  if (named == sms.end()) return mix;
  for (size_t i = 0; i < sms.size(); ++i) {
    if (!sms[i])
      ranks[i].fail(fmt::format(
          "rank {} (GPU {}) names no sms, but rank {} does: once one rank of a mix has an SM partition, every "
          "rank needs one (write {{gpu: {}, sms: N}}, N the GPU's full count for a whole GPU, e.g. 132 on an H100)",
          i, mix.gpus[i], named - sms.begin(), mix.gpus[i]));
    mix.sms.push_back(*sms[i]);
  }
  return mix;
}

// One cpu_mix entry: a slowdown factor >= 1 per rank (1: a rank at full speed).
std::vector<double> read_cpu_mix(const ConfigNode& mix_node) {
  if (!mix_node.is_sequence())
    mix_node.fail("expected a list of per-rank slowdown factors, e.g. [1, 3] (cpu_mix is a list of them: [[1, 3]])");
  std::vector<double> factors;
  const TrainSetting& slowdown = *find_train_setting("cpu_mix");
  for (const auto& f : list_items(mix_node)) factors.push_back(number_in(f, slowdown.min, slowdown.max, slowdown.min_open));
  return factors;
}

void read_splits(const ExperimentReader& r, const ConfigNode& m, Experiment& e) {
  auto c = r.child(m, "split");
  if (!c) return;
  e.split_given = true;
  e.splits.clear();
  const std::set<std::string> policies(kSplitPolicies.begin(), kSplitPolicies.end());
  for (const auto& s : list_items(*c)) {
    if (s.is_scalar() && s.as<std::string>() == "manual")
      s.fail(
          "'manual' is no matrix value: it needs per-rank shares, which one axis value cannot carry (use even, "
          "proportional, auto, energy or edp)");
    const std::string policy = one_of(s, policies);
    if (std::find(e.splits.begin(), e.splits.end(), policy) != e.splits.end())
      s.fail(fmt::format("'{}' is listed twice", policy));
    e.splits.push_back(policy);
  }
}

}  // namespace

void read_rank_sets(const ExperimentReader& r, const ConfigNode& m, Experiment& e, const HostInfo& host) {
  const bool gpu = e.device == "gpu";
  // Ranks against this node's GPUs, or the Slurm allocation's; unchecked when mpirun gets a host list.
  std::vector<ConfigNode> gpu_nodes;
  if (auto c = r.child(m, "gpus")) gpu_nodes = list_items(*c);
  for (const auto& n : gpu_nodes) {
    int64_t g = int_in(n, 1, 4096);
    // The sweep's --only checks only the runs it selects: say so, as this node may run the rest.
    if (const std::string why = gpu ? host.lacks_gpus_for(g) : ""; !why.empty())
      n.fail(why + "; `sweep --only gpus=N` runs only the points that fit here");
    e.gpu_counts.push_back(g);
  }
  // Ranks of each explicit rank set, with the node that made it, for the batch check below.
  std::vector<std::pair<int64_t, ConfigNode>> sets;
  for (size_t i = 0; i < gpu_nodes.size(); ++i) sets.emplace_back(e.gpu_counts[i], gpu_nodes[i]);

  const auto gpu_mix = r.child(m, "gpu_mix");
  if (const auto c = r.child(m, "cpu_mix")) {
    // Slowdown factors stand in for slower devices on CPU ranks; GPUs differ for real.
    if (!gpu_nodes.empty())
      c->fail("cannot be combined with matrix.gpus: a cpu_mix experiment's rank sets are its cpu_mix entries "
              "(plain ranks at full speed: [1, 1])");
    if (gpu_mix) c->fail("cannot be combined with matrix.gpu_mix: cpu_mix runs on CPU ranks, gpu_mix on GPUs");
    if (gpu) c->fail("slowdown factors emulate stragglers on CPU ranks: needs device cpu (the device is gpu)");
    if (!c->is_sequence() || c->size() == 0)
      c->fail("expected a list of per-rank slowdown lists, e.g. [[1, 1], [1, 3]]");
    for (const auto& mix_node : c->items()) {
      e.cpu_mixes.push_back(read_cpu_mix(mix_node));
      sets.emplace_back(static_cast<int64_t>(e.cpu_mixes.back().size()), mix_node);
    }
  }
  if (gpu_mix) {
    const ConfigNode& c = *gpu_mix;
    if (!gpu) c.fail(fmt::format("per-rank GPU selectors need device gpu (the device is {})", e.device));
    if (!c.is_sequence() || c.size() == 0)
      c.fail("expected a list of GPU lists, e.g. [[0, 2], [1, 3]] or [[{gpu: 0, sms: 132}, {gpu: 1, sms: 66}]]");
    for (const auto& mix_node : c.items()) {
      e.gpu_mixes.push_back(read_gpu_mix(r, mix_node, host));
      sets.emplace_back(static_cast<int64_t>(e.gpu_mixes.back().gpus.size()), mix_node);
    }
  }
  if (sets.empty()) {
    if (gpu && !host.lacks_gpus_for(1).empty())
      m.fail(fmt::format("device gpu, but no GPU is visible ({})", host.gpus_source));
    e.gpu_counts.push_back(1);
  }
  // Every rank needs at least one sample of the global batch.
  for (int64_t b : e.batches)
    for (const auto& [ranks, node] : sets)
      if (ranks > b) node.fail(fmt::format("{} ranks cannot split a global batch of {}", ranks, b));
  read_splits(r, m, e);
}

namespace {
// Compares the values of axis `key` as the run id spells them (`id` of each): two that spell alike
// would be one run twice, the second finding the first's folder or racing it as another array task.
// A set of spellings, not a pairwise comparison: an axis may hold thousands of values.
template <typename T, typename Id>
void check_distinct(const ExperimentReader& r, const ConfigNode& m, const char* key, const std::vector<T>& values,
                    Id id) {
  const auto c = r.child(m, key);
  if (!c) return;
  const std::vector<ConfigNode> nodes = list_items(*c);
  if (nodes.size() != values.size()) return;  // not read one value per item: nothing to locate
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string spelt = id(values[i]);
    if (const auto [at, fresh] = first.emplace(spelt, i); !fresh)
      nodes[i].fail(fmt::format("{} is listed twice (also matrix.{}[{}]): both would be one run, of one run id", spelt,
                                key, at->second));
  }
}
}  // namespace

void check_distinct_axis_values(const ExperimentReader& r, const ConfigNode& m, const Experiment& e) {
  auto text = [](const auto& v) { return fmt::format("{}", v); };
  check_distinct(r, m, "network", e.networks, text);
  check_distinct(r, m, "batch", e.batches, text);
  check_distinct(r, m, "batch_per_gpu", e.batches_per_gpu, text);
  check_distinct(r, m, "gpus", e.gpu_counts, text);
  check_distinct(r, m, "gpu_mix", e.gpu_mixes, [](const GpuMix& g) { return "[" + g.label() + "]"; });
  check_distinct(r, m, "cpu_mix", e.cpu_mixes,
                 [](const std::vector<double>& f) { return fmt::format("[{}]", fmt::join(f, ", ")); });
  check_distinct(r, m, "allreduce", e.allreduce, [](const AllreduceMode& a) { return a.label(); });
}

void check_matrix_size(const ExperimentReader& r, const ConfigNode& m, bool infer) {
  // Each axis' value count as written, checked before any value is: a list of a million batches
  // then costs no per-value check (some compare every value with every other) and no run. An
  // inference matrix's train-only axes count 1 here; they are refused right after.
  auto count = [&](const ConfigNode& parent, const char* key) -> int64_t {
    const auto c = r.child(parent, key);
    return !c ? 0 : c->is_sequence() ? static_cast<int64_t>(c->size()) : 1;
  };
  const int64_t repeats = r.child(m, "repeats") ? int_in(*r.child(m, "repeats"), 1, 1000) : Experiment{}.repeats;
  std::vector<std::pair<std::string, int64_t>> axes = {
      {"repeats", repeats},
      {"network", std::max<int64_t>(1, count(m, "network"))},
      {"batch and batch_per_gpu", infer ? 1 : std::max<int64_t>(1, count(m, "batch") + count(m, "batch_per_gpu"))},
      {"gpus, gpu_mix and cpu_mix", std::max<int64_t>(1, count(m, "gpus") + count(m, "gpu_mix") + count(m, "cpu_mix"))},
      {"precision", std::max<int64_t>(1, count(m, "precision"))},
      {"allreduce", infer ? 1 : std::max<int64_t>(1, count(m, "allreduce"))},
      {"split", infer ? 1 : std::max<int64_t>(1, count(m, "split"))}};
  // A list-valued setting's one list counts as a list.
  for (const std::string& key : infer ? infer_axis_keys() : setting_axis_keys())
    if (count(m, key.c_str()) > 1) axes.emplace_back(key, count(m, key.c_str()));
  std::vector<int64_t> sizes;
  std::vector<std::string> named;
  for (const auto& [axis, n] : axes) {
    sizes.push_back(n);
    if (n > 1) named.push_back(fmt::format("{} {}", axis, n));
  }
  if (bounded_product(sizes, kMaxMatrixRuns)) return;
  const auto product = bounded_product(sizes);
  m.fail(fmt::format("{} = {} combinations, more than the {} runs one experiment may expand to (split it into "
                     "several)",
                     fmt::join(named, " x "), product ? fmt::format("{}", *product) : "more than 2^63",
                     kMaxMatrixRuns));
}

bool has_cpu_mix(const ExperimentReader& r, const ConfigNode& root) {
  try {
    auto m = r.child(root, "matrix");
    return m && m->is_map() && r.child(*m, "cpu_mix").has_value();
  } catch (const ConfigError&) {
    return false;
  }
}

int64_t gpus_needed(const ExperimentReader& r, const ConfigNode& root) {
  int64_t need = 1;
  try {
    auto m = r.child(root, "matrix");
    if (!m) return need;
    if (auto g = r.child(*m, "gpus"))
      for (int64_t v : g->as_list<int64_t>()) need = std::max(need, v);
    if (auto mix = r.child(*m, "gpu_mix"))
      for (const auto& one : mix->items()) {
        std::vector<ConfigNode> ranks = one.is_sequence() ? one.items() : std::vector<ConfigNode>{one};
        for (const auto& sel : ranks)
          need = std::max(need, (sel.is_map() ? sel["gpu"] : sel).as<int64_t>() + 1);
      }
  } catch (const ConfigError&) {
  }
  return need;
}

}  // namespace cnnscale
