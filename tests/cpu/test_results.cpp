// Results files: run.h5 round trip through read_run_results (NaN, null and empty
// arrays included), summary.json/CSV contents, the sweep CSV append, and the partial-folder
// protocol: a write failing at any step leaves neither a final run folder nor a partial one.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.hpp"
#include "cpu/results_test_util.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::ResultsDir;
using testing::sample;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}


// NaN-aware equality of doubles: the files must keep NaN as NaN, not 0 or null.
void expect_same(double a, double b, const std::string& what) {
  if (std::isnan(a) || std::isnan(b))
    EXPECT_TRUE(std::isnan(a) && std::isnan(b)) << what << ": " << a << " vs " << b;
  else
    EXPECT_EQ(a, b) << what;
}
void expect_same(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) expect_same(a[i], b[i], what + "[" + std::to_string(i) + "]");
}

void expect_same(const RunResults& a, const RunResults& b) {
  EXPECT_EQ(a.experiment, b.experiment);
  EXPECT_EQ(a.run_id, b.run_id);
  EXPECT_EQ(a.config_text, b.config_text);
  EXPECT_EQ(a.system.hosts, b.system.hosts);
  ASSERT_EQ(a.system.gpus.size(), b.system.gpus.size());
  for (size_t i = 0; i < a.system.gpus.size(); ++i) {
    const auto &x = a.system.gpus[i], &y = b.system.gpus[i];
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.host, y.host);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.uuid, y.uuid);
    EXPECT_EQ(x.driver, y.driver);
    expect_same(x.power_limit_w, y.power_limit_w, "power_limit_w");
    EXPECT_EQ(x.sm_count, y.sm_count);
    EXPECT_EQ(x.memory_bytes, y.memory_bytes);
    expect_same(x.peak_sm_clock_mhz, y.peak_sm_clock_mhz, "peak_sm_clock_mhz");
    EXPECT_EQ(x.compute_capability, y.compute_capability);
  }
  EXPECT_EQ(a.system.cuda_version, b.system.cuda_version);
  EXPECT_EQ(a.system.cudnn_version, b.system.cudnn_version);
  EXPECT_EQ(a.system.nccl_version, b.system.nccl_version);
  EXPECT_EQ(a.system.mpi_version, b.system.mpi_version);
  EXPECT_EQ(a.system.nccl_env, b.system.nccl_env);
  EXPECT_EQ(a.system.engine_cache, b.system.engine_cache);
  EXPECT_EQ(a.timeline.ranks(), b.timeline.ranks());
  EXPECT_EQ(a.timeline.iteration(), b.timeline.iteration());
  EXPECT_EQ(a.timeline.warmup(), b.timeline.warmup());
  expect_same(a.timeline.seconds(), b.timeline.seconds(), "timeline");
  ASSERT_EQ(a.power.size(), b.power.size());
  for (size_t k = 0; k < a.power.size(); ++k) {
    EXPECT_EQ(a.power[k].rank, b.power[k].rank);
    EXPECT_EQ(a.power[k].uuid, b.power[k].uuid);
    expect_same(a.power[k].t_s, b.power[k].t_s, "t_s");
    expect_same(a.power[k].power_w, b.power[k].power_w, "power_w");
    expect_same(a.power[k].avg_power_w, b.power[k].avg_power_w, "avg_power_w");
    expect_same(a.power[k].energy_mj, b.power[k].energy_mj, "energy_mj");
    expect_same(a.power[k].sm_clock_mhz, b.power[k].sm_clock_mhz, "sm_clock_mhz");
    expect_same(a.power[k].temperature_c, b.power[k].temperature_c, "temperature_c");
  }
  ASSERT_EQ(a.epochs.size(), b.epochs.size());
  for (size_t i = 0; i < a.epochs.size(); ++i) {
    EXPECT_EQ(a.epochs[i].epoch, b.epochs[i].epoch);
    EXPECT_EQ(a.epochs[i].iteration, b.epochs[i].iteration);
    expect_same(a.epochs[i].loss, b.epochs[i].loss, "loss");
    expect_same(a.epochs[i].top1, b.epochs[i].top1, "top1");
    expect_same(a.epochs[i].top5, b.epochs[i].top5, "top5");
    expect_same(a.epochs[i].lr, b.epochs[i].lr, "lr");
  }
  const SummaryValues as = summary_values(a.summary), bs = summary_values(b.summary);
  ASSERT_EQ(as.size(), bs.size());
  for (const auto& [name, v] : as) {
    ASSERT_TRUE(bs.count(name)) << name;
    const SummaryValue& w = bs.at(name);
    ASSERT_EQ(v.index(), w.index()) << name;
    if (std::holds_alternative<double>(v))
      expect_same(std::get<double>(v), std::get<double>(w), name);
    else
      EXPECT_EQ(v, w) << name;
  }
  EXPECT_EQ(a.methods, b.methods);
  EXPECT_EQ(a.split.policy, b.split.policy);
  EXPECT_EQ(a.split.refine_every, b.split.refine_every);
  EXPECT_EQ(a.split.refine_model, b.split.refine_model);
  EXPECT_EQ(a.split.changes, b.split.changes);
  ASSERT_EQ(a.split.probe.size(), b.split.probe.size());  // NaN joules: compared one by one
  for (size_t i = 0; i < a.split.probe.size(); ++i) {
    EXPECT_EQ(a.split.probe[i].rank, b.split.probe[i].rank);
    EXPECT_EQ(a.split.probe[i].batch, b.split.probe[i].batch);
    expect_same(a.split.probe[i].seconds, b.split.probe[i].seconds, "probe seconds");
    expect_same(a.split.probe[i].joules, b.split.probe[i].joules, "probe joules");
  }
  ASSERT_EQ(a.split.steps.size(), b.split.steps.size());
  for (size_t i = 0; i < a.split.steps.size(); ++i) {
    EXPECT_EQ(a.split.steps[i].rank, b.split.steps[i].rank);
    EXPECT_EQ(a.split.steps[i].batch, b.split.steps[i].batch);
    expect_same(a.split.steps[i].seconds, b.split.steps[i].seconds, "step seconds");
    expect_same(a.split.steps[i].joules, b.split.steps[i].joules, "step joules");
  }
  expect_same(a.split.exchange_seconds, b.split.exchange_seconds, "exchange seconds");
  expect_same(a.split.exchange_joules, b.split.exchange_joules, "exchange joules");
  ASSERT_EQ(a.split.models.size(), b.split.models.size());
  for (size_t i = 0; i < a.split.models.size(); ++i) {
    const RankModel &x = a.split.models[i], &y = b.split.models[i];
    EXPECT_EQ(x.rank, y.rank);
    expect_same({x.seconds_fixed, x.seconds_per_sample, x.joules_fixed, x.joules_per_sample, x.wait_watts},
                {y.seconds_fixed, y.seconds_per_sample, y.joules_fixed, y.joules_per_sample, y.wait_watts}, "model");
  }
}

