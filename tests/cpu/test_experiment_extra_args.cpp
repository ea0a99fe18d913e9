// extra_args that repeat a flag the sweep writes on a run's command line are refused when the file
// is read, at the offending entry's file:line:col and naming the key that sets the flag, rather
// than by train when each run starts (every run of the sweep would fail in turn). The table of such
// flags is checked against the command lines the sweep really writes, so it cannot fall behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment_reader.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::gpu_host;
using testing::parse;

using testing::kBase;

// A flag given twice would have train (or infer) refuse every run as it starts: refused at the second.
TEST(ExperimentExtraArgs, AFlagGivenTwiceIsRefusedAtItsSecondEntry) {
  expect_error(kBase + "extra_args: [--display, '5', --display, '6']\n",
               {"t.yaml:8:30: extra_args[2]: '--display' is given twice (also extra_args[0])"});
  expect_error(kBase + "extra_args: [--display=5, --mfu, --display, '6']\n",
               {"extra_args[2]: '--display' is given twice (also extra_args[0])"});
  expect_error(kBase + "extra_args: [--mfu, --mfu]\n", {"extra_args[1]: '--mfu' is given twice"});
  // --tag is repeatable; values that look like flags are values.
  EXPECT_EQ(parse(kBase + "extra_args: [--tag, a=1, --tag=b=2, --display, '5']\n").extra_args.size(), 5u);
}

TEST(ExperimentExtraArgs, MatrixFlagsAreRefusedAtTheirEntry) {
  expect_error(kBase + "extra_args: [--display, '5', --batch, '64']\n",  // line 8
               {"t.yaml:8:30: extra_args[2]: '--batch' is set by matrix.batch"});
  expect_error(kBase + "extra_args: [--data=fashion-mnist]\n",
               {"t.yaml:8:14: extra_args[0]: '--data' is set by dataset.name"});
  expect_error(kBase + "extra_args:\n  - --net\n  - alexnet\n",
               {"t.yaml:9:5: extra_args[0]: '--net' is set by matrix.network"});
  expect_error(kBase + "extra_args: [--lr, '0.5']\n", {"t.yaml:8:14: extra_args[0]: '--lr' is set by solver.lr"});
  expect_error(kBase + "extra_args: [--epochs=2]\n", {"'--epochs' is set by epochs"});
  expect_error(kBase + "extra_args: [--measure, phases]\n", {"'--measure' is set by measure"});
  expect_error(kBase + "extra_args: [--no-overlap]\n", {"'--no-overlap' is set by matrix.allreduce's overlap"});
  expect_error(kBase + "extra_args: [--bucket-mb, '2']\ntrain: {bucket_mb: 4}\n",
               {"'--bucket-mb' is set by train.bucket_mb (or matrix.bucket_mb)"});
  // The existing refusals keep their words.
  expect_error(kBase + "extra_args: [--precision=bf16]\n",
               {"t.yaml:8:14: extra_args[0]: '--precision' is set by matrix.precision"});
  expect_error(kBase + "extra_args: [--results, x]\n", {"t.yaml:8:14: extra_args[0]: '--results' is set by the sweep"});
  // An override is located in its command-line text.
  expect_error(kBase, {"command line 'extra_args=[--seed, \"3\"]':1:2: extra_args[0]: '--seed' is set by seed"},
               {"extra_args=[--seed, \"3\"]"});
}

TEST(ExperimentExtraArgs, TagsOfTheSweepAreRefusedOthersKept) {
  expect_error(kBase + "extra_args: [--tag, repeat=9]\n",
               {"t.yaml:8:21: extra_args[1]: tag 'repeat' is written by the sweep itself"});
  expect_error(kBase + "extra_args: [--tag=config_hash=0]\n", {"extra_args[0]: tag 'config_hash' is written"});
  expect_error(kBase + "extra_args: [--tag]\n", {"extra_args[0]: '--tag' needs KEY=VALUE"});
  const Experiment e = parse(kBase + "extra_args: [--tag, site=a, --display, '2', --tag=queue=b]\n");
  EXPECT_EQ(e.extra_args, (std::vector<std::string>{"--tag", "site=a", "--display", "2", "--tag=queue=b"}));
  const auto args = train_arguments(e, expand_runs(e).front(), "/r");
  EXPECT_EQ(testing::flag_value(args, "--display"), "2");
}

