// What `cnnscale bench data` does, below the command: the input pipeline alone. For each thread
// count, a fresh dataset and a prefetching loader deliver batches as fast as they can; samples/s and
// MB/s of stored bytes read (uint8 for Fashion-MNIST and shards) and of batches produced, for a
// first pass (a shard folder's chunks read from disk and checked) and a second (served from the
// reader's cache). The command parses and prints.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/augment.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

// The data bench's settings (experiment/command_settings.cpp declares each, its flag and default).
struct DataBenchRequest {
  std::string data = "fashion-mnist", data_dir = "";
  int64_t batch = 256, batches = 40;
  std::vector<int> threads{1, 2, 4};
  AugmentOptions augment;
  bool bytes = false;  // the loader as a GPU run drives it: stored bytes and draws, no normalisation
  SettingValues settings;  // every entry of the bench's table as the run was given it (--json records it)
};

// ConfigError for a data set that reads nothing (synthetic) or a thread count below 1, before any
// data set is opened.
void check_data_bench_request(const DataBenchRequest& r);

// One pass of one thread count.
struct DataBenchRow {
  int threads = 0;
  std::string pass;  // "first" or "second"
  int64_t batches = 0;
  double samples_per_second = 0, read_mb_per_second = 0, batch_mb_per_second = 0, ms_per_batch = 0;
};

struct DataBenchRun {
  std::vector<DataBenchRow> rows;
  nlohmann::json json;  // --json's object: the request, the rows, provenance and settings
};

// Checks `r` and measures each thread count's two passes, in order; `on_row` (may be null) sees
// each row as it is measured.
DataBenchRun run_data_bench(const DataBenchRequest& r, const std::function<void(const DataBenchRow&)>& on_row = {});

}  // namespace cnnscale
