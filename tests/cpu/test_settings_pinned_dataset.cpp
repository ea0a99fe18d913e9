// Identities that must not move as the data set's settings (the experiment's dataset: keys, train's
// --data, --data-dir, --train-samples, --test-samples, --synthetic-fill, --classes, --input-shape)
// come from train's table: a sweep's run ids and the data words of its runs' command lines, and the
// configuration train records for file data (synthetic data's is pinned in test_settings_pinned*.cpp),
// each pinned as the code before the table computed them.
#include <gtest/gtest.h>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

// The words of a run's command line from --data up to --batch: the data set's.
std::string data_words(const Experiment& e, const RunSpec& run) {
  const std::vector<std::string> args = train_arguments(e, run, "/r");
  const auto from = std::find(args.begin(), args.end(), "--data");
  const auto to = std::find(args.begin(), args.end(), "--batch");
  std::string words;
  for (auto it = from; it < to; ++it) words += (words.empty() ? "" : " ") + *it;
  return words;
}

struct Pinned {
  std::string dataset;  // the experiment's dataset: line (or lines)
  std::string extra;    // further lines (length, networks:)
  std::vector<std::pair<std::string, std::string>> runs;  // run id, data words
};

TEST(SettingsPinned, DatasetKeysKeepTheirRunIdsAndCommandLines) {
  const std::string fmnist = "/usr/share/datasets/fashion-mnist";
  const std::vector<Pinned> cases = {
      {"dataset: synthetic\n", "iterations: 4\n", {{"lenet-b8-g1-fp32-single-r1-ce6f58f1", "--data synthetic"}}},
      {"dataset: {name: synthetic, synthetic_fill: gaussian}\n", "iterations: 4\n",
       {{"lenet-b8-g1-fp32-single-r1-9beeff85", "--data synthetic --synthetic-fill gaussian"}}},
      {"dataset: {name: synthetic, synthetic_fill: constant, train_samples: 256, test_samples: 0, classes: 5,\n"
       "          input_shape: [1, 28, 28]}\n",
       "iterations: 4\n",
       {{"lenet-b8-g1-fp32-single-r1-f3a3bfc4",
         "--data synthetic --train-samples 256 --test-samples 0 --synthetic-fill constant --classes 5 --input-shape "
         "1,28,28"}}},
      {"dataset: {name: synthetic, input_shape: [3, 28, 28], classes: 7}\n", "iterations: 4\n",
       {{"lenet-b8-g1-fp32-single-r1-0d0d546f", "--data synthetic --classes 7 --input-shape 3,28,28"}}},
      {"dataset: {name: fashion-mnist, data_dir: " + fmnist + ", train_samples: 1000, test_samples: 200}\n",
       "iterations: 4\n",
       {{"lenet-b8-g1-fp32-single-r1-e1bc42e8",
         "--data fashion-mnist --data-dir " + fmnist + " --train-samples 1000 --test-samples 200"}}},
      {"dataset: {name: fashion-mnist, test_samples: 2000}\n", "iterations: 4\n",
       {{"lenet-b8-g1-fp32-single-r1-33049caa", "--data fashion-mnist --test-samples 2000"}}},
      // Epochs of a synthetic set of 64 samples: its size sets the iterations.
      {"dataset: {name: synthetic, train_samples: 64}\n", "epochs: 2\n",
       {{"lenet-b8-g1-fp32-single-r1-719dce1d", "--data synthetic --train-samples 64"}}},
      // A network's own data replaces the experiment's.
      {"dataset: {name: fashion-mnist, data_dir: " + fmnist + "}\n",
       "iterations: 4\nnetworks:\n  ../tests/data/dist_convnet.yaml:\n    dataset: {name: synthetic, synthetic_fill: "
       "constant, train_samples: 32}\n",
       {{"lenet-b8-g1-fp32-single-r1-ae285c3b", "--data fashion-mnist --data-dir " + fmnist},
        {"dist_convnet-b8-g1-fp32-single-r1-a0512b66", "--data synthetic --train-samples 32 --synthetic-fill constant"}}},
  };
  for (const Pinned& c : cases) {
    const bool two = c.extra.find("networks:") != std::string::npos;
    const std::string text = "name: t\n" + c.dataset + c.extra + "matrix:\n  network: [lenet" +
                             (two ? ", ../tests/data/dist_convnet.yaml" : "") +
                             "]\n  batch: [8]\n  gpus: [1]\n  repeats: 1\n";
    const Experiment e = parse_experiment_text(text, "experiments/t.yaml", {}, cpu_host());
    const std::vector<RunSpec> runs = expand_runs(e);
    ASSERT_EQ(runs.size(), c.runs.size()) << text;
    for (size_t i = 0; i < runs.size(); ++i) {
      EXPECT_EQ(runs[i].id, c.runs[i].first) << text;
      EXPECT_EQ(data_words(e, runs[i]), c.runs[i].second) << text;
    }
  }
}

// A 1-iteration LeNet run on Fashion-MNIST with `args`, its recorded configuration line ("run: {...}").
std::string recorded_line(const TempDir& dir, const std::string& id, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"train",     "--net",        "lenet", "--data",        "fashion-mnist",
                                  "--iterations", "1",         "--batch", "4",           "--results",
                                  dir.str(),   "--experiment", "e",     "--run-id",      id,
                                  "--min-window", "0",         "--timing-warmup", "0"};
  all.insert(all.end(), args.begin(), args.end());
  const CliResult r = run_cnnscale(all);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_run_results(dir.str() + "/e/" + id).config_text;
  const size_t at = text.find("\nrun: ");
  return at == std::string::npos ? text : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(SettingsPinned, FileDataRecordsAsBeforeTheTable) {
  TempDir dir;
  EXPECT_EQ(recorded_line(dir, "f1",
                          {"--data-dir", "/usr/share/datasets/fashion-mnist", "--train-samples", "100",
                           "--test-samples", "8"}),
            R"j(run: {"batch":4,"data":"fashion-mnist","device":"cpu","net":"lenet","net_file":"networks/lenet.yaml",)j"
            R"j("run_id":"f1","seed":1,"solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed",)j"
            R"j("train_samples":100})j");
  EXPECT_EQ(recorded_line(dir, "f2", {"--test-samples", "0"}),
            R"j(run: {"batch":4,"data":"fashion-mnist","device":"cpu","net":"lenet","net_file":"networks/lenet.yaml",)j"
            R"j("run_id":"f2","seed":1,"solver":"lr 0.01 momentum 0.9 weight decay 0.0005 policy fixed",)j"
            R"j("train_samples":60000})j");
}

}  // namespace
}  // namespace cnnscale::testing
