// Every setting of train's table (experiment/train_settings.hpp) is found where the table says it
// goes: train's --help, the experiment schema (fixed key and matrix axis, on the sweep's command
// lines), the configuration train records, and the report's grouping; and a sweep over
// matrix.seed/lr/momentum/weight_decay shows each value in the report.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
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

// A data set's key takes values a data set must accept (a name, a folder, three extents, a size the
// batch fits): those, where other_value's would not be.
nlohmann::json test_value(const TrainSetting& s) {
  if (s.name == "name") return "fashion-mnist";
  if (s.name == "data_dir") return "/usr/share/datasets/fashion-mnist";
  if (s.name == "train_samples") return 64;
  if (s.name == "classes") return 5;
  if (s.name == "input_shape") return nlohmann::json::array({1, 28, 28});
  return other_value(s, s.default_value);
}

// The small experiment with its data set a mapping where `s` is one of its keys: Fashion-MNIST for
// the folder, else synthetic data. Another setting's: on GPUs (gpu_host), with runs of split auto,
// measuring phases and the matmul peak, so that every setting applies to some of its runs.
std::string base_for(const TrainSetting& s) {
  if (s.section != "dataset")
    return std::string("device: gpu\nmeasure: phases\n") + (s.name == "mfu" ? "" : "train: {mfu: true}\n") +
           kBaseExperiment + "  split: [even, auto]\n";
  std::string text = kBaseExperiment;
  const std::string line = "dataset: synthetic\n";
  return text.replace(text.find(line), line.size(),
                      s.name == "data_dir" ? "dataset: {name: fashion-mnist}\n" : "dataset: {name: synthetic}\n");
}

// The value a run's command line gives `s`: the word after its flag; a Switch's flag alone gives the
// value that is not its default, a Boolean's false flag (--no-overlap) false.
std::string command_line_value(const std::vector<std::string>& args, const TrainSetting& s) {
  if (!s.false_flag.empty() && std::find(args.begin(), args.end(), s.false_flag) != args.end()) return "false";
  if (s.type != SettingType::Switch) return flag_value(args, s.flag);
  const bool given = std::find(args.begin(), args.end(), s.flag) != args.end();
  return s.text(given ? !s.default_value.get<bool>() : s.default_value.get<bool>());
}

