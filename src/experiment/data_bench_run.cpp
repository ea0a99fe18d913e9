// check_data_bench_request and run_data_bench (data_bench_run.hpp).
#include "experiment/data_bench_run.hpp"

#include <algorithm>
#include <chrono>

#include "core/byte_input.hpp"
#include "core/error.hpp"
#include "data/datasets.hpp"
#include "data/loader.hpp"
#include "io/provenance.hpp"

namespace cnnscale {

void check_data_bench_request(const DataBenchRequest& r) {
  if (dataset_info(r.data).synthetic)
    throw_config("bench data: --data synthetic reads nothing (give a real dataset, hdf5:DIR or list:FILE?size=HxW)");
  for (int t : r.threads)
    if (t < 1) throw_config("--threads: positive counts, got {}", t);
}

DataBenchRun run_data_bench(const DataBenchRequest& r, const std::function<void(const DataBenchRow&)>& on_row) {
  Provenance provenance = start_provenance();
  check_data_bench_request(r);
  const DatasetInfo info = dataset_info(r.data);
  const int64_t stored_bytes = info.sample_shape[0] * info.sample_shape[1] * info.sample_shape[2];  // uint8
  DataBenchRun run;
  nlohmann::json rows = nlohmann::json::array();
  for (int t : r.threads) {
    DatasetRequest request{r.data, r.data_dir, 0, 0, "gaussian", 0};
    const OpenedDatasets ds = open_datasets(request, info.sample_shape, info.classes, r.batch);
    LoaderOptions o;
    o.batch = r.batch;
    o.seed = 1;
    o.threads = t;
    o.augment = r.augment;
    o.bytes = r.bytes;
    const int64_t per_pass = std::min(r.batches, ds.train->size() / r.batch);
    if (per_pass < 1) throw_config("--batch {}: larger than the dataset ({} samples)", r.batch, ds.train->size());
    Loader loader(ds.train, o);
    for (const char* pass : {"first", "second"}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t b = 0; b < per_pass; ++b) loader.release(loader.next().slot);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      DataBenchRow row;
      row.threads = t;
      row.pass = pass;
      row.batches = per_pass;
      row.samples_per_second = static_cast<double>(per_pass * r.batch) / s;
      row.read_mb_per_second = row.samples_per_second * static_cast<double>(stored_bytes) / 1e6;
      // Per sample: the floats (or the stored bytes and, augmented, the draw) and the label.
      const int64_t produced = r.bytes ? stored_bytes + (r.augment.any() ? 4 * kDrawInts : 0) : 4 * stored_bytes;
      row.batch_mb_per_second = row.samples_per_second * static_cast<double>(produced + 4) / 1e6;
      row.ms_per_batch = s * 1e3 / static_cast<double>(per_pass);
      rows.push_back({{"threads", row.threads},
                      {"pass", row.pass},
                      {"batches", row.batches},
                      {"samples_per_second", row.samples_per_second},
                      {"read_mb_per_second", row.read_mb_per_second},
                      {"batch_mb_per_second", row.batch_mb_per_second},
                      {"ms_per_batch", row.ms_per_batch}});
      run.rows.push_back(row);
      if (on_row) on_row(row);
    }
  }
  run.json = {{"data", r.data},
              {"batch", r.batch},
              {"sample_shape", info.sample_shape},
              {"batches_as", r.bytes ? "bytes" : "floats"},
              {"augment", r.augment.describe()},
              {"rows", rows}};
  // As the kernel benches' summaries: where it came from and every entry of the command's table.
  set_end(provenance);
  run.json["provenance"] = provenance_json(provenance);
  run.json["settings"] = r.settings.values;
  return run;
}

}  // namespace cnnscale
