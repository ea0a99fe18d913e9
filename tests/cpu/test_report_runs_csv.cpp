// runs.csv: `cnnscale report` writes one row per training run and per inference batch size of a
// whole results root, every setting and figure a column, read here by Python's csv module (as
// pandas reads it) rather than by our own parser where python3 is there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/runs_csv_test_util.hpp"
#include "cpu/test_report_util.hpp"
#include "io/infer_results.hpp"
#include "io/provenance.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

InferResult infer_file_result(const std::string& net, int64_t first_batch) {
  InferResult r;
  r.command = std::string("infer");
  r.scenario = std::string("offline");
  r.net = net;
  r.device = std::string("cpu");
  r.precision = std::string("fp32");
  r.int8 = Figure<InferInt8>::null();
  r.world_size = 1;
  r.devices = std::vector<std::string>{"cpu"};
  std::vector<InferBatch> batches;
  for (int64_t b : {first_batch, first_batch * 4}) {
    InferBatch x;
    x.batch = b;
    x.images_per_s = 100.0 * static_cast<double>(b);
    x.latency_p50_s = 0.01;
    x.latency_p99_s = 0.02;
    x.joules_per_image = NumberFigure::null();
    x.images_per_joule = NumberFigure::null();
    x.peak_memory_bytes = 1000 * b;
    batches.push_back(x);
  }
  r.batches = batches;
  return r;
}

TEST(ReportRunsCsv, OneRowPerRunWithItsSettingsAndFigures) {
  TempDir dir;
  RunResults a = testing::scaling_run("lenet", 64, 1, 0);
  a.config_text = "# cnnscale train\nrun: " +
                  json({{"net", "lenet"}, {"batch", 64}, {"seed", 7}, {"rank_batches", {32, 32}}}).dump() +
                  "\nnetwork: |\n  name: lenet\n";
  // A value that needs CSV quoting: a comma, a quote and a line break.
  a.summary.tags["note"] = "fast, \"warm\"\nsecond line";
  Provenance trained;
  trained.version = "0.1.0";
  trained.command_line = {"cnnscale", "train", "--net", "lenet", "--lr", "0.1"};
  trained.start_time = "2026-12-06T08:00:00Z";
  trained.end_time = "2026-12-06T08:30:00Z";
  trained.hosts = {"node-a"};
  a.provenance = trained;  // b: a file written before provenance was recorded
  testing::write_run(dir.str(), a);
  RunResults b = testing::scaling_run("lenet", 64, 2, 1);  // config text without a run line: no config cells
  testing::write_run(dir.str(), b);
  InferResult inf = infer_file_result("resnet", 2);
  Provenance provenance;
  provenance.version = "0.1.0";
  provenance.command_line = {"cnnscale", "infer", "--net", "resnet"};
  provenance.start_time = "2026-12-06T09:00:00Z";
  provenance.end_time = "2026-12-06T09:01:00Z";
  provenance.hosts = {"node-a", "node-b"};
  inf.provenance = provenance;
  save_infer_result(inf, prepare_infer_results(dir.str(), "serve", "inf-1", false, true), "inf-1");

  const report::ReportOutcome outcome = testing::report_without_plots(dir.str());
  const std::string csv_path = (fs::path(outcome.out_dir) / "runs.csv").string();
  ASSERT_TRUE(fs::exists(csv_path));
  EXPECT_NE(std::find(outcome.files.begin(), outcome.files.end(), csv_path), outcome.files.end());
  EXPECT_NE(testing::slurp(outcome.report_md).find("(runs.csv)"), std::string::npos);

  const json parsed = testing::runs_csv_table(csv_path);
  ASSERT_TRUE(parsed.is_object()) << testing::slurp(csv_path);
  const json& header = parsed["header"];
  ASSERT_GE(header.size(), 4u);
  EXPECT_EQ(header[0], "product");
  EXPECT_EQ(header[1], "experiment");
  EXPECT_EQ(header[2], "run_id");
  EXPECT_EQ(header[3], "path");
  const json& rows = parsed["rows"];
  // Two training runs, one inference file of two batch sizes.
  ASSERT_EQ(rows.size(), 4u) << testing::slurp(csv_path);
  std::map<std::string, json> training;
  std::vector<json> inference;
  for (const json& row : rows) {
    EXPECT_EQ(row.size(), header.size());  // every row has every column
    if (row["product"] == "training")
      training[row["run_id"].get<std::string>()] = row;
    else
      inference.push_back(row);
  }
  ASSERT_EQ(training.size(), 2u);
  const json& ra = training.at(a.run_id);
  EXPECT_EQ(ra["experiment"], "e");
  EXPECT_EQ(ra["path"], "e/" + a.run_id);
  EXPECT_EQ(ra["net"], "lenet");
  EXPECT_EQ(ra["world_size"], "1");
  EXPECT_EQ(ra["global_batch"], "64");
  EXPECT_DOUBLE_EQ(std::stod(ra["samples_per_s"].get<std::string>()), a.summary.samples_per_s.value());
  EXPECT_EQ(ra["config.batch"], "64");
  EXPECT_EQ(ra["config.seed"], "7");
  EXPECT_EQ(ra["config.rank_batches"], "32+32");
  EXPECT_EQ(ra["tag.note"], "fast, \"warm\"\nsecond line");
  EXPECT_EQ(ra["tag.repeat"], "0");
  EXPECT_EQ(ra["provenance.command_line"], "cnnscale train --net lenet --lr 0.1");
  EXPECT_EQ(ra["provenance.start_time"], "2026-12-06T08:00:00Z");
  EXPECT_EQ(ra["provenance.hosts"], "node-a");
  const json& rb = training.at(b.run_id);
  EXPECT_EQ(rb["world_size"], "2");
  EXPECT_EQ(rb["config.batch"], "");  // no recorded settings line
  EXPECT_EQ(rb["provenance.version"], "");  // none recorded
  EXPECT_EQ(rb["batches.batch"], "");  // an inference column
  ASSERT_EQ(inference.size(), 2u);
  EXPECT_EQ(inference[0]["run_id"], "inf-1");
  EXPECT_EQ(inference[0]["experiment"], "serve");
  EXPECT_EQ(inference[0]["net"], "resnet");
  EXPECT_EQ(inference[0]["batches.batch"], "2");
  EXPECT_EQ(inference[1]["batches.batch"], "8");
  EXPECT_EQ(inference[1]["batches.images_per_s"], "800");
  EXPECT_EQ(inference[1]["batches.joules_per_image"], "");  // null
  EXPECT_EQ(inference[0]["devices"], "cpu");
  EXPECT_EQ(inference[0]["provenance.command_line"], "cnnscale infer --net resnet");
  EXPECT_EQ(inference[1]["provenance.hosts"], "node-a,node-b");
  EXPECT_EQ(inference[0]["provenance.end_time"], "2026-12-06T09:01:00Z");
  EXPECT_EQ(inference[0]["samples_per_s"], "");  // a training column
  EXPECT_EQ(inference[0]["config.batch"], "");
}

}  // namespace
}  // namespace cnnscale
