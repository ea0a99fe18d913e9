// `cnnscale bench data`: the input pipeline alone. For each thread count, a fresh dataset and a
// prefetching loader deliver batches as fast as they can; samples/s and MB/s of stored bytes read
// (uint8 for Fashion-MNIST and shards) and of float batches produced, for a first pass (a shard
// folder's chunks read from disk and checked) and a second (served from the reader's cache). The run
// is experiment/data_bench_run's; this file parses and prints.
#include <cstdio>
#include <memory>

#include "app/bench_kernels.hpp"
#include "app/commands.hpp"
#include "app/setting_options.hpp"
#include "data/datasets.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/data_bench_run.hpp"

namespace cnnscale::app {

namespace {

struct DataBenchArgs {
  DataBenchRequest request;  // every entry of the bench's table
  bool json = false;
};

SettingFields data_bench_fields(DataBenchRequest& a);

void run_data_bench_command(DataBenchArgs& args) {
  DataBenchRequest& a = args.request;
  a.settings = setting_values(data_bench_settings(), data_bench_fields(a));
  check_data_bench_request(a);
  if (args.json) {
    std::printf("%s\n", run_data_bench(a).json.dump(2).c_str());
    return;
  }
  std::printf("%-8s %-6s %12s %12s %12s %10s\n", "threads", "pass", "samples/s", "read MB/s", "batch MB/s", "ms/batch");
  run_data_bench(a, [](const DataBenchRow& r) {
    std::printf("%-8d %-6s %12.0f %12.1f %12.1f %10.3f\n", r.threads, r.pass.c_str(), r.samples_per_second,
                r.read_mb_per_second, r.batch_mb_per_second, r.ms_per_batch);
  });
  std::printf(
      "# %s, batch %lld, %lld batches a pass after a fresh open: the first pass reads (shards: from disk, each "
      "chunk checked), the second is served from the reader's memory; read = stored bytes, batch = %s, with the "
      "labels; augmentation: %s\n",
      a.data.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.batches),
      a.bytes ? "the stored bytes and draws a GPU run uploads" : "the float samples produced",
      a.augment.describe().c_str());
}

// Where each setting of the data bench's table (experiment/command_settings.hpp) is held.
SettingFields data_bench_fields(DataBenchRequest& a) {
  return {{"data", &a.data},         {"data_dir", &a.data_dir},         {"batch", &a.batch},
          {"batches", &a.batches},   {"threads", &a.threads},           {"crop_pad", &a.augment.crop_pad},
          {"mirror", &a.augment.mirror}, {"bytes", &a.bytes}};
}

}  // namespace

void register_data_bench(CLI::App& bench) {
  auto a = std::make_shared<DataBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "data", "The input pipeline alone: samples/s and MB/s of the prefetching loader per thread count (CPU)");
  add_table_options(*cmd, data_bench_settings(), fields_by_name(data_bench_fields(a->request)));
  cmd->get_option("--data")->check(dataset_name_error);
  cmd->add_flag("--json", a->json, "one JSON object instead of the table");
  cmd->callback([a] { run_data_bench_command(*a); });
}

}  // namespace cnnscale::app
