// The dataset table and the one function that opens a dataset by name.
#include "data/datasets.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "data/fashion_mnist.hpp"
#include "data/image_list.hpp"
#include "data/shards.hpp"
#include "data/synthetic_dataset.hpp"

namespace cnnscale {

namespace {
// An image list read and checked (every line, every file's existence) once per process:
// dataset_info is asked several times while a run starts, and an experiment asks it per run.
std::shared_ptr<const ImageListContents> image_lists(const std::string& name, const std::string& what) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const ImageListContents>> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(name); it != cache.end()) return it->second;
  }
  auto lists = std::make_shared<const ImageListContents>(read_image_lists(parse_image_list_spec(name, what), what));
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(name, std::move(lists)).first->second;
}
}  // namespace

const std::vector<DatasetInfo>& dataset_infos() {
  static const std::vector<DatasetInfo> infos = {
      {"fashion-mnist",
       false,
       {1, FashionMnistDataset::kSide, FashionMnistDataset::kSide},
       FashionMnistDataset::kClasses,
       FashionMnistDataset::kTrainSize,
       true,
       ""},
      {"synthetic", true, {}, 0, 0, false, ""},
  };
  return infos;
}

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : dataset_infos()) names.push_back(d.name);
  return names;
}

DatasetInfo dataset_info(const std::string& name, const std::string& what) {
  for (const DatasetInfo& d : dataset_infos())
    if (d.name == name) return d;
  if (name.rfind(kShardDatasetPrefix, 0) == 0) {
    DatasetInfo d;
    d.name = name;
    d.shard_dir = name.substr(std::string(kShardDatasetPrefix).size());
    if (d.shard_dir.empty()) throw_config("{}: '{}' names no folder (hdf5:DIR)", what, name);
    const ShardManifest m = read_shard_manifest(d.shard_dir);
    const auto train = m.splits.find("train");
    if (train == m.splits.end())
      throw_config("{}/manifest.json: no 'train' split to train on (key 'splits')", d.shard_dir);
    d.sample_shape = m.sample_shape;
    d.classes = m.classes;
    d.train_samples = train->second.samples;
    d.has_test = m.splits.count("test") > 0;
    return d;
  }
  if (name.rfind(kImageListPrefix, 0) == 0) {
    const ImageListSpec spec = parse_image_list_spec(name, what);
    const std::shared_ptr<const ImageListContents> lists = image_lists(name, what);
    DatasetInfo d;
    d.name = name;
    d.image_list = true;
    d.sample_shape = {spec.fit.channels, spec.fit.height, spec.fit.width};
    d.classes = lists->classes;
    d.train_samples = static_cast<int64_t>(lists->train.size());
    d.has_test = !lists->test.empty();
    return d;
  }
  throw_config(
      "{}: unknown dataset '{}' (known: {}, hdf5:DIR for a shard folder, list:FILE?size=HxW for an image list)", what,
      name, fmt::join(dataset_names(), ", "));
}

std::string dataset_name_error(const std::string& name) {
  try {
    dataset_info(name);
    return "";
  } catch (const Error& e) {
    // CLI11 names the option itself: "--data: " once, not twice.
    std::string why = e.what();
    const std::string own = "--data: ";
    if (why.rfind(own, 0) == 0) why.erase(0, own.size());
    return why;
  }
}

int64_t epoch_samples(const DatasetInfo& info, int64_t train_samples, int64_t batch) {
  if (train_samples > 0) return train_samples;
  if (!info.synthetic) return info.train_samples;
  return std::max<int64_t>(1024, batch);
}

OpenedDatasets open_datasets(const DatasetRequest& request, const std::vector<int64_t>& sample_shape, int64_t classes,
                             int64_t batch) {
  const DatasetInfo info = dataset_info(request.name);
  OpenedDatasets out;
  if (info.synthetic) {
    if (request.test_samples > 0) throw_config("--test-samples: synthetic data has no test set");
    out.train = std::make_shared<SyntheticDataset>(Shape(sample_shape), classes,
                                                   epoch_samples(info, request.train_samples, batch),
                                                   parse_synthetic_fill(request.synthetic_fill), request.seed);
    return out;
  }
  if (!info.shard_dir.empty()) {
    std::shared_ptr<const Dataset> train = std::make_shared<ShardDataset>(info.shard_dir, "train");
    if (request.train_samples > 0) train = std::make_shared<SubsetDataset>(train, request.train_samples);
    out.train = train;
    if (request.test_samples != 0 && info.has_test) {
      std::shared_ptr<const Dataset> test = std::make_shared<ShardDataset>(info.shard_dir, "test");
      if (request.test_samples > 0) test = std::make_shared<SubsetDataset>(test, request.test_samples);
      out.test = test;
    }
    return out;
  }
  if (info.image_list) {
    const ImageListSpec spec = parse_image_list_spec(request.name, "--data");
    const std::shared_ptr<const ImageListContents> lists = image_lists(request.name, "--data");
    auto full = std::make_shared<ImageListDataset>(fmt::format("images of {}", spec.list), lists->train, spec.fit,
                                                   lists->classes);
    std::shared_ptr<const Dataset> train = full;
    if (request.train_samples > 0) train = std::make_shared<SubsetDataset>(train, request.train_samples);
    out.train = train;
    if (request.test_samples != 0 && info.has_test) {
      // Normalised as the training images are.
      std::shared_ptr<const Dataset> test = std::make_shared<ImageListDataset>(
          fmt::format("images of {}", spec.test_list), lists->test, spec.fit, lists->classes, full->byte_affine());
      if (request.test_samples > 0) test = std::make_shared<SubsetDataset>(test, request.test_samples);
      out.test = test;
    }
    return out;
  }
  using Split = FashionMnistDataset::Split;
  const std::string dir = request.data_dir.empty() ? FashionMnistDataset::kDefaultDir : request.data_dir;
  std::shared_ptr<const Dataset> train = std::make_shared<FashionMnistDataset>(dir, Split::Train);
  if (request.train_samples > 0) train = std::make_shared<SubsetDataset>(train, request.train_samples);
  out.train = train;
  if (request.test_samples != 0) {
    std::shared_ptr<const Dataset> test = std::make_shared<FashionMnistDataset>(dir, Split::Test);
    if (request.test_samples > 0) test = std::make_shared<SubsetDataset>(test, request.test_samples);
    out.test = test;
  }
  return out;
}

}  // namespace cnnscale
