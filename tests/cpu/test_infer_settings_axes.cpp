// Every key of an inference experiment's infer: section is also a matrix axis (matrix.seconds: [1, 3]),
// as train's settings are: the sweep expands it into points, writes each point's value on its run's
// `cnnscale infer` command line, records it in the run's configuration by its entry's rule (so the
// run ids differ), and the inference report keeps the points apart, a row per value. A key given as
// both the fixed key and the axis is refused, naming both.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/report_infer.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale::testing {
namespace {

// Whether `args` holds `words` one after the other.
bool holds(const std::vector<std::string>& args, const std::vector<std::string>& words) {
  return std::search(args.begin(), args.end(), words.begin(), words.end()) != args.end();
}

TEST(InferSettingsAxes, EveryInferKeyIsAnAxisOnTheCommandLinesConfigurationsAndRunIds) {
  int axes = 0;
  for (const Setting& s : infer_settings()) {
    if (s.section != "infer" || s.name == "batch" || s.name == "calibration") continue;
    ++axes;
    const nlohmann::json other = other_value(s, s.default_value);
    const nlohmann::json values = {s.default_value, other};
    const Experiment e = parse(kInferExperiment, {fmt::format("matrix.{}={}", s.name, values.dump())}, gpu_host(2));
    const std::vector<RunSpec> runs = expand_runs(e);
    ASSERT_EQ(runs.size(), 2u) << s.name;
    EXPECT_NE(runs[0].id, runs[1].id) << s.name;
    for (size_t i = 0; i < 2; ++i) {
      const RunSpec& r = runs[i];
      const nlohmann::json& v = values[i];
      EXPECT_EQ(r.settings, nlohmann::json({{s.name, v}})) << s.name;
      // The point's value on its command line: a switch's flag alone away from its default.
      const std::vector<std::string> args = infer_arguments(e, r, "/r");
      const std::vector<std::string> words = s.arguments(v);
      if (!words.empty()) EXPECT_TRUE(holds(args, words)) << s.name << " " << v;
      if (s.type == SettingType::Switch && v == s.default_value)
        EXPECT_EQ(std::find(args.begin(), args.end(), s.flag), args.end()) << s.name;
      // In the configuration by the entry's rule; the id names the point either way.
      if (s.records(v))
        EXPECT_EQ(r.config["infer"][s.name], v) << s.name;
      else
        EXPECT_FALSE(r.config["infer"].contains(s.name)) << s.name;
      EXPECT_NE(r.id.find(fmt::format("-fp32-{}{}-r1-", s.name, s.text(v))), std::string::npos) << r.id;
    }
    // The other value is recorded (NotDefault or Always): another configuration.
    EXPECT_NE(runs[0].config_hash, runs[1].config_hash) << s.name;
    // The run of the other value is the run of the fixed key's value, but for the id's axis part.
    const Experiment fixed = parse(kInferExperiment, {fmt::format("infer.{}={}", s.name, other.dump())}, gpu_host(2));
    EXPECT_EQ(expand_runs(fixed)[0].config, runs[1].config) << s.name;
    // The fixed part leaves the axis to the runs.
    EXPECT_FALSE(e.fixed_json()["infer"].contains(s.name)) << s.name;
    EXPECT_EQ(e.resolved_json()["matrix"][s.name], values) << s.name;
  }
  EXPECT_GE(axes, 10);
}

TEST(InferSettingsAxes, AxesMultiplyAndComeInnermost) {
  const Experiment e =
      parse(kInferExperiment, {"matrix.seconds=[1, 2]", "matrix.fuse=[true, false]", "matrix.precision=[fp32, bf16]"},
            gpu_host(2));
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 8u);
  std::set<std::string> ids;
  for (const RunSpec& r : runs) ids.insert(r.id);
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(runs[0].id.rfind("lenet-infer-g1-fp32-seconds1-fusetrue-r1-", 0), 0u) << runs[0].id;
  EXPECT_EQ(runs[1].id.rfind("lenet-infer-g1-fp32-seconds1-fusefalse-r1-", 0), 0u) << runs[1].id;
  EXPECT_EQ(runs[2].id.rfind("lenet-infer-g1-fp32-seconds2-fusetrue-r1-", 0), 0u) << runs[2].id;
  EXPECT_EQ(runs[4].id.rfind("lenet-infer-g1-bf16-seconds1-fusetrue-r1-", 0), 0u) << runs[4].id;
  EXPECT_EQ(flag_value(infer_arguments(e, runs[3], "/r"), "--seconds"), "2");
  const std::vector<std::string> unfused = infer_arguments(e, runs[3], "/r");
  EXPECT_NE(std::find(unfused.begin(), unfused.end(), "--no-fuse"), unfused.end());
}

