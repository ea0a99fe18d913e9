// `cnnscale infer` on the CPU: per batch size it reports throughput, ordered latency percentiles and
// peak memory; it runs a `train` checkpoint's own network and weights; `--batch max` finds a batch
// that fits the given memory budget; and bad input is one line and exit 2 before any work.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

// Short windows: these check what is reported, not how fast (speed is for benchmarks).
const std::vector<std::string> kQuick = {"--seconds", "0.2", "--latency-seconds", "0.05", "--warmup", "1"};

std::vector<std::string> infer_with(std::vector<std::string> args) {
  args.insert(args.begin(), "infer");
  args.insert(args.end(), kQuick.begin(), kQuick.end());
  return args;
}

TEST(InferCli, EachBatchSizeReportsThroughputLatencyAndMemory) {
  CliResult r = run_cnnscale(infer_with({"--net", "lenet", "--batch", "1,4", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["command"], "infer");
  EXPECT_EQ(j["net"], "lenet");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["fill"], "gaussian");
  ASSERT_EQ(j["batches"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& b = j["batches"][i];
    SCOPED_TRACE(b.dump());
    EXPECT_EQ(b["batch"], i == 0 ? 1 : 4);
    EXPECT_GT(b["images_per_s"].get<double>(), 0);
    EXPECT_GE(b["window_batches"].get<int64_t>(), 3);
    EXPECT_GE(b["latency_batches"].get<int64_t>(), 20);
    const double p50 = b["latency_p50_s"], p90 = b["latency_p90_s"], p99 = b["latency_p99_s"];
    EXPECT_GT(p50, 0);
    EXPECT_LE(p50, p90);
    EXPECT_LE(p90, p99);
    EXPECT_GT(b["peak_memory_bytes"].get<int64_t>(), 0);
    // No GPU: no SM clock; energy only where RAPL is readable (then it is the CPU's).
    EXPECT_TRUE(b["sm_clock_mhz"].is_null());
    if (!b["energy_source"].is_null()) {
      EXPECT_EQ(b["energy_source"], "cpu");
    }
  }
  // Activations grow with the batch; the weights do not.
  EXPECT_GT(j["batches"][1]["peak_memory_bytes"].get<int64_t>(), j["batches"][0]["peak_memory_bytes"].get<int64_t>());
}

TEST(InferCli, TableNamesTheRunAndItsColumns) {
  CliResult r = run_cnnscale(infer_with({"--net", "lenet", "--batch", "2", "--fill", "constant"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("lenet on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("constant input"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("initialised weights"), std::string::npos) << r.out;
  for (const char* column : {"batch", "images/s", "p50 ms", "p99 ms", "J/image", "peak GiB"})
    EXPECT_NE(r.out.find(column), std::string::npos) << column << "\n" << r.out;
}

TEST(InferCli, RunsATrainCheckpointsOwnNetworkAndWeights) {
  TempDir dir;
  CliResult t = run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "3", "--batch", "4",
                              "--checkpoint-dir", dir.str(), "--no-results"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  std::string checkpoint;
  for (const auto& e : fs::directory_iterator(dir.str()))
    if (e.path().extension() == ".h5") checkpoint = e.path().string();
  ASSERT_FALSE(checkpoint.empty());
  CliResult r = run_cnnscale(infer_with({"--checkpoint", checkpoint, "--batch", "3", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["net"], "lenet");
  EXPECT_EQ(j["checkpoint"], checkpoint);
  // The checkpoint's weights must fit the network given beside it: another network is refused.
  CliResult bad = run_cnnscale(infer_with({"--checkpoint", checkpoint, "--net", "resnet_fmnist", "--batch", "1"}));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find(checkpoint), std::string::npos) << bad.err;
}

TEST(InferCli, BatchMaxFitsTheMemoryBudget) {
  // 64 MiB for LeNet: about 4 MiB of weights (and their gradients) and a few hundred KiB per sample.
  CliResult r = run_cnnscale(infer_with({"--net", "lenet", "--batch", "max", "--memory-limit", "0.0625", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("max_batch")) << r.out;
  const int64_t limit = j["max_batch"]["limit_bytes"], batch = j["max_batch"]["batch"];
  EXPECT_EQ(limit, int64_t{64} << 20);
  EXPECT_GT(batch, 8);
  ASSERT_EQ(j["batches"].size(), 1u);
  EXPECT_EQ(j["batches"][0]["batch"], batch);
  EXPECT_LE(j["batches"][0]["peak_memory_bytes"].get<int64_t>(), limit);
  // The model behind it: the prediction floor((limit - fixed) / per) is tried first and, if it does
  // not fit, stepped down by 10% (integer division): so the chosen batch is at most the prediction
  // and, allowing one step, within 10/9 of it (+4 for the two integer roundings).
  const int64_t fixed = j["max_batch"]["fixed_bytes"], per = j["max_batch"]["bytes_per_sample"];
  ASSERT_GT(per, 0);
  const int64_t predicted = (limit - fixed) / per;
  EXPECT_LE(batch, predicted);
  EXPECT_GE(batch * 10 / 9 + 4, predicted + 1);
}

// A list ending with max: the listed sizes that fit, then the largest that does; a listed size
// beyond it is left out and named, in the JSON and on stderr.
TEST(InferCli, BatchListEndingWithMaxRunsTheSizesThatFitThenTheLargest) {
  CliResult r =
      run_cnnscale(infer_with({"--net", "lenet", "--batch", "2,4,1000000,max", "--memory-limit", "0.0625", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const int64_t batch = j["max_batch"]["batch"];
  EXPECT_GT(batch, 8);
  ASSERT_EQ(j["batches"].size(), 3u) << r.out;
  EXPECT_EQ(j["batches"][0]["batch"], 2);
  EXPECT_EQ(j["batches"][1]["batch"], 4);
  EXPECT_EQ(j["batches"][2]["batch"], batch);
  EXPECT_EQ(j["max_batch"]["listed_beyond"], nlohmann::json::array({1000000})) << r.out;
  EXPECT_NE(r.err.find("batch 1000000 left out"), std::string::npos) << r.err;
}

// --run-id names the result file (a sweep's run id, which the file also records), and a second run
// of the same id is refused before any work: results are never replaced.
TEST(InferCli, RunIdNamesTheResultFileOnce) {
  TempDir dir;
  const std::vector<std::string> args = infer_with({"--net", "lenet", "--batch", "1", "--results", dir.str(),
                                                    "--experiment", "e", "--run-id", "lenet-infer-r1", "--json"});
  CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path file = fs::path(dir.str()) / "e" / "infer" / "lenet-infer-r1.json";
  EXPECT_EQ(nlohmann::json::parse(r.out)["results"], file.string());
  std::ifstream in(file);
  ASSERT_TRUE(in) << file;
  EXPECT_EQ(nlohmann::json::parse(in)["run_id"], "lenet-infer-r1");
  CliResult again = run_cnnscale(args);
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_NE(again.err.find("exists already"), std::string::npos) << again.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(file.parent_path()), fs::directory_iterator{}), 1);
}

TEST(InferCli, BatchNormsAreFoldedUnlessAskedNotTo) {
  CliResult r = run_cnnscale(infer_with({"--net", "resnet_fmnist", "--batch", "2", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["folded_batch_norms"].get<int64_t>(), 0) << r.out;
  CliResult kept = run_cnnscale(infer_with({"--net", "resnet_fmnist", "--batch", "2", "--no-fold", "--json"}));
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_EQ(nlohmann::json::parse(kept.out)["folded_batch_norms"], 0) << kept.out;
}

// After folding, each ReLU joins the convolution before it and each residual block's sum and ReLU
// its last convolution; --no-fuse keeps them. fc_gemv is a GPU choice: null here, and --fc-gemv off
// refused on the CPU before any work.
TEST(InferCli, EpiloguesAreFusedUnlessAskedNotTo) {
  CliResult r = run_cnnscale(infer_with({"--net", "resnet_fmnist", "--batch", "2", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["fused_epilogues"].get<int64_t>(), 0) << r.out;
  EXPECT_TRUE(j["fc_gemv"].is_null()) << r.out;
  CliResult kept = run_cnnscale(infer_with({"--net", "resnet_fmnist", "--batch", "2", "--no-fuse", "--json"}));
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_EQ(nlohmann::json::parse(kept.out)["fused_epilogues"], 0) << kept.out;
  CliResult gemv = run_cnnscale(infer_with({"--net", "lenet", "--batch", "1", "--fc-gemv", "off"}));
  EXPECT_EQ(gemv.exit_code, 2) << gemv.err;
  EXPECT_NE(gemv.err.find("--fc-gemv"), std::string::npos) << gemv.err;
}

// `time --inference` times what infer runs: forward passes alone, batch norms folded, and every
// ReLU and residual sum of resnet_fmnist fused (each follows a folded convolution or such a sum).
TEST(InferCli, TimeInferenceTimesTheFoldedForwardAlone) {
  CliResult r = run_cnnscale(
      {"time", "resnet_fmnist", "--inference", "--batch", "2", "--iterations", "2", "--warmup", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["inference"].get<bool>());
  EXPECT_GT(j["folded_batch_norms"].get<int64_t>(), 0) << r.out;
  EXPECT_GT(j["forward_ms"].get<double>(), 0.0);
  EXPECT_EQ(j["backward_ms"].get<double>(), 0.0);
  for (const auto& l : j["layers"]) {
    EXPECT_NE(l["type"], "BatchNorm") << r.out;  // every one of resnet_fmnist's follows a convolution
    EXPECT_NE(l["type"], "ReLU") << r.out;
    EXPECT_NE(l["type"], "Eltwise") << r.out;
  }
  CliResult refused = run_cnnscale({"time", "lenet", "--no-fold", "--iterations", "1"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--no-fold"), std::string::npos) << refused.err;
  CliResult no_table = run_cnnscale({"time", "lenet", "--calibration", "t.json", "--iterations", "1"});
  EXPECT_EQ(no_table.exit_code, 2) << no_table.err;
  EXPECT_NE(no_table.err.find("--calibration applies to --inference"), std::string::npos) << no_table.err;
}

// The scenarios' scheduling is tested on a fake clock (test_infer_scenario.cpp); here, that the
// command runs them on a real net and reports what they measured.
TEST(InferCli, SingleStreamReportsQueryLatencies) {
  CliResult r = run_cnnscale(infer_with({"--net", "lenet", "--scenario", "single-stream", "--min-queries", "10",
                                         "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["scenario"], "single-stream");
  EXPECT_GE(j["queries"].get<int64_t>(), 10);
  EXPECT_EQ(j["prepared_batch_sizes"], nlohmann::json({1}));
  EXPECT_EQ(j["padded_fraction"], 0.0);
  const nlohmann::json& l = j["latency"];
  EXPECT_GT(l["p50_s"].get<double>(), 0);
  EXPECT_LE(l["p50_s"].get<double>(), l["p90_s"].get<double>());
  EXPECT_LE(l["p90_s"].get<double>(), l["p99_s"].get<double>());
  EXPECT_GT(j["queries_per_s"].get<double>(), 0);
}

TEST(InferCli, ServerBatchesPoissonArrivalsOnPreparedSizes) {
  // 200 queries/s for 0.5 s against a net that serves a batch in milliseconds: about 100 queries,
  // batches of 1 to 4, and a 2 s bound no query can miss on any machine that runs the tests.
  CliResult r = run_cnnscale({"infer", "--net", "lenet", "--scenario", "server", "--rate", "200", "--max-batch", "4",
                              "--seconds", "0.5", "--latency-bound", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["scenario"], "server");
  EXPECT_EQ(j["prepared_batch_sizes"], nlohmann::json({1, 2, 4}));
  const nlohmann::json& s = j["server"];
  EXPECT_EQ(s["offered_rate"], 200.0);
  EXPECT_GT(s["queries"].get<int64_t>(), 0);
  EXPECT_GE(s["mean_batch"].get<double>(), 1.0);
  EXPECT_LE(s["mean_batch"].get<double>(), 4.0);
  EXPECT_EQ(s["latency_bound_s"], 2.0);
  EXPECT_TRUE(s["meets_bound"].get<bool>()) << s.dump();
  EXPECT_EQ(s["within_bound"], 1.0);
}

TEST(InferCli, ServerSearchRunsEachBisectionTrial) {
  CliResult r = run_cnnscale({"infer", "--net", "lenet", "--scenario", "server-search", "--max-batch", "4", "--seconds",
                              "0.2", "--rate-lo", "20", "--rate-hi", "400", "--rate-steps", "2", "--latency-bound", "2",
                              "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["scenario"], "server-search");
  EXPECT_EQ(j["trials"].size(), 3u);  // lo first, then one per step
  EXPECT_EQ(j["trials"][0]["offered_rate"], 20.0);
  EXPECT_GE(j["best_rate"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["resolution"].get<double>(), (400.0 - 20.0) / 4);
}

// Saved runs are what `cnnscale report` tables: two repeats of LeNet offline make one row per batch
// size with n = 2, and a server run is counted beside the table.
TEST(InferCli, SavedRunsMakeTheReportsInferenceTable) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int repeat = 0; repeat < 2; ++repeat) {
    CliResult r = run_cnnscale(
        infer_with({"--net", "lenet", "--batch", "1,2", "--results", dir.str(), "--experiment", "e", "--json"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j["results"].is_string()) << r.out;
    paths.push_back(j["results"]);
    EXPECT_EQ(fs::path(paths.back()).parent_path(), fs::path(dir.str()) / "e" / "infer");
  }
  EXPECT_NE(paths[0], paths[1]);  // never replaced, even within one second
  CliResult server = run_cnnscale({"infer", "--net", "lenet", "--scenario", "server", "--rate", "100", "--max-batch",
                                   "2", "--seconds", "0.2", "--latency-bound", "2", "--results", dir.str(),
                                   "--experiment", "e"});
  ASSERT_EQ(server.exit_code, 0) << server.err;
  // Without --results (and with it unset in the environment) nothing is saved.
  CliResult none = run_cnnscale(infer_with({"--net", "lenet", "--batch", "1", "--no-results", "--json"}));
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(nlohmann::json::parse(none.out)["results"].is_null() || !nlohmann::json::parse(none.out).contains("results"));

  CliResult rep = run_cnnscale({"report", dir.str(), "--no-plots"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("3 infer file(s)"), std::string::npos) << rep.out;
  std::ifstream md(fs::path(dir.str()) / "report" / "inference.md");
  ASSERT_TRUE(md) << "no inference.md";
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| lenet | cpu | fp32 | 1 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| lenet | cpu | fp32 | 2 |"), std::string::npos) << table;
  EXPECT_NE(table.find("1 single-stream/server file(s)"), std::string::npos) << table;
  std::ifstream csv(fs::path(dir.str()) / "report" / "inference.csv");
  ASSERT_TRUE(csv) << "no inference.csv";
}

// The report's inference figures, drawn from the inference table (where /usr/bin/python3 has
// matplotlib; setup.sh installs it, so CI draws them): throughput and images/J against batch size and
// p99 latency against throughput, read back from what each PNG says (its Description).
TEST(InferCli, ReportDrawsTheInferenceFigures) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy";
  TempDir dir;
  for (int repeat = 0; repeat < 2; ++repeat) {
    CliResult r = run_cnnscale(infer_with({"--net", "lenet", "--batch", "1,2,4", "--results", dir.str()}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  CliResult rep = run_cnnscale({"report", dir.str()});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const fs::path out = fs::path(dir.str()) / "report";
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string md = read(out / "report.md");
  const std::string throughput = read(out / "inference_throughput.png");
  ASSERT_EQ(throughput.substr(0, 4), "\x89PNG");
  EXPECT_NE(throughput.find("Inference throughput against batch size"), std::string::npos);
  EXPECT_NE(throughput.find("x: batch size"), std::string::npos);
  EXPECT_NE(throughput.find("legend: cpu, fp32"), std::string::npos);
  EXPECT_NE(md.find("](inference_throughput.png)"), std::string::npos) << md;
  const std::string latency = read(out / "inference_latency.png");
  ASSERT_EQ(latency.substr(0, 4), "\x89PNG");
  EXPECT_NE(latency.find("y: p99 latency (ms)"), std::string::npos);
  EXPECT_NE(latency.find("x: images/s"), std::string::npos);
  // Energy is there where the host's RAPL counter is readable; otherwise the figure says why not.
  if (fs::exists(out / "inference_efficiency.png"))
    EXPECT_NE(read(out / "inference_efficiency.png").find("y: images/J"), std::string::npos);
  else
    EXPECT_NE(md.find("`inference_efficiency.png` not drawn: no inference result measured energy"), std::string::npos)
        << md;
  // No training runs: no training figures.
  EXPECT_FALSE(fs::exists(out / "time_per_batch.png"));
}

TEST(InferCli, BadInputIsOneLineAndExitTwo) {
  expect_usage_error(infer_with({"--net", "lenet", "--scenario", "server"}), {"--rate"});
  expect_usage_error(infer_with({"--net", "lenet", "--scenario", "server", "--rate", "10", "--batch", "4"}),
                     {"--batch", "offline"});
  expect_usage_error(infer_with({"--net", "lenet", "--scenario", "server", "--rate", "10", "--latency-bound", "0"}),
                     {"--latency-bound"});
  expect_usage_error(infer_with({"--net", "lenet", "--scenario", "batch"}), {"--scenario", "batch"});
  // Flags a scenario would silently ignore are refused instead.
  expect_usage_error(infer_with({"--net", "lenet", "--rate", "10"}), {"--rate", "offline"});
  expect_usage_error(infer_with({"--net", "lenet", "--scenario", "server", "--rate", "10", "--rate-hi", "20"}),
                     {"--rate-lo/--rate-hi", "server"});
  expect_usage_error(infer_with({"--net", "lenet", "--batch", "4", "--memory-limit", "1"}), {"--memory-limit"});
  expect_usage_error(infer_with({"--net", "lenet", "--batch", "0"}), {"--batch", "'0'"});
  expect_usage_error(infer_with({"--net", "lenet", "--batch", "max,4"}), {"--batch", "max", "last"});
  expect_usage_error(infer_with({"--net", "lenet", "--batch", "1", "--run-id", "x", "--no-results"}),
                     {"--run-id", "--results"});
  expect_usage_error(infer_with({"--net", "lenet", "--batch", "eight"}), {"--batch", "eight"});
  expect_usage_error(infer_with({"--net", "lenet", "--fill", "zero"}), {"--fill", "zero"});
  expect_usage_error(infer_with({"--net", "lenet", "--precision", "int8"}), {"--precision", "int8"});
  expect_usage_error(infer_with({"--net", "lenet", "--precision", "bf16"}), {"--precision bf16 runs on a GPU only"});
  expect_usage_error(infer_with({"--batch", "1"}), {"--net", "--checkpoint"});
  expect_usage_error(infer_with({"--net", "lenet", "--seconds", "0"}), {"--seconds"});
  expect_usage_error(infer_with({"--checkpoint", "/nonexistent/c.h5", "--batch", "1"}), {"/nonexistent/c.h5"});
  expect_usage_error(infer_with({"--net", "no_such_network", "--batch", "1"}), {"no_such_network"});
}

}  // namespace
}  // namespace cnnscale::testing