// A setting that is no part of a run's identity (how it is measured or run: --timing-warmup,
// --bucket-mb) may still come through extra_args, as files from before it was a key pass it, unless
// the file gives its key or axis: then the flag would be given twice.
TEST(ExperimentExtraArgs, SettingsOutsideTheRunsIdentityPassWhereTheFileGivesNoKey) {
  const Experiment e = parse(kBase + "extra_args: [--timing-warmup, '5', --watchdog-timeout, '60']\n");
  EXPECT_EQ(e.extra_args, (std::vector<std::string>{"--timing-warmup", "5", "--watchdog-timeout", "60"}));
  expect_error(kBase + "extra_args: [--timing-warmup, '5']\ntrain: {timing_warmup: 2}\n",
               {"t.yaml:8:14: extra_args[0]: '--timing-warmup' is set by train.timing_warmup (or "
                "matrix.timing_warmup)"});
  expect_error(kBase + "  timing_warmup: [1, 2]\nextra_args: [--timing-warmup, '5']\n",
               {"extra_args[0]: '--timing-warmup' is set by train.timing_warmup"});
  // As a key: on every run's command line, and an axis of runs of their own.
  const Experiment k = parse(kBase + "train: {timing_warmup: 2}\n");
  for (const RunSpec& r : expand_runs(k)) EXPECT_EQ(testing::flag_value(train_arguments(k, r, "/r"), "--timing-warmup"), "2");
}

// Every flag in the command lines of a sweep that uses every setting the sweep passes on is in the
// table (or is the sweep's own bookkeeping): a flag added to train_arguments without an entry here
// fails this test.
TEST(ExperimentExtraArgs, TheTableCoversEveryFlagTheSweepWrites) {
  const std::string solver =
      "solver: {lr: 0.1, momentum: 0.9, weight_decay: 0.0001, lr_policy: multistep, gamma: 0.1, step: 1, "
      "milestones: [1, 2], power: 1, warmup: 1, warmup_start_factor: 0.5, lr_scaling: linear, lr_base_batch: 8}\n";
  const std::string gpu_file =
      "name: t\ndevice: gpu\nmeasure: phases\nepochs: 2\nwhole_epochs: 3\nwhole_samples: 100\n" + solver +
      "train: {cuda_graph: false, graph_copies: 2, phase_marks: false, fuse: false, conv_search: legacy, layout: "
      "nhwc, batchnorm: cudnn, deterministic: true, host_decode: true, bucket_mb: 2, watchdog_timeout: 60, "
      "probe_seconds: 0.2, rebalance_every: 5, timing_warmup: 1, display: 5, data_threads: 2, test_batch: 4, "
      "pool_batches: 2, power_hz: 5, min_window: 1, phase_window: 0.5, phase_repeats: 2, mfu: true, mfu_window: 0.1, "
      "auto_start: even, crop_pad: 2, mirror: true}\n" +
      "dataset: {name: synthetic, synthetic_fill: constant, classes: 5, input_shape: [1, 28, 28], "
      "train_samples: 64}\n"
      "networks:\n  resnet_fmnist:\n    iterations: 3\n    dataset: {name: fashion-mnist, data_dir: /d, test_samples: "
      "10}\n"
      "matrix:\n  network: [lenet, resnet_fmnist]\n  batch: [8]\n  precision: [bf16]\n  repeats: 1\n"
      "  gpus: [1, 2]\n  gpu_mix: [[{gpu: 0, sms: 66}, {gpu: 1, sms: 66}]]\n  split: [even, auto]\n"
      "  allreduce: [{overlap: false, algo: ring, dtype: bf16, max_ctas: 8, cta_policy: zero, priority: low, "
      "update: after_exchange, gather: true}]\n";
  const std::string cpu_file =
      "name: c\ndataset: synthetic\niterations: 2\nsolver: {warmup_iterations: 2}\n"
      "matrix:\n  network: [lenet]\n  batch: [8]\n  repeats: 1\n  cpu_mix: [[1, 2]]\n  split: [proportional]\n";
  const std::set<std::string> own = {"--results", "--experiment", "--run-id", "--tag"};
  std::set<std::string> written;
  for (const auto& [text, host] : {std::pair{gpu_file, gpu_host(4)}, std::pair{cpu_file, testing::cpu_host()}}) {
    const Experiment e = parse(text, {}, host);
    for (const RunSpec& run : expand_runs(e))
      for (const std::string& a : train_arguments(e, run, "/r"))
        if (a.rfind("--", 0) == 0) written.insert(a);
  }
  for (const std::string& flag : written)
    EXPECT_TRUE(sweep_train_flags().count(flag) || own.count(flag))
        << flag << " is written by the sweep but not in the table";
  // The file above reaches every kind of flag (a table entry never written would be a test gap).
  // (--shares belongs to split manual, which no experiment has: matrix.split cannot name it.)
  for (const auto& [flag, key] : sweep_train_flags()) {
    if (flag != "--allreduce-overlap" && flag != "--iterations" && flag != "--epochs" && flag != "--shares") {
      EXPECT_TRUE(written.count(flag)) << flag << " (" << key << ") is never written by the test's sweeps";
    }
  }
  EXPECT_TRUE(written.count("--iterations") && written.count("--epochs"));
}