// train --experiment/--run-id and bench allreduce --experiment share this rule.
TEST(Results, NamesArePlainPathComponents) {
  for (const char* ok : {"seed_study", "caffenet-b64-g8-fp32-ov-r1-5bcc84e9", "a.b+c=d", "8gpu"})
    EXPECT_NO_THROW(check_results_name("--experiment", ok)) << ok;
  for (const char* bad : {"", ".", "..", ".hidden", "-x", "a/b", "../up", "a b", "x\\y"}) {
    try {
      check_results_name("--run-id", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("--run-id '{}': use letters, digits and . _ + = - (not starting with . or -)", bad));
    }
  }
}

TEST(Results, RoundTripThroughTheProjectReader) {
  ResultsDir dir;
  const RunResults r = sample();
  const std::string run_dir = write_run_results(r, {dir.str(), {}});
  EXPECT_EQ(run_dir, dir.str() + "/resnet_scaling/" + r.run_id);
  EXPECT_EQ(dir.entries("resnet_scaling"), std::vector<std::string>{r.run_id});
  EXPECT_EQ(dir.entries("resnet_scaling/" + r.run_id),
            (std::vector<std::string>{"run.h5", "summary.csv", "summary.json"}));
  expect_same(r, read_run_results(run_dir));
  expect_same(r, read_run_results(run_dir + "/run.h5"));
  // The same id again must not overwrite published results.
  EXPECT_THROW(write_run_results(r, {dir.str(), {}}), Error);
  expect_same(r, read_run_results(run_dir));
}

