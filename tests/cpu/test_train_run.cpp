// What `cnnscale train` runs, called as the command calls it (experiment/train_run.hpp): the binding
// of train's settings to TrainArgs, the checks made before anything is loaded, the run folder's
// claim, and a tiny CPU run through run_training, whose results folder and view calls are read back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/error_of.hpp"
#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "experiment/train_run.hpp"
#include "io/results_writer.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
// A namespace of its own: the helpers' names stay this file's in a unity build.
namespace train_run_test {
namespace {

namespace fs = std::filesystem;
using testing::config_error_of;
using testing::TempDir;

bool launched() { return MpiEnv::current() && MpiEnv::current()->initialized(); }

// lenet on synthetic data, 4 iterations of 8 samples on the CPU, written to ROOT/exp/<run_id>.
TrainArgs tiny_run(const std::string& root, const std::string& run_id) {
  TrainArgs a = default_train_args();
  a.net = "lenet";
  a.data = "synthetic";
  a.iterations = 4;
  a.options.batch = 8;
  a.options.display = 2;
  a.measure.results_root = root;
  a.measure.experiment = "exp";
  a.measure.run_id = run_id;
  a.measure.min_window = 0;
  return a;
}

// What a run told its view, in order.
class RecordingView : public TrainView {
 public:
  std::vector<std::string> calls;
  int64_t iterations = 0, global_batch = 0;
  std::string results_path, run_id;
  double samples_per_s = 0;

  void started(const TrainArgs&, const TrainInputs&, const Trainer&, const ParallelRun& par) override {
    calls.push_back("started");
    global_batch = par.global_batch();
  }
  void iteration(int64_t done, int64_t) override { iterations = done; }
  void trained() override { calls.push_back("trained"); }
  void finished(const TrainArgs&, const TrainInputs&, const Trainer&, const ParallelRun&,
                const TrainOutcome& o) override {
    calls.push_back("finished");
    results_path = o.results_path;
    run_id = o.results.run_id;
    samples_per_s = o.job.samples_per_s;
  }
};

TEST(TrainRun, DefaultArgumentsHoldEverySettingsDefault) {
  const TrainArgs a = default_train_args();
  for (const TrainSetting& s : train_settings()) EXPECT_EQ(setting_value(a, s), s.default_value) << s.name;
  // Each setting has a field of its own: writing one changes what the table reads back for it alone.
  TrainArgs b = default_train_args();
  set_field(train_setting_field(b, "momentum"), 0.5);
  for (const TrainSetting& s : train_settings())
    EXPECT_EQ(setting_value(b, s), s.name == "momentum" ? nlohmann::json(0.5) : s.default_value) << s.name;
  EXPECT_THROW(train_setting_field(b, "no_such_setting"), RuntimeError);
}

TEST(TrainRun, ChecksTheArgumentsBeforeAnythingIsLoaded) {
  const TempDir dir;
  const auto refusal = [](TrainArgs a) { return config_error_of([&] { validate_train_args(a); }); };
  EXPECT_EQ(refusal(tiny_run(dir.str(), "r")), "");
  TrainArgs a = tiny_run(dir.str(), "r");
  a.iterations = 0;
  EXPECT_EQ(refusal(a), "--iterations must be >= 1, got 0");
  a = tiny_run(dir.str(), "r");
  a.options.resume = "auto";
  EXPECT_EQ(refusal(a), "--resume auto needs --checkpoint-dir");
  a = tiny_run(dir.str(), "r");
  a.data = "fashion-mnist";
  a.classes = 3;
  EXPECT_NE(refusal(a).find("--input-shape/--classes apply to synthetic data only"), std::string::npos) << refusal(a);
  a = tiny_run(dir.str(), "r");
  a.measure.tags = {"no-equals-sign"};
  EXPECT_EQ(refusal(a), "--tag 'no-equals-sign': expected KEY=VALUE");
  std::ofstream(dir.file("a-file")) << "x";
  a = tiny_run(dir.file("a-file"), "r");
  EXPECT_EQ(refusal(a), "--results " + dir.file("a-file") + ": is not a directory");
  // Completes the options from the flags: one epoch where neither --epochs nor --iterations is given.
  a = tiny_run(dir.str(), "r");
  a.iterations = -1;
  validate_train_args(a);
  EXPECT_EQ(a.options.epochs, 1);
  EXPECT_EQ(a.options.iterations, 0);
}

TEST(TrainRun, ClaimOfARunFolderRefusesASecondRunOfTheSameId) {
  const TempDir dir;
  MeasureArgs m;
  m.results_root = dir.str();
  m.experiment = "exp";
  m.run_id = "r1";
  {
    const std::shared_ptr<void> first = claim_run_folder(m);
    ASSERT_NE(first, nullptr);
    try {
      claim_run_folder(m);
      FAIL() << "a second claim of r1 was granted";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("--run-id r1: " + (fs::path(dir.str()) / "exp" / "r1").string() +
                                           " is being written by"),
                std::string::npos)
          << e.what();
    }
    m.run_id = "r2";
    EXPECT_NE(claim_run_folder(m), nullptr) << "another id is another folder";
    m.run_id = "r1";
  }
  EXPECT_NE(claim_run_folder(m), nullptr) << "free again once the first claim is let go";
  m.no_results = true;
  EXPECT_EQ(claim_run_folder(m), nullptr) << "--no-results: nothing to claim";
  m.no_results = false;
  m.run_id.clear();
  EXPECT_EQ(claim_run_folder(m), nullptr) << "a generated id is the process's own";
}

TEST(TrainRun, RunsATinyCpuRunAndWritesItsResults) {
  if (launched()) GTEST_SKIP() << "launched by MPI";
  const TempDir dir;
  TrainArgs a = tiny_run(dir.str(), "tiny");
  RecordingView view;
  EXPECT_FALSE(run_training(a, view)) << "not interrupted";
  EXPECT_EQ(view.calls, (std::vector<std::string>{"started", "trained", "finished"}));
  EXPECT_EQ(view.iterations, 4);
  EXPECT_EQ(view.global_batch, 8);
  const fs::path run = fs::path(dir.str()) / "exp" / "tiny";
  EXPECT_EQ(view.results_path, run.string());
  EXPECT_EQ(view.run_id, "tiny");
  EXPECT_GT(view.samples_per_s, 0);
  for (const char* f : {"run.h5", "summary.json", "summary.csv", "progress.json"})
    EXPECT_TRUE(fs::is_regular_file(run / f)) << f;

  const RunResults res = read_run_results(run.string());
  EXPECT_EQ(res.experiment, "exp");
  EXPECT_EQ(res.run_id, "tiny");
  EXPECT_EQ(res.status, std::string(kRunComplete));
  EXPECT_EQ(res.summary.net.value(), "lenet");
  EXPECT_DOUBLE_EQ(res.summary.global_batch.value_or(NAN), 8);
  EXPECT_DOUBLE_EQ(res.summary.iterations.value_or(NAN), 4);
  EXPECT_EQ(res.timeline.iterations(), 4);
  EXPECT_EQ(res.curve.start_iteration, 0);
  EXPECT_EQ(res.curve.iteration, (std::vector<int64_t>{2, 4})) << "the curve at every display step (--display 2)";

  // The same run id again: a finished run is never overwritten.
  TrainArgs again = tiny_run(dir.str(), "tiny");
  RecordingView second;
  EXPECT_NE(config_error_of([&] { run_training(again, second); }).find("already exists"), std::string::npos);
  EXPECT_TRUE(second.calls.empty());
}

}  // namespace
}  // namespace train_run_test
}  // namespace cnnscale