// A flag the run's command does not know (a typo), --help or --version would end every run as it
// starts: `cnnscale sweep` refuses them when the file is read, at the entry, checking against the
// options of train's (or infer's) own CLI definition, handed down at start-up. Nothing is run or
// written (--dry-run or not).
TEST(ExperimentExtraArgs, FlagsTheCommandDoesNotKnowAreRefusedByTheSweep) {
  testing::TempDir dir;
  const std::string file = dir.file("x.yaml");
  const std::string results = dir.file("results");
  auto refused = [&](const std::string& extra, const std::string& expected) {
    std::ofstream(file) << kBase << "extra_args: " << extra << "\n";  // line 8
    testing::expect_usage_error({"sweep", file, "--results", results, "--dry-run"}, {file + ":8:" + expected});
    EXPECT_FALSE(fs::exists(fs::path(results) / "t")) << extra;
  };
  refused("[--display, '2', --ba, '5']",
          "30: extra_args[2]: '--ba' is no option of cnnscale train (see cnnscale "
          "train --help)");
  refused("[--displya=2]", "14: extra_args[0]: '--displya' is no option of cnnscale train");
  refused("[--help]", "14: extra_args[0]: '--help' would print train's help instead of running");
  refused("[-h]", "14: extra_args[0]: '-h' would print train's help");
  refused("[--version]", "14: extra_args[0]: '--version' would print the version instead of running train");
  // train's own options pass, a negative value is no flag, and so does any option train gains.
  std::ofstream(file) << kBase << "extra_args: [--timing-warmup, '5', --tag, site=a, --mfu, --crop-pad=0]\n";
  const testing::CliResult ok = testing::run_cnnscale({"sweep", file, "--results", results, "--dry-run"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// The same check where the list is handed down by hand (no app/ in this test binary).
TEST(ExperimentExtraArgs, TheHandedDownListDecides) {
  set_command_flags("train", {"--display", "--tag"});
  expect_error(kBase + "extra_args: [--display, '2', --crop-pad, '1']\n",
               {"t.yaml:8:30: extra_args[2]: '--crop-pad' is no option of cnnscale train"});
  EXPECT_EQ(parse(kBase + "extra_args: [--display, '-2']\n").extra_args.size(), 2u);  // '-2' is a value
  set_command_flags("train", {});                                                     // unchecked again
  EXPECT_EQ(parse(kBase + "extra_args: [--crop-pad, '1']\n").extra_args.size(), 2u);
}

}  // namespace
}  // namespace cnnscale
