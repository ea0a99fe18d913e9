// `cnnscale train` writes its results folder: run.h5 (read back by our reader and by h5py),
// summary.json and the CSV row, the timeline with warm-up flags, /epochs with accuracy, energy
// null (CPU without readable RAPL) or a number, never a half-written or overwritten folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "io/results_writer.hpp"
#include "measure/rapl.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> train_args(const std::string& root, const std::string& run_id) {
  // dist_convnet on 256 Fashion-MNIST samples, batch 32: 8 iterations per epoch, 3 epochs = 24
  // iterations, 10 of them warm-up (more than twice the warm-up remain).
  return {"train",        "--net",          std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml",
          "--data",       "fashion-mnist",  "--train-samples",
          "256",          "--test-samples", "100",
          "--batch",      "32",             "--epochs",
          "3",            "--results",      root,
          "--experiment", "exp",            "--run-id",
          run_id,         "--min-window",   "0",
          "--tag",        "repeat=1",       "--json"};
}

double number(const NumberFigure& v) {
  return v.value_or(NAN);
}

TEST(TrainResults, WritesACompleteFolderThatReadsBack) {
  TempDir dir;
  CliResult r = run_cnnscale(train_args(dir.str(), "run1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path run = fs::path(dir.str()) / "exp" / "run1";
  for (const char* f : {"run.h5", "summary.json", "summary.csv"}) EXPECT_TRUE(fs::is_regular_file(run / f)) << f;
  EXPECT_FALSE(fs::exists(fs::path(dir.str()) / "exp" / "run1.partial"));
  EXPECT_NE(r.err.find("results: " + run.string()), std::string::npos) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["results"], run.string());

  RunResults res = read_run_results(run.string());
  EXPECT_EQ(res.experiment, "exp");
  EXPECT_EQ(res.run_id, "run1");
  ASSERT_EQ(res.timeline.ranks(), 1);
  ASSERT_EQ(res.timeline.iterations(), 24);
  for (int64_t i = 0; i < 24; ++i) {
    EXPECT_EQ(res.timeline.iteration()[static_cast<size_t>(i)], i);
    EXPECT_EQ(res.timeline.warmup()[static_cast<size_t>(i)], i < 10 ? 1 : 0);
    EXPECT_GT(res.timeline.at(i, 0, TimelinePhase::Forward), 0.0);
    EXPECT_GT(res.timeline.at(i, 0, TimelinePhase::Total), res.timeline.at(i, 0, TimelinePhase::Forward));
  }
  ASSERT_EQ(res.epochs.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(res.epochs[e].epoch, static_cast<int64_t>(e + 1));
    EXPECT_EQ(res.epochs[e].iteration, static_cast<int64_t>(8 * (e + 1)));
    EXPECT_TRUE(std::isfinite(res.epochs[e].loss));
    EXPECT_GT(res.epochs[e].top1, 0.0);
    EXPECT_LE(res.epochs[e].top1, res.epochs[e].top5);
    EXPECT_DOUBLE_EQ(res.epochs[e].lr, 0.01);
  }
  EXPECT_LT(res.epochs[2].loss, res.epochs[0].loss) << "it learns";
  const auto& S = res.summary;
  EXPECT_EQ(S.net.value(), "dist_convnet");
  EXPECT_EQ(S.tags.at("repeat"), "1");
  EXPECT_DOUBLE_EQ(number(S.window_iterations), 14);
  EXPECT_DOUBLE_EQ(number(S.global_batch), 32);
  EXPECT_DOUBLE_EQ(number(S.whole_iterations), 24) << "3 epochs of ceil(256 / 32)";
  const double spb = number(S.seconds_per_batch);
  EXPECT_GT(spb, 0.0);
  EXPECT_NEAR(number(S.samples_per_s), 32 / spb, 1e-6 * 32 / spb);
  EXPECT_NEAR(number(S.whole_training_seconds), 24 * spb, 1e-9);
  EXPECT_DOUBLE_EQ(number(S.test_top1), res.epochs[2].top1);
  // Energy on a CPU run is the host's RAPL: a number exactly when its counters can be read here.
  const bool rapl = measure::RaplReader().available();
  EXPECT_EQ(S.joules_per_batch.has_value(), rapl);
  if (!rapl) {
    EXPECT_NE(r.err.find("RAPL"), std::string::npos) << "one warning says why energy is null";
  }
  EXPECT_FALSE(res.methods.at("seconds_per_batch").empty());
  ASSERT_EQ(res.rank_summary.size(), 1u);
  EXPECT_DOUBLE_EQ(number(res.rank_summary[0].seconds_per_batch), spb);

  // summary.json carries the same numbers; the CSV has one header and one row.
  std::ifstream js(run / "summary.json");
  auto sj = nlohmann::json::parse(js);
  EXPECT_DOUBLE_EQ(sj["summary"]["seconds_per_batch"].get<double>(), spb);
  EXPECT_EQ(sj["ranks"].size(), 1u);
  std::ifstream csv(run / "summary.csv");
  std::string header, row, extra;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_FALSE(std::getline(csv, extra) && !extra.empty());
  EXPECT_NE(header.find("seconds_per_batch"), std::string::npos);

  // h5py sees the same timeline and summary (python3-h5py from Debian, installed by setup.sh).
  const char* python = "/usr/bin/python3";
  if (std::system(fmt::format("{} -c 'import h5py' >/dev/null 2>&1", python).c_str()) != 0)
    GTEST_SKIP() << python << " cannot import h5py (Debian package python3-h5py, installed by scripts/setup.sh)";
  const std::string script = dir.file("read.py");
  std::ofstream(script) << "import h5py, sys\n"
                           "f = h5py.File(sys.argv[1], 'r')\n"
                           "s = f['timeline/seconds']\n"
                           "print(s.shape[0], s.shape[1], s.shape[2], int(f['timeline/warmup'][:].sum()))\n"
                           "print(repr(float(f['summary'].attrs['seconds_per_batch'])))\n"
                           "h = f['system/hosts'][0]\n"
                           "print(len(f['epochs/top1']), len(h.decode() if isinstance(h, bytes) else h) > 0)\n";
  FILE* p = ::popen(fmt::format("{} {} {}/run.h5", python, script, run.string()).c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512];
  std::string text;
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  ASSERT_EQ(::pclose(p), 0) << text;
  std::istringstream lines(text);
  std::string shape, spb_text, epochs;
  std::getline(lines, shape);
  std::getline(lines, spb_text);
  std::getline(lines, epochs);
  EXPECT_EQ(shape, "24 1 8 10");
  EXPECT_DOUBLE_EQ(std::stod(spb_text), spb);
  EXPECT_EQ(epochs, "3 True");
}

TEST(TrainResults, ExistingRunIsNeverOverwrittenAndNoResultsWritesNothing) {
  TempDir dir;
  fs::create_directories(fs::path(dir.str()) / "exp" / "taken");
  CliResult r = run_cnnscale(train_args(dir.str(), "taken"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("taken"), std::string::npos) << r.err;

  auto args = train_args(dir.str(), "fresh");
  args.push_back("--no-results");
  r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(fs::path(dir.str()) / "exp" / "fresh"));
  EXPECT_TRUE(nlohmann::json::parse(r.out)["results"].is_null());
}

TEST(TrainResults, BadMeasurementOptionsAreOneLineErrors) {
  TempDir dir;
  for (auto [flag, value, says] : {std::tuple{"--tag", "novalue", "KEY=VALUE"},
                                   std::tuple{"--run-id", "../escape", "--run-id"},
                                   std::tuple{"--experiment", ".hidden", "--experiment"},
                                   std::tuple{"--power-hz", "-1", "--power-hz"},
                                   std::tuple{"--phase-repeats", "0", "--phase-repeats"},
                                   std::tuple{"--measure", "joules", "--measure"}}) {
    auto args = train_args(dir.str(), "x");
    args.push_back(flag);
    args.push_back(value);
    CliResult r = run_cnnscale(args);
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value;
    EXPECT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(fs::path(dir.str()) / "exp"));
}

TEST(TrainResults, MeasurePhasesRecordsLoopTimes) {
  TempDir dir;
  auto args = train_args(dir.str(), "ph");
  for (const char* a : {"--measure", "phases", "--phase-window", "0.05", "--phase-repeats", "2"}) args.push_back(a);
  CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RunResults res = read_run_results((fs::path(dir.str()) / "exp" / "ph").string());
  EXPECT_EQ(res.summary.measure.value(), "phases");
  const double f = number(res.summary.loop_forward_s);
  const double b = number(res.summary.loop_backward_s);
  EXPECT_GT(f, 0.0);
  // Derived by difference, never negative, even when load makes the loops come out of order (then
  // loop_pooled_repeats counts the repeats that were pooled); b > 0 would be a timing claim.
  EXPECT_GE(b, 0.0);
  EXPECT_GE(number(res.summary.loop_update_allreduce_s), 0.0);
  const double pooled = number(res.summary.loop_pooled_repeats);
  EXPECT_TRUE(pooled >= 0 && pooled <= 2) << pooled;
  EXPECT_TRUE(std::isfinite(number(res.summary.loop_update_allreduce_s)));
  EXPECT_FALSE(res.methods.at("loop_forward_s").empty());
}

}  // namespace
}  // namespace cnnscale::testing
