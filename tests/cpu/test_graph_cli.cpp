// `train --no-graph` and the CUDA graph figures on the CPU: the CPU backend runs every op as it is
// called, so a run says why no step was captured (cuda_graph, graph_replays 0) in --json, summary.json,
// run.h5 and for its rank, without the GPU-only "CUDA graph:" line; --no-graph is accepted there,
// gets the same answer, and is recorded in the run's configuration only when given. --no-phase-marks
// times forward, backward and update as one phase, reported under update. --graph-copies is
// recorded when not 1 and refused outside [1, 16] before anything is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCpuNote = "off: cpu backend: ops run as they are called";

// A short LeNet run on synthetic data with its results under `root`/g/`run_id` and --json.
CliResult train(const std::string& root, const std::string& run_id, std::vector<std::string> extra = {}) {
  return short_lenet_train(root, "g", run_id, extra);
}

// The configuration text train() recorded for `run_id`.
std::string config_of(const TempDir& dir, const std::string& run_id) {
  return read_run_results((fs::path(dir.str()) / "g" / run_id).string()).config_text;
}

// train() with `extra` refused before anything is written: exit 2, `named` in its error line, no
// results folder.
void expect_refused(const TempDir& dir, const std::string& run_id, const std::vector<std::string>& extra,
                    const std::string& named) {
  CliResult r = train(dir.str(), run_id, extra);
  EXPECT_EQ(r.exit_code, 2) << run_id << ": " << r.err;
  EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(fs::path(dir.str()) / "g" / run_id)) << "a refused run writes nothing";
}

// The run's figures in every place they are written: --json, its summary, summary.json (job and its
// one rank, graph_replays as a JSON integer) and run.h5 read back.
void expect_graph_figures(const CliResult& r, const fs::path& run, const std::string& text) {
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cuda_graph"], text);
  EXPECT_EQ(j["graph_replays"], 0);
  EXPECT_EQ(j["summary"]["cuda_graph"], text);
  EXPECT_EQ(j["summary"]["graph_replays"], 0);

  std::ifstream in(run / "summary.json");
  ASSERT_TRUE(in) << "no summary.json in " << run;
  const auto file = nlohmann::json::parse(in);
  EXPECT_EQ(file["summary"]["cuda_graph"], text);
  EXPECT_TRUE(file["summary"]["graph_replays"].is_number_integer()) << file["summary"].dump();
  EXPECT_EQ(file["summary"]["graph_replays"], 0);
  EXPECT_FALSE(file["methods"]["cuda_graph"].get<std::string>().empty());
  ASSERT_EQ(file["ranks"].size(), 1u);
  EXPECT_EQ(file["ranks"][0]["cuda_graph"], text) << "one rank: its figures are the job's";
  EXPECT_EQ(file["ranks"][0]["graph_replays"], 0);

  const RunResults res = read_run_results(run.string());
  EXPECT_EQ(res.summary.cuda_graph.value_or(""), text);
  EXPECT_EQ(res.summary.graph_replays.value_or(-1), 0.0);
  ASSERT_EQ(res.rank_summary.size(), 1u);
  EXPECT_EQ(res.rank_summary[0].cuda_graph.value_or(""), text);
}

TEST(GraphCli, CpuRunSaysWhyNoStepWasCaptured) {
  TempDir dir;
  CliResult r = train(dir.str(), "cpu");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path run = fs::path(dir.str()) / "g" / "cpu";
  expect_graph_figures(r, run, kCpuNote);
  // The end-of-run lines speak of graphs on GPU runs only: a CPU run's device says it all.
  EXPECT_EQ(r.err.find("CUDA graph"), std::string::npos) << r.err;
  // A run with the default keeps the configuration (and so the run id hash) it had before the flag.
  EXPECT_EQ(read_run_results(run.string()).config_text.find("cuda_graph"), std::string::npos);
}

