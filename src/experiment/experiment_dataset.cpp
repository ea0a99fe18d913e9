// An experiment's data: the dataset section (a data set's name alone, or a mapping of train's settings
// of section `dataset`, train_settings_data.cpp), each key read and checked as the table declares it,
// and the matrix axes over those keys checked against the data each network trains on.
#include <fmt/ranges.h>

#include "data/datasets.hpp"
#include "data/image_list.hpp"
#include "experiment/experiment.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale {

namespace {

std::set<std::string> dataset_name_set() {
  const std::vector<std::string> names = dataset_names();
  return {names.begin(), names.end()};
}

std::vector<std::string> file_dataset_names() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : dataset_infos())
    if (!d.synthetic) names.push_back(d.name);
  return names;
}

// The data set's name at `node`: a named one, a shard folder "hdf5:DIR" (DIR relative to the
// experiment file; its manifest is read now) or an image list "list:FILE?..." (FILE and its test
// list and root relative to the experiment file).
std::string dataset_name(const ExperimentReader& r, const ConfigNode& node) {
  const std::string s = node.as<std::string>();
  if (s.rfind(kImageListPrefix, 0) == 0) {
    ImageListSpec spec;
    try {
      spec = parse_image_list_spec(s, "image list");
    } catch (const ConfigError& e) {
      node.fail(e.what());
    }
    spec.list = experiment_path(r, node, spec.list).string();
    if (!spec.test_list.empty()) spec.test_list = experiment_path(r, node, spec.test_list).string();
    if (!spec.root.empty()) spec.root = experiment_path(r, node, spec.root).string();
    const std::string name = image_list_name(spec);
    if (std::string why = dataset_name_error(name); !why.empty()) node.fail(why);
    return name;
  }
  if (s.rfind(kShardDatasetPrefix, 0) != 0) return one_of(node, dataset_name_set());
  const std::string dir = s.substr(std::string(kShardDatasetPrefix).size());
  const std::string name = kShardDatasetPrefix + experiment_path(r, node, dir).string();
  if (std::string why = dataset_name_error(name); !why.empty()) node.fail(why);
  return name;
}

// An input shape is three extents: the table's list holds any number.
void check_input_shape(const ConfigNode& n) {
  if (!n.is_sequence() || n.size() != 3) n.fail("expected [C, H, W]");
}

// The data set's settings other than its name, in the table's order.
std::vector<const TrainSetting*> dataset_keys() {
  std::vector<const TrainSetting*> keys;
  for (const TrainSetting& s : train_settings())
    if (s.section == "dataset" && s.name != "name") keys.push_back(&s);
  return keys;
}

}  // namespace

DatasetSpec read_dataset(const ExperimentReader& r, const ConfigNode& n) {
  DatasetSpec d;
  if (n.is_scalar()) {
    d.name = dataset_name(r, n);
    return d;
  }
  r.check_keys(n, setting_keys("dataset"));
  refuse_null_settings(r, n, train_settings(), setting_keys("dataset"));
  d.name = dataset_name(r, r.get(n, "name"));
  const RunContext kind{.synthetic = dataset_info(d.name).synthetic};
  for (const TrainSetting* s : dataset_keys()) {
    auto c = r.child(n, s->name);
    if (!c) continue;
    if (!s->applies_to(kind)) c->fail("applies to synthetic data only");
    if (s->name == "input_shape") check_input_shape(*c);
    d.given[s->name] = read_setting(*s, *c);
  }
  if (const std::string dir = d.given.value("data_dir", std::string()); !dir.empty()) {
    if (kind.synthetic)
      r.get(n, "data_dir").fail(fmt::format("applies to {} only", fmt::join(file_dataset_names(), " and ")));
    d.data_path = experiment_path(r, r.get(n, "data_dir"), dir).string();
  }
  return d;
}

void check_dataset_axes(const ExperimentReader& r, const ConfigNode& root, const Experiment& e) {
  const std::optional<ConfigNode> matrix = r.child(root, "matrix");
  const std::optional<ConfigNode> per_net = r.child(root, "networks");
  for (const Experiment::SettingAxis& axis : e.setting_axes) {
    const TrainSetting& s = *find_train_setting(axis.name);
    if (s.section != "dataset") continue;
    const ConfigNode node = r.get(*matrix, s.name);
    // Every network's data: a key that applies to synthetic data only would change nothing elsewhere.
    for (const std::string& net : e.networks) {
      const DatasetSpec& d = e.dataset_for(net);
      if (!s.applies_to({.synthetic = dataset_info(d.name).synthetic}))
        node.fail(fmt::format("applies to synthetic data only, and network {} trains on {}", net, d.name));
      // A network's own fixed value beside the axis would be overruled by it without a word.
      if (d.given.contains(s.name) && per_net)
        node.fail(
            fmt::format("{} is given twice (also as 'networks.{}.dataset.{}'): keep the axis or the fixed "
                        "value",
                        s.name, net, s.name));
    }
    if (s.name == "input_shape") {
      // One list is one value (read_setting_axes): each value is three extents.
      const bool one = node.is_sequence() && node.size() > 0 && !node.items().front().is_sequence();
      for (const ConfigNode& item : one ? std::vector<ConfigNode>{node} : list_items(node)) check_input_shape(item);
    }
  }
}

nlohmann::json DatasetSpec::to_json() const {
  // Keys not given as the hash always spelt them ("", 0, -1); classes and input_shape as train's words.
  std::vector<std::string> args;
  for (const char* key : {"classes", "input_shape"})
    if (given.contains(key)) {
      const std::vector<std::string> words = find_train_setting(key)->arguments(given[key]);
      args.insert(args.end(), words.begin(), words.end());
    }
  return {{"name", name},
          {"data_dir", given.value("data_dir", std::string())},
          {"train_samples", train_samples()},
          {"test_samples", given.value("test_samples", int64_t(-1))},
          {"synthetic_fill", given.value("synthetic_fill", std::string())},
          {"args", args}};
}

std::vector<std::string> DatasetSpec::arguments() const {
  std::vector<std::string> words = find_train_setting("name")->arguments(name);
  for (const TrainSetting* s : dataset_keys()) {
    if (!given.contains(s->name)) continue;
    // data_dir as train finds it: resolved against the experiment file's folder.
    const std::vector<std::string> w = s->name == "data_dir"
                                           ? (data_path.empty() ? std::vector<std::string>{} : s->arguments(data_path))
                                           : s->arguments(given[s->name]);
    words.insert(words.end(), w.begin(), w.end());
  }
  return words;
}

}  // namespace cnnscale
