// Identities and words that must not move as train's last hand-written options (the augmentation,
// --batch-per-rank, --one-rank-exchange, the checkpoint and resume options) come from train's table:
// the configuration a one-rank train records (its run id's hash), the error line of a bad value, and
// a sweep's run ids and command lines where an experiment passes them in extra_args, each pinned as
// the code before the table made them.
#include <gtest/gtest.h>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

std::vector<std::string> options_train_line(const TempDir& dir, const std::string& id,
                                            const std::vector<std::string>& args) {
  std::vector<std::string> all = {"train", "--net",    "lenet", "--data",       "synthetic", "--iterations",
                                  "1",     "--batch",  "4",     "--results",    dir.str(),   "--experiment",
                                  "e",     "--run-id", id,      "--min-window", "0",         "--timing-warmup",
                                  "0"};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

// A 1-iteration LeNet run with `args`, its recorded configuration line ("run: {...}").
std::string options_recorded_line(const TempDir& dir, const std::string& id, const std::vector<std::string>& args) {
  const CliResult r = run_cnnscale(options_train_line(dir, id, args));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_run_results(dir.str() + "/e/" + id).config_text;
  const size_t at = text.find("\nrun: ");
  return at == std::string::npos ? text : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

const std::string kOptionsHead =
    R"j(run: {"batch":4,"classes":10,"data":"synthetic","device":"cpu","input_shape":[1,28,28],"net":"lenet",)j"
    R"j("net_file":"networks/lenet.yaml",)j";
const std::string kOptionsTail =
    R"j("seed":1,"solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed","synthetic_fill":"gaussian",)j"
    R"j("train_samples":1024})j";

TEST(SettingsPinned, AugmentationCheckpointsAndBatchPerRankRecordAsBeforeTheTable) {
  TempDir dir;
  EXPECT_EQ(options_recorded_line(dir, "a1", {"--crop-pad", "3"}),
            R"j(run: {"augment":"random crop, pad 3","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","run_id":"a1",)j" +
                kOptionsTail);
  EXPECT_EQ(options_recorded_line(dir, "a2", {"--mirror"}),
            R"j(run: {"augment":"mirror","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","run_id":"a2",)j" +
                kOptionsTail);
  EXPECT_EQ(options_recorded_line(dir, "a3", {"--crop-pad", "0"}), kOptionsHead + R"j("run_id":"a3",)j" + kOptionsTail);
  // --mirror takes true and false after '=', as a flag does.
  EXPECT_EQ(options_recorded_line(dir, "a4", {"--mirror=true"}),
            R"j(run: {"augment":"mirror","batch":4,"classes":10,"data":"synthetic","device":"cpu",)j"
            R"j("input_shape":[1,28,28],"net":"lenet","net_file":"networks/lenet.yaml","run_id":"a4",)j" +
                kOptionsTail);
  EXPECT_EQ(options_recorded_line(dir, "a5", {"--mirror=false"}), kOptionsHead + R"j("run_id":"a5",)j" + kOptionsTail);
  // How often a run checkpoints, where, and that it resumes, are no part of its configuration.
  EXPECT_EQ(options_recorded_line(dir, "c1", {"--checkpoint-dir", dir.file("ck"), "--checkpoint-every", "1"}),
            kOptionsHead + R"j("run_id":"c1",)j" + kOptionsTail);
  // One rank's batch per rank is the global batch: recorded as that batch alone.
  EXPECT_EQ(options_recorded_line(dir, "b1", {"--batch-per-rank"}),
            kOptionsHead + R"j("run_id":"b1",)j" + kOptionsTail);
}

// A bad value's error line, as the options written by hand gave it.
TEST(SettingsPinned, BadAugmentationAndCheckpointValuesAreRefusedAsBeforeTheTable) {
  TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--crop-pad", "-1"}, "cnnscale: error: --crop-pad: must be at least 0, got -1 (see --help)"},
      {{"--crop-pad", "x"}, "cnnscale: error: --crop-pad: must be a whole number of at least 0, got 'x' (see --help)"},
      {{"--checkpoint-every", "-2"}, "cnnscale: error: --checkpoint-every: must be at least 0, got -2 (see --help)"},
      {{"--checkpoint-every", "1.5"},
       "cnnscale: error: --checkpoint-every: must be a whole number of at least 0, got '1.5' (see --help)"},
      {{"--resume-allow-changes"}, "cnnscale: error: --resume-allow-changes requires --resume (see --help)"},
      {{"--resume", "auto"}, "cnnscale: error: --resume auto needs --checkpoint-dir"},
      {{"--one-rank-exchange"},
       "cnnscale: error: --one-rank-exchange keeps a one-rank MPI job on the data-parallel path: launch it with "
       "mpirun -np 1"},
  };
  for (const auto& [args, line] : cases) {
    const CliResult r = run_cnnscale(options_train_line(dir, "x", args));
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  }
}

// An experiment that passes the augmentation and the checkpoint interval in extra_args: its run ids and
// the words after --measure, as the sweep wrote them before these options came from train's table.
TEST(SettingsPinned, AugmentationInExtraArgsKeepsItsIdsAndCommandLines) {
  const Experiment e = parse(kBaseExperiment +
                             "  repeats: 1\nextra_args: [--crop-pad, 2, --mirror, --checkpoint-every, "
                             "5]\n");
  std::vector<std::string> got;
  for (const RunSpec& r : expand_runs(e)) {
    const std::vector<std::string> args = train_arguments(e, r, "/r");
    std::string line = r.id + ":";
    for (auto it = std::find(args.begin(), args.end(), "--measure"); it < args.end(); ++it) line += " " + *it;
    got.push_back(line);
  }
  const std::string tags = " --tag repeat=1 --tag config_hash=";
  const std::string tail = " --tag sweep_hash=b1bd9b011edd33c0 --tag network=lenet --tag allreduce=";
  const std::string extra = " --tag seed_base=1 --tag seeds=vary --crop-pad 2 --mirror --checkpoint-every 5";
  auto line = [&](const std::string& id, const std::string& hash, const std::string& mode, const std::string& split) {
    return id + ": --measure steady --results /r --experiment t --run-id " + id + tags + hash + tail + mode +
           " --tag split=" + split + extra;
  };
  EXPECT_EQ(got, (std::vector<std::string>{
                     line("lenet-b8-g1-fp32-single-r1-87eef1e5", "87eef1e5b75d5497", "single", "single"),
                     line("lenet-b8-g2-fp32-ov-r1-1e3be53e", "1e3be53edd7269e5", "ov", "even"),
                     line("lenet-b16-g1-fp32-single-r1-297dc6a9", "297dc6a9b80a133a", "single", "single"),
                     line("lenet-b16-g2-fp32-ov-r1-d2e3cbfb", "d2e3cbfbb519bd9a", "ov", "even")}));
}

}  // namespace
}  // namespace cnnscale::testing