TEST(SettingsTable, EveryEntryIsInTrainsHelpAndTheSweepsFlagsWithItsExperimentKey) {
  const CliResult help = run_cnnscale({"train", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const TrainSetting& s : train_settings()) {
    EXPECT_NE(help.out.find(s.flag), std::string::npos) << s.flag;
    EXPECT_NE(help.out.find(s.help.substr(0, 20)), std::string::npos) << s.help;
    if (!s.in_experiments()) {  // an option of train alone: no key the sweep sets (test_settings_train_options.cpp)
      EXPECT_EQ(sweep_train_flags().count(s.flag), 0u) << s.flag;
      continue;
    }
    EXPECT_NE(sweep_train_flags().at(s.flag).find(s.experiment_key()), std::string::npos) << s.flag;
    if (s.false_flag.empty()) continue;
    EXPECT_NE(help.out.find(s.false_flag), std::string::npos) << s.false_flag;
    EXPECT_EQ(sweep_train_flags().at(s.false_flag), sweep_train_flags().at(s.flag)) << s.false_flag;
  }
}

TEST(SettingsTable, EveryEntryIsAFixedKeyAndAMatrixAxisOnTheRunsCommandLines) {
  for (const TrainSetting& s : train_settings()) {
    if (!s.part_of.empty()) continue;  // a field of a compound axis's modes: PartsOfACompoundAxis below
    if (s.refused_elsewhere()) continue;  // on some runs only: test_settings_split_keys.cpp
    if (!s.in_experiments()) continue;    // no key: test_settings_train_options.cpp
    const nlohmann::json v = test_value(s);
    const std::string base = base_for(s);
    const HostInfo host = gpu_host(2);
    // Fixed: the value on every run's command line.
    const std::string fixed = fmt::format("{}={}", s.experiment_key(), v.dump());
    const Experiment e = parse(base, {fixed, "seeds=fixed"}, host);
    for (const RunSpec& r : expand_runs(e)) EXPECT_EQ(command_line_value(train_arguments(e, r, "/r"), s), s.text(v));
    // A fixed key only: its axis is refused, saying why.
    if (!s.no_axis.empty()) {
      expect_error(base, {fmt::format("matrix.{}", s.name), "no axis", s.no_axis},
                   {fmt::format("matrix.{}=[{}]", s.name, v.dump())}, host);
      continue;
    }
    // An axis of two values: twice the runs it applies to, each with its value on its command line and
    // in its id; the others once, without it (test_settings_apply.cpp).
    // (A list setting's default, no list, is no value to pass: another list stands for it; so does a
    // count above a default below its range, which stands for "not given": test_batch's 0 and
    // train_samples's.)
    const bool list = s.type == SettingType::NumberList || s.type == SettingType::IntegerList;
    const bool unsayable = s.type == SettingType::Integer && s.default_value.get<double>() < s.min;
    const nlohmann::json first = s.name == "input_shape" ? nlohmann::json::array({1, 32, 32})
                                 : list                  ? nlohmann::json::array({3})
                                 : unsayable             ? nlohmann::json(v.get<int64_t>() + 1)
                                                         : s.default_value;
    const std::string axis = fmt::format("matrix.{}=[{}, {}]", s.name, first.dump(), v.dump());
    const Experiment m = parse(base + "  repeats: 1\nseeds: fixed\n", {axis}, host);
    const std::vector<RunSpec> runs = expand_runs(m);
    const std::vector<RunSpec> plain = expand_runs(parse(base + "  repeats: 1\n", {}, host));
    const auto applying = std::count_if(plain.begin(), plain.end(), [&](const RunSpec& r) { return s.applies_to(r.context); });
    EXPECT_GT(applying, 0) << s.name;
    ASSERT_EQ(runs.size(), plain.size() + applying) << s.name;
    std::set<std::string> seen, ids;
    for (const RunSpec& r : runs) {
      ids.insert(r.id);
      if (!s.applies_to(r.context)) {
        EXPECT_EQ(r.id.find("-" + s.name), std::string::npos) << r.id;
        continue;
      }
      seen.insert(command_line_value(train_arguments(m, r, "/r"), s));
      EXPECT_NE(r.id.find("-" + s.name), std::string::npos) << r.id;
    }
    EXPECT_EQ(seen, (std::set<std::string>{s.text(first), s.text(v)})) << s.name;
    EXPECT_EQ(ids.size(), runs.size()) << s.name;
    // Given twice, as a fixed key and an axis: refused at the axis.
    expect_error(base, {fmt::format("matrix.{}", s.name), "given twice"}, {fixed, axis}, host);
  }
}

// The batch and the rank sets: a one-rank run takes one slowdown factor and no SM partition, and the
// report names them as the rank set's mix (test_settings_ranks.cpp). The device and the precision: a
// CPU run takes only its own (test_settings_top.cpp).
const std::set<std::string> kOwnTest = {"batch", "gpu_mix", "sms", "cpu_mix", "device", "precision"};

TEST(SettingsTable, EveryEntryIsRecordedAndGroupedByTheReport) {
  TempDir dir;
  std::map<std::string, int> found;  // setting -> runs whose recorded configuration showed its value
  // One run per learning-rate policy, every other setting off its default (a policy's own settings are
  // recorded only under it); the warm-up in epochs and in iterations take turns. These are one-rank CPU
  // runs on synthetic data: a setting that applies elsewhere only (an NCCL job's, a GPU's) is left out
  // here.
  const RunContext cpu_run{.synthetic = true};
  const TrainSetting& policy = *find_train_setting("lr_policy");
  std::map<std::string, std::map<std::string, nlohmann::json>> given;  // run id -> setting -> value
  for (size_t p = 0; p < policy.choices.size(); ++p) {
    const std::string id = "r" + std::to_string(p);
    std::vector<std::string> args = {"train", "--net", "lenet", "--iterations", "1",
                                     "--batch", "4", "--results", dir.str(), "--experiment", "e", "--run-id",
                                     id, "--min-window", "0", "--timing-warmup", "0"};
    for (const TrainSetting& s : train_settings()) {
      if (s.name == (p % 2 ? "warmup" : "warmup_iterations")) continue;
      if (s.name == "milestones" && policy.choices[p] != "multistep") continue;  // train refuses them elsewhere
      if (!s.applies_to(cpu_run) || !s.identity() || kOwnTest.count(s.name)) continue;
      nlohmann::json& v = given[id][s.name];
      v = s.name == "lr_policy" ? nlohmann::json(policy.choices[p]) : test_value(s);
      if (s.name == "split") v = "proportional";  // manual needs --shares; energy and edp a GPU's joules
      if (s.name == "name") v = "synthetic";
      const std::vector<std::string> words = s.arguments(v);
      args.insert(args.end(), words.begin(), words.end());
    }
    const CliResult r = run_cnnscale(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Each run as the report reads it: its recorded configuration and its summary.
  for (const report::RunRecord& record : report::scan_runs(dir.str())) {
    ASSERT_TRUE(record.run_config.is_object());
    for (const auto& [name, value] : given.at(record.run_id)) {
      const TrainSetting& s = *find_train_setting(name);
      const nlohmann::json recorded = recorded_setting(s, record.run_config);
      if (recorded == s.default_value) continue;  // not recorded under this policy: it did not apply
      EXPECT_EQ(s.text(recorded), s.text(value)) << name;
      ++found[name];
      // The report groups by it, under its label, with the value as the run has it.
      ASSERT_FALSE(s.report_label.empty()) << name;
      EXPECT_NE(std::find(report::kGroupKeys.begin(), report::kGroupKeys.end(), s.report_label),
                report::kGroupKeys.end())
          << name;
      // The report's data key is the data's own name, which names synthetic data's fill:
      // synthetic(constant).
      if (s.report_label == "data")
        EXPECT_NE(record.text("data").find(s.text(value)), std::string::npos) << name;
      else
        EXPECT_EQ(record.text(s.report_label), s.text(value)) << name;
    }
  }
  for (const TrainSetting& s : train_settings())
    if (s.applies_to(cpu_run) && s.identity() && !kOwnTest.count(s.name))
      EXPECT_GT(found[s.name], 0) << s.name << " was never recorded";
}

// A setting that is a field of matrix.allreduce's modes: that field puts its flag on the command line
// of the runs of 2+ ranks; it is no key or axis of its own (the run id names the mode as a whole).
TEST(SettingsTable, PartsOfACompoundAxisAreThatAxisesFields) {
  const HostInfo host = gpu_host(2);
  std::set<std::string> fields;
  for (const TrainSetting& s : train_settings()) {
    // The split is matrix.split itself (below); the batch and the rank sets: test_settings_ranks.cpp.
    if (s.part_of.empty() || s.part_of == s.name || kOwnTest.count(s.name)) continue;
    fields.insert(s.name);
    ASSERT_EQ(s.part_of, "allreduce") << s.name;
    const nlohmann::json v = other_value(s, s.default_value);
    const std::string mode = s.name == "overlap" ? fmt::format("{{overlap: {}}}", v.dump())
                                                 : fmt::format("{{overlap: true, {}: {}}}", s.name,
                                                               s.experiment_value(v).dump());
    const Experiment e = parse_experiment_text(kBaseExperiment + "  repeats: 1\ndevice: gpu\n", "t.yaml",
                                               {fmt::format("matrix.allreduce=[{}]", mode)}, host);
    for (const RunSpec& r : expand_runs(e))
      EXPECT_EQ(command_line_value(train_arguments(e, r, "/r"), s), r.ranks > 1 ? s.text(v) : "<absent>") << r.id;
    // The mode's label (in the run ids) and its hashed form name the field by the entry's own words.
    const AllreduceMode& m = e.allreduce.at(0);
    EXPECT_FALSE(s.id_piece(v).empty()) << s.name << ": a value other than the default is named in the label";
    EXPECT_EQ(m.label(), s.name == "overlap" ? s.id_piece(v) : "ov" + s.id_piece(v)) << s.name;
    EXPECT_EQ(m.long_label(), s.name == "overlap" ? s.id_piece(v, true) : "overlap" + s.id_piece(v, true)) << s.name;
    EXPECT_EQ(m.id_json().at(s.name), s.experiment_value(v)) << s.name;
    EXPECT_NE(expand_runs(e).back().id.find("-" + m.label() + "-"), std::string::npos) << s.name;
    EXPECT_NE(sweep_train_flags().at(s.flag).find("matrix.allreduce's " + s.name), std::string::npos) << s.flag;
    expect_error(kBaseExperiment, {s.name, "unknown key"},
                 {fmt::format("matrix.{}=[{}]", s.name, s.experiment_value(v).dump())});
    // The exchange's dtype is recorded on every run, as it always was (on one rank it changes nothing).
    if (s.name != "dtype") EXPECT_FALSE(s.applies_to({.gpu = true})) << s.name;
    EXPECT_TRUE(s.applies_to({.gpu = true, .world_size = 2, .exchanges = true}));
  }
  EXPECT_EQ(fields, (std::set<std::string>{"overlap", "algo", "dtype", "max_ctas", "cta_policy", "priority", "update",
                                           "gather"}));
  // The split is matrix.split: its flag on the 2-rank runs' command lines, by the axis's values.
  const TrainSetting& split = *find_train_setting("split");
  EXPECT_EQ(sweep_train_flags().at(split.flag), "matrix.split");
  const Experiment e = parse(kBaseExperiment + "  repeats: 1\n  split: [even, auto]\n");
  std::set<std::string> seen;
  for (const RunSpec& r : expand_runs(e)) seen.insert(command_line_value(train_arguments(e, r, "/r"), split));
  EXPECT_EQ(seen, (std::set<std::string>{"<absent>", "even", "auto"}));
}

// A setting recorded as the run resolves it: --allreduce-dtype compute is the precision's storage.
TEST(SettingsTable, TheExchangeDtypeIsRecordedAsItResolves) {
  const TrainSetting& dtype = *find_train_setting("dtype");
  EXPECT_EQ(dtype.resolved("compute", {.precision = "bf16"}), "bf16");
  EXPECT_EQ(dtype.resolved("compute", {.precision = "tf32"}), "fp32");
  EXPECT_FALSE(dtype.records(dtype.resolved("compute", {.precision = "fp32"})));
  EXPECT_TRUE(dtype.records(dtype.resolved("fp16", {.precision = "fp32"})));
  EXPECT_EQ(find_train_setting("overlap")->arguments(false), std::vector<std::string>{"--no-overlap"});
  EXPECT_EQ(find_train_setting("update")->arguments(false), (std::vector<std::string>{"--update-per-bucket", "false"}));
  EXPECT_FALSE(find_train_setting("gather")->applies_to({.world_size = 1, .exchanges = true}));  // one rank's rows
}

// The settings that apply only to a GPU run or an NCCL job, which the CPU runs above cannot record:
// their rule says where they apply and that a default is left out (the runs from before keep their ids).
TEST(SettingsTable, GpuAndNcclSettingsApplyOnlyWhereTheyChangeSomething) {
  const RunContext cpu{}, gpu{.gpu = true, .graph = true}, nccl{.gpu = true, .world_size = 2, .exchanges = true,
                                                               .graph = true};
  const TrainSetting& copies = *find_train_setting("graph_copies");
  EXPECT_FALSE(copies.applies_to(cpu));
  EXPECT_FALSE(copies.applies_to(gpu));
  EXPECT_TRUE(copies.applies_to(nccl));
  EXPECT_FALSE(copies.applies_to({.gpu = true, .world_size = 2, .exchanges = true, .graph = false}));  // --no-graph
  EXPECT_TRUE(copies.records(2));
  EXPECT_FALSE(copies.records(1));
  for (const char* name : {"host_decode", "batchnorm"}) {
    EXPECT_FALSE(find_train_setting(name)->applies_to(cpu)) << name;
    EXPECT_TRUE(find_train_setting(name)->applies_to(gpu)) << name;
  }
  EXPECT_EQ(find_train_setting("fuse")->key(), "fused_epilogues");  // the key runs always recorded it under
  EXPECT_EQ(find_train_setting("cuda_graph")->arguments(false), std::vector<std::string>{"--no-graph"});
  EXPECT_TRUE(find_train_setting("cuda_graph")->arguments(true).empty());
}

TEST(SettingsTable, MatrixSeedLrMomentumAndWeightDecaySweepAndShowInTheReport) {
  TempDir dir;
  const std::string file = dir.file("axes.yaml");
  std::ofstream(file) << "name: axes\ndataset: synthetic\niterations: 2\nseeds: vary\n"
                         "matrix:\n  network: [lenet]\n  batch: [4]\n  repeats: 2\n  seed: [1, 2]\n"
                         "  lr: [0.1, 0.01]\n  momentum: [0.5]\n  weight_decay: [0.001]\n";
  const CliResult sweep = run_cnnscale({"sweep", file, "--results", dir.str() + "/res"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str() + "/res");
  ASSERT_EQ(runs.size(), 8u);
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 4u);  // seed x lr; each with its two repeats (seeds of their own)
  std::set<std::string> labels;
  const report::VaryingKeys varying = report::varying_keys(groups);
  for (const report::ConfigGroup& g : groups) {
    EXPECT_EQ(g.runs.size(), 2u);
    EXPECT_EQ(g.key.at("momentum"), "0.5");
    EXPECT_EQ(g.key.at("weight_decay"), "0.001");
    labels.insert(report::variant_label(g, varying));
  }
  EXPECT_EQ(labels, (std::set<std::string>{"seed=1 lr=0.01", "seed=2 lr=0.01", "seed=1 lr=0.1", "seed=2 lr=0.1"}));
  const CliResult rep = run_cnnscale({"report", dir.str() + "/res", "--no-plots"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  std::ifstream in(dir.str() + "/res/report/report.md");
  const std::string md((std::istreambuf_iterator<char>(in)), {});
  for (const char* text : {"seed=2 lr=0.1", "seed=1 lr=0.01", "seeds: vary"})
    EXPECT_NE(md.find(text), std::string::npos) << text << "\n" << md;
}

// A setting recorded Never (timing_warmup: how samples/s is measured) is no part of a run's
// configuration, but a sweep over it has one point per value: the sweep tags each run with it and the
// report groups by the tag, instead of counting the points as one point's repeats.
TEST(SettingsTable, ASweepOverASettingRecordedNeverKeepsItsPointsApartInTheReport) {
  TempDir dir;
  const std::string file = dir.file("warmup.yaml");
  std::ofstream(file) << "name: warmup\ndataset: synthetic\niterations: 3\n"
                         "matrix:\n  network: [lenet]\n  batch: [4]\n  repeats: 1\n  timing_warmup: [0, 1]\n";
  const CliResult sweep = run_cnnscale({"sweep", file, "--results", dir.str() + "/res"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const std::vector<report::RunRecord> runs = report::scan_runs(dir.str() + "/res");
  ASSERT_EQ(runs.size(), 2u);
  const std::vector<report::ConfigGroup> groups = report::group_runs(runs);
  ASSERT_EQ(groups.size(), 2u);
  const report::VaryingKeys varying = report::varying_keys(groups);
  std::set<std::string> labels;
  for (const report::ConfigGroup& g : groups) labels.insert(report::variant_label(g, varying));
  EXPECT_EQ(labels, (std::set<std::string>{"timing_warmup=0", "timing_warmup=1"}));
  // The tag is the sweep's: an experiment's own --tag of that name would contradict it.
  std::ofstream(file, std::ios::app) << "extra_args: [--tag, timing_warmup=5]\n";
  const CliResult refused = run_cnnscale({"sweep", file, "--results", dir.str() + "/res", "--dry-run"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("tag 'timing_warmup' is written by the sweep itself"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace cnnscale::testing
