// `cnnscale bench data`: the input pipeline alone. For each thread count, a fresh dataset and a
// prefetching loader deliver batches as fast as they can; samples/s and MB/s of stored bytes read
// (uint8 for Fashion-MNIST and shards) and of float batches produced, for a first pass (a shard
// folder's chunks read from disk and checked) and a second (served from the reader's cache).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/bench_kernels.hpp"
#include "app/commands.hpp"
#include "app/setting_options.hpp"
#include "core/byte_input.hpp"
#include "data/datasets.hpp"
#include "experiment/command_settings.hpp"
#include "data/loader.hpp"
#include "io/provenance.hpp"

namespace cnnscale::app {

namespace {

struct DataBenchArgs {
  std::string data = "fashion-mnist", data_dir = "";
  int64_t batch = 256, batches = 40;
  std::vector<int> threads{1, 2, 4};
  AugmentOptions augment;
  bool bytes = false;  // the loader as a GPU run drives it: stored bytes and draws, no normalisation
  bool json = false;
};

SettingFields data_bench_fields(DataBenchArgs& a);

void run_data_bench(DataBenchArgs& a) {
  Provenance provenance = start_provenance();
  const DatasetInfo info = dataset_info(a.data);
  if (info.synthetic)
    throw_config("bench data: --data synthetic reads nothing (give a real dataset, hdf5:DIR or list:FILE?size=HxW)");
  const int64_t stored_bytes = info.sample_shape[0] * info.sample_shape[1] * info.sample_shape[2];  // uint8
  nlohmann::json rows = nlohmann::json::array();
  if (!a.json)
    std::printf("%-8s %-6s %12s %12s %12s %10s\n", "threads", "pass", "samples/s", "read MB/s", "batch MB/s",
                "ms/batch");
  for (int t : a.threads) {
    if (t < 1) throw_config("--threads: positive counts, got {}", t);
    DatasetRequest request{a.data, a.data_dir, 0, 0, "gaussian", 0};
    const OpenedDatasets ds = open_datasets(request, info.sample_shape, info.classes, a.batch);
    LoaderOptions o;
    o.batch = a.batch;
    o.seed = 1;
    o.threads = t;
    o.augment = a.augment;
    o.bytes = a.bytes;
    const int64_t per_pass = std::min(a.batches, ds.train->size() / a.batch);
    if (per_pass < 1) throw_config("--batch {}: larger than the dataset ({} samples)", a.batch, ds.train->size());
    Loader loader(ds.train, o);
    for (const char* pass : {"first", "second"}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t b = 0; b < per_pass; ++b) loader.release(loader.next().slot);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double samples = static_cast<double>(per_pass * a.batch) / s;
      const double read_mb = samples * static_cast<double>(stored_bytes) / 1e6;
      // Per sample: the floats (or the stored bytes and, augmented, the draw) and the label.
      const int64_t produced = a.bytes ? stored_bytes + (a.augment.any() ? 4 * kDrawInts : 0) : 4 * stored_bytes;
      const double batch_mb = samples * static_cast<double>(produced + 4) / 1e6;
      rows.push_back({{"threads", t},
                      {"pass", pass},
                      {"batches", per_pass},
                      {"samples_per_second", samples},
                      {"read_mb_per_second", read_mb},
                      {"batch_mb_per_second", batch_mb},
                      {"ms_per_batch", s * 1e3 / static_cast<double>(per_pass)}});
      if (!a.json)
        std::printf("%-8d %-6s %12.0f %12.1f %12.1f %10.3f\n", t, pass, samples, read_mb, batch_mb,
                    s * 1e3 / static_cast<double>(per_pass));
    }
  }
  if (a.json) {
    nlohmann::json j{{"data", a.data},
                     {"batch", a.batch},
                     {"sample_shape", info.sample_shape},
                     {"batches_as", a.bytes ? "bytes" : "floats"},
                     {"augment", a.augment.describe()},
                     {"rows", rows}};
    // As the kernel benches' summaries: where it came from and every entry of the command's table.
    set_end(provenance);
    j["provenance"] = provenance_json(provenance);
    j["settings"] = table_values(data_bench_settings(), fields_by_name(data_bench_fields(a)));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "# %s, batch %lld, %lld batches a pass after a fresh open: the first pass reads (shards: from disk, each "
        "chunk checked), the second is served from the reader's memory; read = stored bytes, batch = %s, with the "
        "labels; augmentation: %s\n",
        a.data.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.batches),
        a.bytes ? "the stored bytes and draws a GPU run uploads" : "the float samples produced",
        a.augment.describe().c_str());
  }
}

// Where each setting of the data bench's table (experiment/command_settings.hpp) is held.
SettingFields data_bench_fields(DataBenchArgs& a) {
  return {{"data", &a.data},         {"data_dir", &a.data_dir},         {"batch", &a.batch},
          {"batches", &a.batches},   {"threads", &a.threads},           {"crop_pad", &a.augment.crop_pad},
          {"mirror", &a.augment.mirror}, {"bytes", &a.bytes}};
}

}  // namespace

void register_data_bench(CLI::App& bench) {
  auto a = std::make_shared<DataBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "data", "The input pipeline alone: samples/s and MB/s of the prefetching loader per thread count (CPU)");
  add_table_options(*cmd, data_bench_settings(), fields_by_name(data_bench_fields(*a)));
  cmd->get_option("--data")->check(dataset_name_error);
  cmd->add_flag("--json", a->json, "one JSON object instead of the table");
  cmd->callback([a] { run_data_bench(*a); });
}

}  // namespace cnnscale::app
