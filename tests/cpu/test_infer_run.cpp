// check_infer_request and run_infer (infer/infer_run.hpp): what `cnnscale infer` refuses before it
// loads a network or opens a device, and a tiny CPU run whose saved result reads back through the
// inference schema (io/infer_results.hpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "infer/infer_run.hpp"
#include "io/infer_results.hpp"

namespace cnnscale {
namespace {

using testing::TempDir;

// No network of that name exists: the check may not load one.
infer::InferRequest valid() {
  infer::InferRequest r;
  r.net = "no_such_network";
  r.batches = {"1", "8"};
  return r;
}

std::string refusal(const infer::InferRequest& r, bool together = false) {
  try {
    check_infer_request(r, together);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(InferRun, RefusesBeforeLoadingAnything) {
  EXPECT_EQ(refusal(valid()), "");
  const infer::InferPlan plan = check_infer_request(valid());
  EXPECT_EQ(plan.sizes, (std::vector<int64_t>{1, 8}));
  EXPECT_FALSE(plan.max);
  EXPECT_TRUE(plan.offline);

  infer::InferRequest r = valid();
  r.batches = {"max", "4"};
  EXPECT_NE(refusal(r).find("comes last"), std::string::npos) << refusal(r);
  r = valid();
  r.batches = {"0"};
  EXPECT_NE(refusal(r).find("'0'"), std::string::npos) << refusal(r);
  r = valid();
  r.precision = "int8";
  EXPECT_NE(refusal(r).find("--calibration"), std::string::npos) << refusal(r);
  r = valid();
  r.calibration = "table.json";
  EXPECT_NE(refusal(r).find("--calibration applies"), std::string::npos) << refusal(r);
  r = valid();
  r.net.clear();
  EXPECT_NE(refusal(r).find("--checkpoint"), std::string::npos) << refusal(r);
  r = valid();
  r.memory_limit_gib = 1;
  EXPECT_NE(refusal(r).find("--memory-limit"), std::string::npos) << refusal(r);
  r = valid();
  r.rate = 10;
  EXPECT_NE(refusal(r).find("--rate"), std::string::npos) << refusal(r);
  r = valid();
  r.scenario = "server";
  r.rate = 10;
  EXPECT_NE(refusal(r).find("offline"), std::string::npos) << refusal(r);  // the batch list is offline's
  r.batches = {"1", "8", "64"};
  EXPECT_EQ(refusal(r), "");
  r = valid();
  r.min_queries = 0;
  EXPECT_NE(refusal(r).find("--min-queries"), std::string::npos) << refusal(r);
  // server-search searches one process's rate: refused for a job of several ranks only.
  r = valid();
  r.batches = {"1", "8", "64"};
  r.scenario = "server-search";
  EXPECT_EQ(refusal(r), "");
  EXPECT_NE(refusal(r, true).find("under mpirun"), std::string::npos) << refusal(r, true);
}

// One batch size of LeNet on the CPU, saved under its run id; the file reads back through the
// schema as what the run returned, with the settings it was given.
TEST(InferRun, ATinyCpuRunSavesAResultThatReadsBack) {
  const TempDir dir;
  infer::InferRequest r;
  r.net = "lenet";
  r.batches = {"2"};
  // Short windows: this checks what is saved, not how fast.
  r.measure.min_seconds = 0.05;
  r.measure.latency_seconds = 0.02;
  r.measure.warmup = 1;
  r.results_root = dir.str();
  r.experiment = "e";
  r.run_id = "lenet-r1";
  r.settings.values = {{"seconds", 0.05}, {"batch", {"2"}}};
  const infer::InferRun run = infer::run_infer(r);
  ASSERT_TRUE(run.rank0);
  ASSERT_EQ(run.rows.size(), 1u);
  EXPECT_EQ(run.rows[0].batch, 2);
  EXPECT_GT(run.rows[0].images_per_s, 0);
  EXPECT_FALSE(run.scenario);
  EXPECT_EQ(run.ranks, 1);

  const std::string file = infer_results_dir(dir.str(), "e") + "/lenet-r1.json";
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  std::ifstream in(file);
  const InferResult saved = infer_result_from_json(nlohmann::json::parse(in), file);
  EXPECT_EQ(saved.command.value(), "infer");
  EXPECT_EQ(saved.scenario.value(), "offline");
  EXPECT_EQ(saved.net.value(), "lenet");
  EXPECT_EQ(saved.device.value(), "cpu");
  EXPECT_EQ(saved.precision.value(), "fp32");
  ASSERT_EQ(saved.batches.value().size(), 1u);
  EXPECT_EQ(saved.batches.value()[0].batch.value(), 2);
  EXPECT_EQ(saved.batches.value()[0].images_per_s.value(), run.rows[0].images_per_s);
  EXPECT_TRUE(saved.provenance.has_value());
  EXPECT_EQ(saved.settings.value(), r.settings);
  EXPECT_EQ(saved.batches, run.result.batches);

  // The same run id again is refused before any work: results are never replaced.
  EXPECT_THROW(infer::run_infer(r), ConfigError);
}

}  // namespace
}  // namespace cnnscale