TEST(GraphCli, NoGraphIsAcceptedOnTheCpuAndRecorded) {
  TempDir dir;
  CliResult r = train(dir.str(), "off", {"--no-graph"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path run = fs::path(dir.str()) / "g" / "off";
  // The CPU backend cannot capture in any case: that is the reason given.
  expect_graph_figures(r, run, kCpuNote);
  EXPECT_EQ(r.err.find("CUDA graph"), std::string::npos) << r.err;
  EXPECT_NE(read_run_results(run.string()).config_text.find("\"cuda_graph\":false"), std::string::npos);
}

TEST(GraphCli, WithoutPhaseMarksTheStepIsTimedAsOnePhase) {
  TempDir dir;
  CliResult marked = train(dir.str(), "marked");
  CliResult one = train(dir.str(), "one", {"--no-phase-marks"});
  ASSERT_EQ(marked.exit_code, 0) << marked.err;
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto pm = nlohmann::json::parse(marked.out)["phases"], p1 = nlohmann::json::parse(one.out)["phases"];
  EXPECT_GT(pm["forward"].get<double>(), 0.0);
  EXPECT_GT(pm["backward"].get<double>(), 0.0);
  EXPECT_EQ(p1["forward"].get<double>(), 0.0);
  EXPECT_EQ(p1["backward"].get<double>(), 0.0);
  // Update then holds the whole step from forward on (no timing comparison between the two runs:
  // host clocks on a shared CI machine make that a coin toss).
  EXPECT_GT(p1["update"].get<double>(), 0.0);
  const std::string config = config_of(dir, "one");
  EXPECT_NE(config.find("\"phase_marks\":false"), std::string::npos) << config;
  EXPECT_EQ(config_of(dir, "marked").find("phase_marks"), std::string::npos);
}

// --graph-copies sets how many copies of an NCCL job's captured step the host may queue ahead. A
// CPU run captures nothing: it accepts the flag and, since it changes nothing there, records nothing
// (its configuration, and so an id derived from it, stays the default's).
TEST(GraphCli, GraphCopiesAreAcceptedOnTheCpuUnrecordedAndRefusedOutOfRange) {
  TempDir dir;
  CliResult two = train(dir.str(), "two", {"--graph-copies", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const std::string config = config_of(dir, "two");
  EXPECT_EQ(config.find("graph_copies"), std::string::npos) << config;
  for (const char* bad : {"0", "17", "-1"})
    expect_refused(dir, std::string("bad") + bad, {"--graph-copies", bad}, "--graph-copies");
}

// --conv-search picks among GPU convolution implementations and --deterministic how GPU algorithms
// are chosen; the CPU has one of each, so a CPU run accepts them, and records what is not the
// default in its configuration, where it gives the run its own id.
TEST(GraphCli, ConvSearchAndDeterministicAreRecordedOnlyWhenNotTheDefault) {
  TempDir dir;
  CliResult legacy = train(dir.str(), "legacy", {"--conv-search", "legacy"});
  CliResult all = train(dir.str(), "all", {"--conv-search", "all"});
  ASSERT_EQ(legacy.exit_code, 0) << legacy.err;
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const std::string config = config_of(dir, "legacy");
  EXPECT_NE(config.find("\"conv_search\":\"legacy\""), std::string::npos) << config;
  EXPECT_EQ(config_of(dir, "all").find("conv_search"), std::string::npos);
  CliResult width = train(dir.str(), "nowidth", {"--conv-search", "no-width"});
  ASSERT_EQ(width.exit_code, 0) << width.err;
  const std::string width_config = config_of(dir, "nowidth");
  EXPECT_NE(width_config.find("\"conv_search\":\"no-width\""), std::string::npos) << width_config;
  // --deterministic likewise: accepted on the CPU (whose ops are deterministic anyway) and recorded.
  CliResult det = train(dir.str(), "det", {"--deterministic"});
  ASSERT_EQ(det.exit_code, 0) << det.err;
  const std::string det_config = config_of(dir, "det");
  EXPECT_NE(det_config.find("\"deterministic\":true"), std::string::npos) << det_config;
  EXPECT_EQ(config.find("deterministic"), std::string::npos) << config;
  expect_refused(dir, "bad", {"--conv-search", "fastest"}, "--conv-search");
}

// --layout: nchw is the CPU's only order (accepted, recorded); nhwc is refused on the CPU before
// anything is written, with the flag named.
TEST(GraphCli, LayoutIsRecordedAndNhwcRefusedOnTheCpu) {
  TempDir dir;
  CliResult nchw = train(dir.str(), "nchw", {"--layout", "nchw"});
  ASSERT_EQ(nchw.exit_code, 0) << nchw.err;
  const std::string config = config_of(dir, "nchw");
  EXPECT_NE(config.find("\"layout\":\"nchw\""), std::string::npos) << config;
  CliResult automatic = train(dir.str(), "auto", {"--layout", "auto"});
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_EQ(config_of(dir, "auto").find("layout"), std::string::npos);
  expect_refused(dir, "nhwc", {"--layout", "nhwc"}, "--layout nhwc");
  CliResult bad = train(dir.str(), "bad", {"--layout", "nchwc"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--layout"), std::string::npos) << bad.err;
}

// --batchnorm chooses between GPU kernels: auto is the default (not recorded), and cudnn or
// cnnscale on the CPU, which has one batch norm, is refused before anything is written.
TEST(GraphCli, BatchNormKernelsAreRefusedOnTheCpu) {
  TempDir dir;
  CliResult automatic = train(dir.str(), "auto", {"--batchnorm", "auto"});
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_EQ(config_of(dir, "auto").find("batchnorm"), std::string::npos);
  for (const char* kernels : {"cudnn", "cnnscale"})
    expect_refused(dir, kernels, {"--batchnorm", kernels}, "--batchnorm");
  CliResult bad = train(dir.str(), "bad", {"--batchnorm", "fastest"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--batchnorm"), std::string::npos) << bad.err;
}

TEST(GraphCli, HelpListsTheSwitches) {
  CliResult r = run_cnnscale({"train", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--no-graph"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("from a CUDA graph captured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--no-phase-marks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--graph-copies"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--conv-search"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--deterministic"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--layout"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--batchnorm"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cnnscale::testing
