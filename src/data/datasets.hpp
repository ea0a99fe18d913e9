// Datasets by the name a user gives (`train --data`, an experiment's `dataset:`): what each one
// fixes about the network's input and how many samples it has, and opening it. One table for
// `train`, the experiment parser and the expander.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace cnnscale {

struct DatasetInfo {
  std::string name;                          // "fashion-mnist", "synthetic"
  bool synthetic = false;                    // generated: shape and classes come from the network
  std::vector<int64_t> sample_shape;         // (C, H, W) a real dataset fixes; empty when synthetic
  int64_t classes = 0;                       // 0 when synthetic
  int64_t train_samples = 0;                 // the full training set; 0 when synthetic
  bool has_test = false;
  std::string shard_dir;  // HDF5 shards ("hdf5:DIR"): the folder
  bool image_list = false;  // an image list read directly ("list:FILE?size=HxW...", image_list.hpp)
};

// "hdf5:DIR", a folder of HDF5 shards (cnnscale data); its manifest gives shape, classes and sizes.
inline constexpr const char* kShardDatasetPrefix = "hdf5:";

// The named datasets, in the order help texts list them (shard folders come as "hdf5:DIR", image
// lists as "list:FILE?size=HxW...").
const std::vector<DatasetInfo>& dataset_infos();
std::vector<std::string> dataset_names();
// A named dataset, a shard folder "hdf5:DIR" (its manifest read and checked) or an image list
// "list:FILE?..." (its lines read and checked); ConfigError naming `what` (a flag or key path) for an
// unknown name, the manifest for a bad folder, the list and line for a bad list.
DatasetInfo dataset_info(const std::string& name, const std::string& what = "--data");
// The same check for a CLI validator: empty when `name` is a dataset, else the message.
std::string dataset_name_error(const std::string& name);

// Samples per epoch before any data is read: `train_samples` when given (> 0), else the full
// training set, else (synthetic) max(1024, batch), so that even a large batch has whole batches.
int64_t epoch_samples(const DatasetInfo& info, int64_t train_samples, int64_t batch);

struct DatasetRequest {
  std::string name;
  std::string data_dir;        // real datasets; empty: the default location
  int64_t train_samples = 0;   // > 0: only the first N (synthetic: samples per epoch)
  int64_t test_samples = -1;   // -1: the whole test set, 0: none, N: the first N
  std::string synthetic_fill = "gaussian";
  uint64_t seed = 0;           // synthetic values
};

struct OpenedDatasets {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;  // null: no test set (synthetic, or test_samples == 0)
};

// Opens the training (and test) set. `sample_shape` and `classes` are the network's, used by
// synthetic data; `batch` sizes the synthetic default. ConfigError for options the dataset does not
// take (a test set of synthetic data).
OpenedDatasets open_datasets(const DatasetRequest& request, const std::vector<int64_t>& sample_shape, int64_t classes,
                             int64_t batch);

}  // namespace cnnscale