TEST(InferSettingsAxes, BadAxesAreRefusedWhereTheyAreWritten) {
  // The key and the axis at once: refused at the axis, naming the fixed key.
  expect_error(kInferExperiment + "  seconds: [1, 2]\n",
               {"matrix.seconds", "seconds is given twice (also as 'infer.seconds')"}, {"infer.seconds=2"},
               gpu_host(2));
  expect_error(kInferExperiment + "  warmup: [1, 2]\n", {"matrix.warmup", "also as 'infer.warmup'"}, {"infer.warmup=2"},
               gpu_host(2));
  expect_error(kInferExperiment + "  fill: [constant, constant]\n", {"matrix.fill[1]", "constant is listed twice"}, {},
               gpu_host(2));
  expect_error(kInferExperiment + "  seconds: [1, -1]\n", {"matrix.seconds[1]"}, {}, gpu_host(2));
  expect_error(kInferExperiment + "  warmup: [1, 2]\nextra_args: [--warmup, \"3\"]\n",
               {"'--warmup' is set by matrix.warmup"}, {}, gpu_host(2));
  // memory_limit is the budget of a batch list ending with max, as its key is.
  expect_error(kInferExperiment + "  memory_limit: [1, 2]\n", {"matrix.memory_limit", "ending with max"},
               {"infer.batch=[1, 8]"}, gpu_host(2));
  // A train setting's axis stays refused in an inference experiment, and infer's in a training one;
  // fuse, a name of both tables, is infer's here.
  expect_error(kInferExperiment + "  lr: [0.1]\n", {"matrix.lr", "a train setting"}, {}, gpu_host(2));
  expect_error(kBaseExperiment + "  seconds: [1, 2]\n", {"matrix.seconds"});
  EXPECT_EQ(expand_runs(parse(kInferExperiment + "  fuse: [true, false]\n", {}, gpu_host(2))).size(), 2u);
  // The batch list is what each run sweeps; the int8 tables are per network: neither is an axis.
  expect_error(kInferExperiment + "  calibration: [synthetic]\n", {"matrix.calibration"}, {}, gpu_host(2));
}

