// The batch and the rank sets are entries of train's table (experiment/train_settings_ranks.cpp), each
// a matrix axis the experiment expands itself (matrix.batch, matrix.gpu_mix with its sms,
// matrix.cpu_mix): each is found in train's --help, the experiment schema (its values checked in the
// entry's range), the sweep's command lines, the configuration train records and the report.
#include <gtest/gtest.h>

#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/report_data.hpp"
#include "experiment/sweep.hpp"
#include "experiment/train_settings.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

const std::vector<std::string> kRankEntries = {"batch", "gpu_mix", "sms", "cpu_mix"};

TEST(SettingsRanks, TheBatchAndTheRankSetsAreTrainsEntriesAndTheirAxes) {
  const CliResult help = run_cnnscale({"train", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const std::map<std::string, std::string> places = {{"batch", "matrix.batch"},
                                                     {"gpu_mix", "matrix.gpu_mix"},
                                                     {"sms", "matrix.gpu_mix's sms"},
                                                     {"cpu_mix", "matrix.cpu_mix"}};
  for (const std::string& name : kRankEntries) {
    const TrainSetting* s = find_train_setting(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->part_of, name == "sms" ? "gpu_mix" : name) << name;
    EXPECT_NE(help.out.find(s->flag), std::string::npos) << s->flag;
    EXPECT_NE(help.out.find(s->help.substr(0, 30)), std::string::npos) << s->flag;
    EXPECT_EQ(s->experiment_place(), places.at(name));
    EXPECT_EQ(sweep_train_flags().at(s->flag), places.at(name)) << s->flag;
    // The sweep writes it: extra_args may not repeat it.
    expect_error(kBaseExperiment + "extra_args: ['" + s->flag + "=1']",
                 {fmt::format("'{}' is set by {}", s->flag, places.at(name))});
    // No key or axis of its own beside the axis it is.
    if (name == "sms") expect_error(kBaseExperiment, {"sms", "unknown key"}, {"matrix.sms=[[66]]"});
  }
  EXPECT_NE(help.out.find("--batch INT=64"), std::string::npos);
}

// Each axis's values reach the runs' command lines by the entry's flag, and are checked in its range.
TEST(SettingsRanks, AxisValuesReachTheCommandLinesByTheEntrysFlag) {
  const std::string head = kBaseExperiment.substr(0, kBaseExperiment.find("  batch:")) + "  repeats: 1\n";
  const TrainSetting& batch = *find_train_setting("batch");
  const TrainSetting& gpus = *find_train_setting("gpu_mix");
  const TrainSetting& sms = *find_train_setting("sms");
  const TrainSetting& slowdown = *find_train_setting("cpu_mix");
  {
    const Experiment e = parse(head + "  batch: [12]\n  cpu_mix: [[1, 2.5]]\n");
    const RunSpec r = expand_runs(e).at(0);
    const std::vector<std::string> args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, batch.flag), batch.text(12));
    EXPECT_EQ(flag_value(args, slowdown.flag), slowdown.text(nlohmann::json::array({1.0, 2.5})));
    EXPECT_EQ(flag_value(args, gpus.flag), "<absent>");
  }
  {
    const Experiment e =
        parse(head + "  batch_per_gpu: [5]\n  gpu_mix: [[{gpu: 1, sms: 66}, {gpu: 0, sms: 132}]]\ndevice: gpu\n", {},
              gpu_host(2));
    const RunSpec r = expand_runs(e).at(0);
    const std::vector<std::string> args = train_arguments(e, r, "/r");
    EXPECT_EQ(flag_value(args, batch.flag), batch.text(10));  // the global batch of 5 per GPU on 2
    EXPECT_EQ(flag_value(args, gpus.flag), gpus.text(nlohmann::json::array({1, 0})));
    EXPECT_EQ(flag_value(args, sms.flag), sms.text(nlohmann::json::array({66, 132})));
  }
  // The ranges are the entries'.
  expect_error(head + "  batch: [0]\n", {"matrix.batch[0]", fmt::format("{}", batch.min)});
  expect_error(head + "  batch: [8]\n  batch_per_gpu: [" + std::to_string(int64_t(batch.max) + 1) + "]\n",
               {"matrix.batch_per_gpu[0]"});
  expect_error(head + "  batch: [8]\n  cpu_mix: [[1, 0.5]]\n", {"matrix.cpu_mix[0][1]"});
  expect_error(head + "  batch: [8]\n  gpu_mix: [[{gpu: 0, sms: 2000}]]\ndevice: gpu\n", {"matrix.gpu_mix[0][0].sms"},
               {}, gpu_host(2));
}

// A run given the entries' flags records them by the table's rule, and the report reads them back.
TEST(SettingsRanks, TheRecordedConfigurationAndTheReportHaveThem) {
  TempDir dir;
  const CliResult r = run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "1", "--batch",
                                    "6", "--slowdown", "2.5", "--results", dir.str(), "--experiment", "e",
                                    "--run-id", "k", "--min-window", "0", "--timing-warmup", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str());
  ASSERT_EQ(runs.size(), 1u);
  const report::RunRecord& record = runs[0];
  EXPECT_EQ(recorded_setting(*find_train_setting("batch"), record.run_config), 6);
  EXPECT_EQ(recorded_setting(*find_train_setting("cpu_mix"), record.run_config), nlohmann::json::array({2.5}));
  // Whole GPUs (none here) are recorded as the default: no partition.
  EXPECT_EQ(recorded_setting(*find_train_setting("sms"), record.run_config), nlohmann::json::array());
  EXPECT_FALSE(find_train_setting("gpu_mix")->identity());  // the sweep's tag names it
  EXPECT_EQ(record.text(find_train_setting("batch")->report_label), "6");
  EXPECT_EQ(record.text(find_train_setting("cpu_mix")->report_label), "slowdown 2.5");
  // The batch is recorded as the job's global batch: --batch-per-rank's ranks x --batch.
  EXPECT_EQ(find_train_setting("batch")->resolved(4, {.world_size = 2, .global_batch = 8}), 8);
}

}  // namespace
}  // namespace cnnscale::testing
