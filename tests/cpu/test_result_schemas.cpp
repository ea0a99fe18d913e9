// The result schemas of io/result_schema.hpp: each product's struct written by its table and read
// back equal (every field of every table set, so none is left out of the writer or the reader),
// null kept apart from absent, and a file of the wrong shape refused with its key path.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/schema_test_util.hpp"
#include "io/allreduce_results.hpp"
#include "io/infer_results.hpp"
#include "io/result_schema.hpp"

namespace cnnscale {
namespace {

using nlohmann::json;
using testing::collect_names;
using testing::expect_every_field;
using testing::TempDir;

InferLatency latency(double base) {
  InferLatency l;
  l.count = 40;
  l.mean_s = base;
  l.p50_s = base * 0.9;
  l.p90_s = base * 1.5;
  l.p99_s = base * 2;
  l.max_s = base * 3;
  return l;
}

InferServer server(double rate) {
  InferServer s;
  s.offered_rate = rate;
  s.achieved_rate = rate * 0.98;
  s.queries = 120;
  s.batches = 30;
  s.mean_batch = 4.0;
  s.latency_bound_s = 0.015;
  s.latency = latency(0.004);
  s.within_bound = 0.99;
  s.meets_bound = true;
  return s;
}

// Every field of every inference table set (scenario figures and offline ones together, which no
// real run has, so that the round trip covers all of them).
InferResult every_infer_field() {
  InferResult r;
  r.provenance = testing::sample_provenance("infer");
  r.format = std::string(kInferFormat);
  r.time = std::string("2026-12-06T09:00:00Z");
  r.results = std::string("results/e/infer/x.json");
  r.command = std::string("infer");
  r.scenario = std::string("offline");
  r.run_id = std::string("x");
  r.net = std::string("resnet50");
  r.device = std::string("gpu:0");
  r.precision = std::string("int8");
  InferInt8 i;
  i.calibration = std::string("synthetic");
  i.int8_layers = std::vector<std::string>{"conv1", "conv2"};
  i.int8_outputs = std::vector<std::string>{"conv1"};
  i.kept = std::vector<std::string>{"fc"};
  i.between_layers = std::string("bf16");
  r.int8 = i;
  r.checkpoint = TextFigure::null();
  r.fill = std::string("gaussian");
  r.folded_batch_norms = 53;
  r.fused_epilogues = 33;
  r.fc_gemv = std::string("auto");
  r.cuda_graph = std::string("on");
  r.graph_replays = 812;
  r.engine_cache = std::string("/tmp/cache.json");
  r.world_size = 2;
  r.devices = std::vector<std::string>{"gpu:0", "gpu:1"};
  InferBatch b;
  b.batch = 64;
  b.window_batches = 100;
  b.latency_batches = 20;
  b.images_per_s = 2500.5;
  b.window_seconds = 2.56;
  b.latency_mean_s = 0.025;
  b.latency_p50_s = 0.024;
  b.latency_p90_s = 0.026;
  b.latency_p99_s = 0.03;
  b.joules_per_image = 0.12;
  b.images_per_joule = 8.3;
  b.watts = 300.5;
  b.energy_source = std::string("gpu");
  b.sm_clock_mhz = 1980.0;
  b.peak_memory_bytes = int64_t{3} << 30;
  InferRankFigures k0, k1;
  k0.rank = 0;
  k0.images_per_s = 2500.5;
  k0.watts = 300.5;
  k1.rank = 1;
  k1.images_per_s = 2400.25;
  k1.watts = NumberFigure::null();
  b.ranks = std::vector<InferRankFigures>{k0, k1};
  b.job_images_per_s = 4900.75;
  b.job_watts = 300.5;
  b.job_images_per_joule = 16.3;
  InferBatch b2 = b;
  b2.batch = 128;
  b2.joules_per_image = NumberFigure::null();
  r.batches = std::vector<InferBatch>{b, b2};
  InferMaxBatch m;
  m.batch = 128;
  m.limit_bytes = int64_t{80} << 30;
  m.fixed_bytes = 1 << 20;
  m.bytes_per_sample = 1 << 16;
  m.listed_beyond = std::vector<int64_t>{4096};
  r.max_batch = m;
  r.prepared_batch_sizes = std::vector<int64_t>{1, 2, 4};
  r.padded_fraction = 0.125;
  r.queries_per_s = 310.5;
  r.job_queries_per_s = 620.25;
  r.rank_queries_per_s = std::vector<double>{310.5, 309.75};
  r.joules_per_query = 0.5;
  r.watts = 155.25;
  r.energy_source = std::string("gpu");
  r.queries = 500;
  r.latency = latency(0.003);
  r.server = server(300);
  r.best_rate = 300.0;
  r.resolution = 4.6875;
  r.trials = std::vector<InferServer>{server(150), server(300)};
  r.settings = testing::sample_settings();
  return r;
}

TEST(ResultSchemas, FieldNamesAreUniqueInEveryTable) {
  for (const SchemaTable& t : result_schema_tables()) {
    std::set<std::string_view> names;
    for (const FieldInfo& f : t.fields) EXPECT_TRUE(names.insert(f.name).second) << t.name << ": " << f.name << " twice";
    EXPECT_FALSE(t.fields.empty()) << t.name;
  }
}

TEST(ResultSchemas, InferenceRoundTripsThroughJsonText) {
  const InferResult r = every_infer_field();
  const json written = infer_result_json(r);
  // Every field of every inference table is in the sample, so the round trip below covers each.
  std::set<std::string> names;
  collect_names(written, "", names);
  for (const SchemaTable& t : result_schema_tables()) {
    if (t.product != "inference") continue;
    const std::string prefix = t.name == "infer" ? "" : t.name.substr(std::string("infer.").size()) + ".";
    for (const FieldInfo& f : t.fields) EXPECT_TRUE(names.count(prefix + std::string(f.name))) << prefix << f.name;
  }
  EXPECT_TRUE(written["checkpoint"].is_null());
  EXPECT_TRUE(written["batches"][0]["ranks"][1]["watts"].is_null());
  EXPECT_TRUE(written["folded_batch_norms"].is_number_integer());
  EXPECT_TRUE(written["batches"][0]["images_per_s"].is_number_float());
  const InferResult back = infer_result_from_json(json::parse(written.dump(2)), "x.json");
  EXPECT_EQ(back, r);
  EXPECT_TRUE(back.checkpoint.is_null());
}

TEST(ResultSchemas, InferenceAbsentFieldsStayAbsent) {
  InferResult r;
  r.net = std::string("lenet");
  r.device = std::string("cpu");
  r.precision = std::string("fp32");
  r.int8 = Figure<InferInt8>::null();
  const json written = infer_result_json(r);
  EXPECT_EQ(written, json::parse(R"({"net":"lenet","device":"cpu","precision":"fp32","int8":null})"));
  EXPECT_EQ(infer_result_from_json(written, "x.json"), r);
}

// A command's settings keep their types through the file (a count stays a count, a list a list), a
// file without them (written before they were recorded) reads as having none, and a value that is
// no setting's (an object, a list of lists) is refused with its key path.
TEST(ResultSchemas, SettingsKeepTheirTypesAndRefuseWhatNoSettingHolds) {
  const json written = infer_result_json(every_infer_field());
  EXPECT_TRUE(written["settings"]["batch"].is_number_integer());
  EXPECT_TRUE(written["settings"]["seconds"].is_number_float());
  EXPECT_TRUE(written["settings"]["check"].is_boolean());
  EXPECT_EQ(infer_result_from_json(json::parse(written.dump()), "r.json").settings.value(), testing::sample_settings());
  json old = written;
  old.erase("settings");
  EXPECT_FALSE(infer_result_from_json(old, "r.json").settings.written());
  for (const auto& [bad, path] : {std::pair{json{{"batch", json::object({{"a", 1}})}}, "settings.batch"},
                                  std::pair{json{{"threads", json::array({json::array({1, 2})})}}, "settings.threads[0]"},
                                  std::pair{json::array({1}), "settings"}}) {
    json j = written;
    j["settings"] = bad;
    try {
      infer_result_from_json(j, "r.json");
      FAIL() << "settings " << bad.dump() << " were read";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("r.json: \"" + std::string(path) + "\" is not"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ResultSchemas, InferenceFileIsWrittenWithItsFormatAndReadBack) {
  TempDir dir;
  InferResult r = every_infer_field();
  r.run_id = TextFigure();
  save_infer_result(r, dir.str(), "run-7");
  EXPECT_EQ(r.results.value(), dir.file("run-7.json"));
  std::ifstream in(dir.file("run-7.json"));
  const json file = json::parse(in);
  EXPECT_EQ(file["format"], kInferFormat);
  EXPECT_EQ(file["run_id"], "run-7");
  EXPECT_FALSE(file.contains("results"));  // the file's own path is --json's copy's only
  InferResult expected = r;
  expected.results = TextFigure();
  EXPECT_EQ(infer_result_from_json(file, dir.file("run-7.json")), expected);
}

TEST(ResultSchemas, InferenceReaderNamesTheFileAndKeyPath) {
  json j = infer_result_json(every_infer_field());
  j["batches"][1]["images_per_s"] = "fast";
  try {
    infer_result_from_json(j, "r.json");
    FAIL() << "a text images_per_s was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("r.json: \"batches[1].images_per_s\" is not a number"), std::string::npos)
        << e.what();
  }
  j = infer_result_json(every_infer_field());
  j["batches"][0].erase("latency_p99_s");
  EXPECT_THROW(
      {
        try {
          infer_result_from_json(j, "r.json");
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("missing \"batches[0].latency_p99_s\""), std::string::npos) << e.what();
          throw;
        }
      },
      ConfigError);
  j = infer_result_json(every_infer_field());
  j["world_size"] = 2.5;
  EXPECT_THROW(infer_result_from_json(j, "r.json"), ConfigError);
  j = infer_result_json(every_infer_field());
  j["unknown_later_field"] = 1;  // a later version's field is skipped
  EXPECT_EQ(infer_result_from_json(j, "r.json"), every_infer_field());
}

AllreduceSizeResult allreduce_size(int64_t bytes) {
  AllreduceSizeResult s;
  s.bytes = bytes;
  s.count = bytes / 2;
  s.type = std::string("bfloat16");
  s.time_us = 12.5;
  s.time_min_us = 12.0;
  s.time_max_us = 14.25;
  s.algbw_gbs = static_cast<double>(bytes) / 12.5e3;
  s.busbw_gbs = static_cast<double>(bytes) / 12.5e3 * 1.75;
  s.wrong = 0;
  s.energy_iters = 4096;
  s.energy_seconds = 1.5;
  s.joules = 0.002;
  s.nj_per_byte = NumberFigure::null();
  s.dynamic_nj_per_byte = 0.5;
  s.watts_per_device = 410.5;
  return s;
}

AllreduceResult every_allreduce_field() {
  AllreduceResult a;
  a.provenance = testing::sample_provenance("bench");
  a.benchmark = std::string("allreduce");
  a.format = std::string(kAllreduceBenchFormat);
  a.time = std::string("2026-12-06T09:00:00Z");
  a.host = std::string("node-a");
  a.op = std::string("sum");
  a.dtype = std::string("bf16");
  a.in_place = true;
  a.ranks = 8;
  a.device = std::string("gpu");
  a.algo = std::string("ring");
  a.issue = std::string("graph");
  a.max_ctas = 8;
  a.cta_policy = std::string("efficiency");
  a.priority = TextFigure::null();
  a.library = std::string("NCCL 2.28.9, NCCL_ALGO=Ring");
  a.rank_devices = std::vector<std::string>{"node-a gpu:0 NVIDIA H100 GPU-1", "node-a gpu:1 NVIDIA H100 GPU-2"};
  a.warmup_iters = 5;
  a.iters = 20;
  a.repeats = 5;
  a.time_definition = std::string("median per allreduce over repeats, each repeat's slowest rank");
  a.busbw_definition = std::string("algbw * 2(n-1)/n");
  a.checked = true;
  a.rows = std::vector<AllreduceSizeResult>{allreduce_size(1024), allreduce_size(1 << 20)};
  a.nccl_env = std::string("NCCL_NVLS_ENABLE=0");
  a.energy_method = std::string("NVML counter");
  a.energy_window_seconds = 1.0;
  a.energy_settle_seconds = 0.5;
  a.idle_watts_per_device = 70.25;
  a.settings = testing::sample_settings();
  return a;
}

TEST(ResultSchemas, AllreduceRoundTripsThroughJsonText) {
  const AllreduceResult a = every_allreduce_field();
  const json written = allreduce_result_json(a);
  expect_every_field(written, "allreduce", "allreduce");
  EXPECT_TRUE(written["rows"][0]["bytes"].is_number_integer());
  EXPECT_TRUE(written["rows"][1]["nj_per_byte"].is_null());
  EXPECT_EQ(allreduce_result_from_json(json::parse(written.dump(2)), "s.json"), a);
  json bad = written;
  bad["rows"][1]["bytes"] = 1.5;
  try {
    allreduce_result_from_json(bad, "s.json");
    FAIL() << "a fractional byte count was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("s.json: \"rows[1].bytes\" is not a count"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cnnscale