// --only selects an inference sweep's points by an infer key (the point's value, or the one the
// run has without an axis) and its seed; train's settings are refused there, infer's keys in a
// training sweep.
TEST(InferSettingsAxes, OnlySelectsPointsByAnInferKey) {
  const Experiment e = parse(kInferExperiment + "  seconds: [1, 2]\n  warmup: [3, 5]\nseed: 4\n", {}, gpu_host(2));
  const std::vector<RunSpec> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 4u);
  auto selected = [&](const std::string& only) {
    std::vector<std::string> ids;
    for (const RunSpec& r : runs)
      if (parse_only({only}).matches(r)) ids.push_back(r.id.substr(0, r.id.rfind("-r1-")));
    return ids;
  };
  EXPECT_EQ(selected("seconds=2"),
            (std::vector<std::string>{"lenet-infer-g1-fp32-seconds2-warmup3", "lenet-infer-g1-fp32-seconds2-warmup5"}));
  EXPECT_EQ(selected("seconds=1,warmup=5"), (std::vector<std::string>{"lenet-infer-g1-fp32-seconds1-warmup5"}));
  EXPECT_EQ(selected("fill=constant").size(), 4u);  // not an axis: the experiment's value
  EXPECT_EQ(selected("fuse=false").size(), 0u);
  EXPECT_EQ(selected("seed=4").size(), 4u);

  TempDir dir;
  const std::string file = dir.file("axes.yaml");
  // On the CPU: the plan of GPU runs would be checked against this host's GPUs.
  std::string text = kInferExperiment + "  seconds: [1, 2]\n";
  text.replace(text.find("device: gpu"), 11, "device: cpu");
  std::ofstream(file) << text;
  const CliResult two = run_cnnscale({"sweep", file, "--dry-run", "--only", "seconds=2", "--results", dir.str()});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find("1 inference run(s)"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("lenet-infer-g1-fp32-seconds2-r1-"), std::string::npos) << two.out;
  const CliResult lr = run_cnnscale({"sweep", file, "--dry-run", "--only", "lr=0.1", "--results", dir.str()});
  EXPECT_EQ(lr.exit_code, 2);
  EXPECT_NE(lr.err.find("an inference experiment has no 'lr'"), std::string::npos) << lr.err;
  const std::string train = dir.file("train.yaml");
  std::ofstream(train) << kBaseExperiment;
  const CliResult seconds = run_cnnscale({"sweep", train, "--dry-run", "--only", "seconds=1", "--results", dir.str()});
  EXPECT_EQ(seconds.exit_code, 2);
  EXPECT_NE(seconds.err.find("'seconds' is a key of inference experiments"), std::string::npos) << seconds.err;
}

// A small inference sweep on the CPU over an axis the report already grouped by (fuse) and one it
// did not (seconds): four runs, each file records its point's values, and the report has a row per
// point, each of one file, with a column for each axis.
TEST(InferSettingsAxes, ASweepOverInferAxesRunsAndIsReportedARowPerPoint) {
  TempDir dir;
  const std::string file = dir.file("axes.yaml");
  std::ofstream(file) << "name: axes\nmode: infer\ndevice: cpu\nseed: 2\ninfer:\n  batch: [2]\n"
                         "  latency_seconds: 0.05\n  warmup: 1\nmatrix:\n  network: [lenet]\n  repeats: 1\n"
                         "  seconds: [0.1, 0.2]\n  fuse: [true, false]\n";
  const CliResult r = run_cnnscale({"sweep", file, "--results", dir.str()}, {"OPENBLAS_NUM_THREADS=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("4 ran, 0 already complete, 0 failed"), std::string::npos) << r.err;
  const Experiment e = load_experiment(file, {}, cpu_host());
  for (const RunSpec& run : expand_runs(e)) {
    std::ifstream in(infer_run_file(experiment_dir(dir.str(), e), run));
    ASSERT_TRUE(in) << run.id;
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["run_id"], run.id);
    EXPECT_EQ(j["settings"]["seconds"], run.settings["seconds"]) << run.id;
    EXPECT_EQ(j["settings"]["fuse"], run.settings["fuse"]) << run.id;
  }
  const report::Table t = report::infer_table(report::find_infer_results(experiment_dir(dir.str(), e)));
  ASSERT_EQ(t.rows.size(), 4u);
  ASSERT_GE(t.columns.size(), 8u);
  EXPECT_EQ(t.columns[5].header, "seconds");
  EXPECT_EQ(t.columns[6].header, "fuse");
  std::set<std::pair<std::string, std::string>> points;
  for (const auto& row : t.rows) {
    points.insert({row[5].text, row[6].text});
    EXPECT_EQ(row.back().text, "1");  // one file each: no point counted as another's repeat
  }
  EXPECT_EQ(points, (std::set<std::pair<std::string, std::string>>{
                        {"0.1", "true"}, {"0.1", "false"}, {"0.2", "true"}, {"0.2", "false"}}));
  // Done runs are found again by their ids: a second sweep runs nothing.
  const CliResult again = run_cnnscale({"sweep", file, "--results", dir.str()});
  EXPECT_NE(again.err.find("0 ran, 4 already complete"), std::string::npos) << again.err;
}

}  // namespace
}  // namespace cnnscale::testing
