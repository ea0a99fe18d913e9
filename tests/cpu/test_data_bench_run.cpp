// check_data_bench_request and run_data_bench (experiment/data_bench_run.hpp): what `bench data`
// refuses before it measures anything, and the input pipeline measured on a small shard folder.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cpu/shards_test_util.hpp"
#include "experiment/data_bench_run.hpp"

namespace cnnscale {
namespace {

using namespace shards_test;

std::string refusal(const DataBenchRequest& r) {
  try {
    check_data_bench_request(r);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DataBenchRun, RefusesBeforeMeasuringAnything) {
  TempDir t;
  DataBenchRequest r;
  r.data = "hdf5:" + write_set(t.str(), 23);
  EXPECT_EQ(refusal(r), "");
  r.threads = {1, 0};  // refused before thread count 1 is measured
  EXPECT_NE(refusal(r).find("--threads"), std::string::npos) << refusal(r);
  r = DataBenchRequest();
  r.data = "synthetic";
  EXPECT_NE(refusal(r).find("reads nothing"), std::string::npos) << refusal(r);
}

// Both passes of each thread count, in order, each handed over as measured and in the JSON object.
TEST(DataBenchRun, MeasuresBothPassesOfEachThreadCount) {
  TempDir t;
  DataBenchRequest r;
  r.data = "hdf5:" + write_set(t.str(), 23);
  r.batch = 5;
  r.batches = 3;
  r.threads = {1, 2};
  r.settings.values = {{"batch", 5}};
  std::vector<std::string> seen;
  const DataBenchRun run =
      run_data_bench(r, [&](const DataBenchRow& row) { seen.push_back(std::to_string(row.threads) + row.pass); });
  EXPECT_EQ(seen, (std::vector<std::string>{"1first", "1second", "2first", "2second"}));
  ASSERT_EQ(run.rows.size(), 4u);
  ASSERT_EQ(run.json["rows"].size(), 4u);
  for (size_t i = 0; i < run.rows.size(); ++i) {
    const DataBenchRow& row = run.rows[i];
    EXPECT_EQ(row.batches, 3);  // 23 samples hold 4 batches of 5: --batches 3 is the pass
    EXPECT_GT(row.samples_per_second, 0.0);
    // Stored bytes are uint8, batches float: four times as many bytes plus a label per sample.
    EXPECT_NEAR(row.batch_mb_per_second, row.read_mb_per_second * (4.0 * kBytes + 4.0) / kBytes,
                1e-9 * row.batch_mb_per_second);
    EXPECT_EQ(run.json["rows"][i]["samples_per_second"].get<double>(), row.samples_per_second);
  }
  EXPECT_EQ(run.json["batches_as"], "floats");
  EXPECT_EQ(run.json["settings"], r.settings.values);
  EXPECT_TRUE(run.json.contains("provenance"));
  // A batch larger than the data set: refused when it is opened.
  r.batch = 100;
  EXPECT_THROW(run_data_bench(r), ConfigError);
}

}  // namespace
}  // namespace cnnscale
