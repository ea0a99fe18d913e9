// The inference report groups files by infer's settings table: beside the network, device,
// precision, batch size and ranks, by each setting the table gives a report label (fill, fold,
// fuse, ...), read from the file's recorded settings (the default in files written before they were
// recorded). A setting's column appears only where its value varies, so a table of files that never
// vary one is as it was.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/temp_dir.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/report_infer.hpp"
#include "io/infer_results.hpp"

namespace cnnscale {
namespace {

using testing::TempDir;

// An offline CPU file of LeNet at batch 8; `settings`: its recorded settings (none: an older file).
InferResult offline_file(double images_per_s, const nlohmann::json& settings) {
  InferResult r;
  r.command = std::string("infer");
  r.scenario = std::string("offline");
  r.net = std::string("lenet");
  r.device = std::string("cpu");
  r.precision = std::string("fp32");
  r.world_size = 1;
  InferBatch b;
  b.batch = 8;
  b.images_per_s = images_per_s;
  b.latency_p50_s = b.latency_p99_s = 0.001;
  b.joules_per_image = b.images_per_joule = NumberFigure::null();  // not measured
  b.peak_memory_bytes = 1 << 20;
  r.batches = std::vector<InferBatch>{b};
  if (!settings.is_null()) r.settings = SettingValues{settings};
  return r;
}

std::vector<std::string> headers(const report::Table& t) {
  std::vector<std::string> out;
  for (const report::Column& c : t.columns) out.push_back(c.header);
  return out;
}

TEST(ReportInferGrouping, TheKeysAreInfersLabelledSettings) {
  std::vector<std::string> labels;
  for (const Setting& s : infer_settings())
    if (!s.report_label.empty()) labels.push_back(s.report_label);
  EXPECT_EQ(labels, (std::vector<std::string>{"fill", "seconds", "latency_seconds", "warmup", "memory_limit",
                                              "power_hz", "fold", "fc_gemv", "fuse", "graph"}));
}

TEST(ReportInferGrouping, FilesOfAnotherSettingValueAreKeptApartInItsColumn) {
  TempDir dir;
  const std::string infer = infer_results_dir(dir.str(), "e");
  std::filesystem::create_directories(infer);
  // Two repeats at the defaults (one written before settings were recorded), one with --no-fuse.
  write_infer_result(infer, "a", offline_file(100, nullptr));
  write_infer_result(infer, "b", offline_file(110, {{"fuse", true}, {"seed", 1}}));
  write_infer_result(infer, "c", offline_file(80, {{"fuse", false}, {"seed", 2}}));
  const report::Table t = report::infer_table(report::find_infer_results(dir.str()));
  const std::vector<std::string> h = headers(t);
  ASSERT_GE(h.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(h.begin(), h.begin() + 7),
            (std::vector<std::string>{"network", "device", "precision", "batch", "ranks", "fuse", "images/s"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][5].text, "false");
  EXPECT_EQ(t.rows[0].back().text, "1");  // files
  EXPECT_EQ(t.rows[1][5].text, "true");
  EXPECT_EQ(t.rows[1].back().text, "2");
  // The seed differs too, but it labels no group: repeats of one setup.
}

TEST(ReportInferGrouping, NoColumnWhereNothingVaries) {
  TempDir dir;
  const std::string infer = infer_results_dir(dir.str(), "e");
  std::filesystem::create_directories(infer);
  write_infer_result(infer, "a", offline_file(100, nullptr));
  write_infer_result(infer, "b", offline_file(110, {{"fill", "gaussian"}, {"fold", true}}));
  const report::Table t = report::infer_table(report::find_infer_results(dir.str()));
  EXPECT_EQ(headers(t)[5], "images/s");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0].back().text, "2");
}

}  // namespace
}  // namespace cnnscale