TEST(Results, EmptyRunRoundTrips) {
  ResultsDir dir;
  RunResults r;
  r.experiment = "e";
  r.run_id = "empty";
  r.timeline = Timeline(4);
  expect_same(r, read_run_results(write_run_results(r, {dir.str(), {}})));
}

// Files written before energy and edp refined their shares online have no /split refine_every: it
// reads as not recorded (-1), which the report takes as auto refining and the others not; the rest
// of the split is unchanged.
TEST(Results, FileWithoutRefineEveryReadsAsNotRecorded) {
  ResultsDir dir;
  const RunResults r = sample();
  const std::string run_dir = write_run_results(r, {dir.str(), {}});
  EXPECT_EQ(read_run_results(run_dir).split.refine_every, 20);
  const std::string h5 = run_dir + "/run.h5";
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Adelete_by_name(f, "/split", "refine_every", H5P_DEFAULT), 0);
  ASSERT_GE(H5Adelete_by_name(f, "/split", "refine_model", H5P_DEFAULT), 0);
  H5Fclose(f);
  const RunResults back = read_run_results(run_dir);
  EXPECT_EQ(back.split.refine_every, -1);
  EXPECT_EQ(back.split.refine_model, "");  // refined the time per sample alone, if at all
  // The rest as written (SplitRecord's == is false for NaN inside probe points: compare the parts).
  EXPECT_EQ(back.split.policy, r.split.policy);
  EXPECT_EQ(back.split.changes, r.split.changes);
  EXPECT_EQ(back.split.models.size(), r.split.models.size());
  EXPECT_EQ(back.split.exchange_seconds, r.split.exchange_seconds);
}

// Files written before the split was recorded have no /split: an even split without changes.
TEST(Results, FileWithoutSplitReadsAsEven) {
  ResultsDir dir;
  const std::string run_dir = write_run_results(sample(), {dir.str(), {}});
  const std::string h5 = run_dir + "/run.h5";
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "/split", H5P_DEFAULT), 0);
  H5Fclose(f);
  const RunResults back = read_run_results(run_dir);
  EXPECT_EQ(back.split, SplitRecord{});
  EXPECT_EQ(back.split.policy, "even");
  EXPECT_TRUE(back.split.changes.empty());
}

// Files written before the exchange was probed have neither /split/steps nor /split/exchange: no
// whole steps, and an exchange not measured (NaN), while the rest of the split reads as written.
TEST(Results, SplitWithoutExchangeProbeReadsAsNotMeasured) {
  ResultsDir dir;
  const RunResults written = sample();
  const std::string run_dir = write_run_results(written, {dir.str(), {}});
  const std::string h5 = run_dir + "/run.h5";
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "/split/steps", H5P_DEFAULT), 0);
  ASSERT_GE(H5Ldelete(f, "/split/exchange", H5P_DEFAULT), 0);
  H5Fclose(f);
  const SplitRecord back = read_run_results(run_dir).split;
  EXPECT_TRUE(back.steps.empty());
  EXPECT_TRUE(std::isnan(back.exchange_seconds));
  EXPECT_TRUE(std::isnan(back.exchange_joules));
  EXPECT_EQ(back.changes, written.split.changes);
  EXPECT_EQ(back.models.size(), written.split.models.size());
}

// Files written before the NCCL environment was recorded have no /system nccl_env: it reads as
// unknown (null), not as an error.
TEST(Results, FileWithoutNcclEnvironmentReadsAsUnknown) {
  ResultsDir dir;
  const std::string run_dir = write_run_results(sample(), {dir.str(), {}});
  EXPECT_EQ(read_run_results(run_dir).system.nccl_env, "NCCL_ALGO=Ring NCCL_NVLS_ENABLE=0");
  const std::string h5 = run_dir + "/run.h5";
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Adelete_by_name(f, "/system", "nccl_env", H5P_DEFAULT), 0);
  H5Fclose(f);
  EXPECT_EQ(read_run_results(run_dir).system.nccl_env, std::nullopt);
}

TEST(Results, SummaryJsonAndCsv) {
  ResultsDir dir;
  const RunResults r = sample();
  const std::string run_dir = write_run_results(r, {dir.str(), {}});
  json j = json::parse(read_text(run_dir + "/summary.json"));
  EXPECT_EQ(j["format"], "cnnscale-results-1");
  EXPECT_EQ(j["run_id"], r.run_id);
  EXPECT_EQ(j["summary"]["seconds_per_batch"].get<double>(), 0.123456789012345);
  EXPECT_TRUE(j["summary"]["joules_per_batch"].is_null());
  EXPECT_TRUE(j["summary"]["gflops_per_watt"].is_null());  // NaN: JSON has none
  EXPECT_EQ(j["summary"]["measure"], "steady");
  EXPECT_EQ(j["methods"]["joules_per_batch"], "unavailable: NVML not loaded");
  EXPECT_TRUE(j["system"]["cudnn_version"].is_null());
  EXPECT_EQ(j["system"]["gpus"][1]["uuid"], "GPU-2222");
  EXPECT_TRUE(j["system"]["gpus"][1]["name"].is_null());
  EXPECT_EQ(j["timeline"]["warmup_iterations"], 1);
  EXPECT_EQ(j["split"]["policy"], "auto");
  EXPECT_EQ(j["split"]["refine_every"], 20);
  EXPECT_EQ(j["split"]["refine_model"], "step_ratio");
  EXPECT_EQ(j["split"]["changes"],
            json::parse(R"([{"iteration":100,"shares":[32,32]},{"iteration":150,"shares":[40,24]}])"));
  EXPECT_EQ(j["split"]["probe"][1], json::parse(R"({"rank":1,"batch":8,"seconds":0.02,"joules":null})"));
  EXPECT_EQ(j["split"]["models"][0]["wait_watts"], 60.0);
  EXPECT_TRUE(j["split"]["models"][1]["joules_fixed"].is_null());
  EXPECT_EQ(j["split"]["steps"][0], json::parse(R"({"rank":0,"batch":32,"seconds":0.05,"joules":9.5})"));
  EXPECT_EQ(j["split"]["exchange"], json::parse(R"({"seconds":0.0035,"joules":null})"));
  EXPECT_EQ(read_text(run_dir + "/summary.csv"),
            "experiment,run_id,gflops_per_watt,joules_per_batch,measure,samples_per_s,seconds_per_batch,tag.note\n"
            "resnet_scaling,20261122T044300Z-0badc0de,nan,,steady,1040.5,0.123456789012345,"
            "\"a, \"\"quoted\"\" value\"\n");
}

TEST(Results, SweepCsvKeepsItsColumns) {
  ResultsDir dir;
  const std::string csv = dir.str() + "/sweep.csv";
  RunResults a = sample();
  append_summary_csv(csv, a);
  RunResults b = sample();
  b.run_id = "second";
  b.summary.tags.erase("note");  // missing: empty field
  b.summary.watts = 7.0;         // not in the header: left out
  b.summary.samples_per_s = 2000.0;
  append_summary_csv(csv, b);
  const std::string header =
      "experiment,run_id,gflops_per_watt,joules_per_batch,measure,samples_per_s,seconds_per_batch,tag.note\n";
  EXPECT_EQ(read_text(csv), header +
                                "resnet_scaling,20261122T044300Z-0badc0de,nan,,steady,1040.5,0.123456789012345,"
                                "\"a, \"\"quoted\"\" value\"\n"
                                "resnet_scaling,second,nan,,steady,2000,0.123456789012345,\n");
  // A file cut mid-row by a killed writer: the next row starts on its own line.
  {
    std::ofstream f(csv, std::ios::app);
    f << "resnet_scaling,cut";
  }
  b.run_id = "third";
  append_summary_csv(csv, b);
  EXPECT_NE(read_text(csv).find("resnet_scaling,cut\nresnet_scaling,third,nan,"), std::string::npos);
  // Not a summary CSV: refused rather than appended to.
  const std::string other = dir.str() + "/other.csv";
  std::ofstream(other) << "a,b\n1,2\n";
  EXPECT_THROW(append_summary_csv(other, a), ConfigError);
  EXPECT_EQ(read_text(other), "a,b\n1,2\n");
}

TEST(Results, FailureAtAnyStepLeavesNothingThatLooksComplete) {
  const std::vector<std::string> steps = {"h5:config", "h5:system",     "h5:timeline", "h5:power",
                                          "h5:epochs", "h5:summary",    "h5:split",    "h5:curve",
                                          "h5:provenance", "run.h5",    "summary.json", "summary.csv"};
  for (const auto& fail_at : steps) {
    ResultsDir dir;
    std::vector<std::string> seen;
    ResultsWriteOptions opt{dir.str(), [&](std::string_view step) {
                              seen.emplace_back(step);
                              // Files so far are in the partial folder, under temporary names
                              // while being written, never in the final folder.
                              EXPECT_FALSE(fs::exists(dir.str() + "/resnet_scaling/" + sample().run_id));
                              if (step == fail_at) throw RuntimeError("injected failure at " + fail_at);
                            }};
    EXPECT_THROW(write_run_results(sample(), opt), RuntimeError) << fail_at;
    EXPECT_EQ(seen.back(), fail_at);
    EXPECT_EQ(dir.entries("resnet_scaling"), std::vector<std::string>{}) << "failing at " << fail_at;
  }
  // Without a failure, every step ran in order.
  ResultsDir dir;
  std::vector<std::string> seen;
  write_run_results(sample(), {dir.str(), [&](std::string_view s) { seen.emplace_back(s); }});
  EXPECT_EQ(seen, steps);
}

TEST(Results, RunIdAndNames) {
  using namespace std::chrono;
  const auto t = sys_days{year{2026} / 11 / 22} + hours{4} + minutes{43} + seconds{7};
  const std::string id = make_run_id("net: a\n", t);
  EXPECT_TRUE(std::regex_match(id, std::regex("20261122T044307Z-[0-9a-f]{8}"))) << id;
  EXPECT_NE(id, make_run_id("net: b\n", t));
  ResultsDir dir;
  RunResults r = sample();
  r.run_id = "../escape";
  EXPECT_THROW(write_run_results(r, {dir.str(), {}}), ConfigError);
  r.run_id = "";
  EXPECT_THROW(write_run_results(r, {dir.str(), {}}), ConfigError);
}

TEST(Results, ReaderRefusesOtherFiles) {
  ResultsDir dir;
  const std::string text = dir.str() + "/not.h5";
  std::ofstream(text) << "hello";
  EXPECT_THROW(read_run_results(text), ConfigError);
  EXPECT_THROW(read_run_results(dir.str() + "/missing"), ConfigError);
}

}  // namespace
}  // namespace cnnscale
