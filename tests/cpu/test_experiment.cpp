// Experiment files: every schema error names file:line:col and the key path (overrides name their
// command-line text), overrides and --only, and the expansion into runs with ids that are stable
// across invocations, equal for repeats' configs and different for different configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "core/error.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/experiment.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

using testing::kBase;

using testing::cpu_host;
using testing::expect_error;
using testing::gpu_host;
using testing::parse;

TEST(ExperimentSchema, ValidFileParses) {
  Experiment e = parse(kBase);
  EXPECT_EQ(e.name, "t");
  EXPECT_EQ(e.networks, std::vector<std::string>{"lenet"});
  EXPECT_EQ(e.batches, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(e.gpu_counts, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(e.repeats, 3);  // the default
  EXPECT_EQ(e.precisions, std::vector<std::string>{"fp32"});
  EXPECT_EQ(e.device, "cpu");
}

TEST(ExperimentSchema, UnknownKey) {
  expect_error("name: t\nbogus: 1\n" + kBase.substr(8), {"t.yaml:2:1: bogus: unknown key 'bogus'"});
  expect_error(kBase + "  repeat: 2\n", {"t.yaml:8:3: matrix.repeat: unknown key 'repeat'"});
  expect_error(kBase + "solver: {lr: 0.1, momentun: 0.9}\n", {"t.yaml:8:19: solver.momentun: unknown key"});
  expect_error(kBase + "networks: {lenet: {iteration: 3}}\n", {"t.yaml:8:20: networks.lenet.iteration: unknown key"});
}

TEST(ExperimentSchema, WrongType) {
  expect_error("name: t\ndataset: synthetic\niterations: many\nmatrix: {network: lenet, batch: 8}\n",
               {"t.yaml:3:13: iterations: expected an integer, got 'many'"});
  expect_error(kBase + "seed: [1]\n", {"t.yaml:8:7: seed: expected a scalar value"});
  expect_error(kBase + "  allreduce: [{overlap: maybe}]\n",
               {"t.yaml:8:25: matrix.allreduce[0].overlap: expected a boolean, got 'maybe'"});
}

TEST(ExperimentSchema, OutOfRange) {
  expect_error(std::regex_replace(kBase, std::regex(R"(\[8, 16\])"), "[8, 0]"),
               {"t.yaml:6:14: matrix.batch[1]: must be in [1, ", "got 0"});
  expect_error(kBase + "  repeats: 0\n", {"t.yaml:8:12: matrix.repeats: must be in [1, 1000], got 0"});
  expect_error(kBase + "solver: {lr: -1}\n", {"t.yaml:8:14: solver.lr: must be in (0", "got -1"});
  expect_error(kBase + "measure: fast\n", {"t.yaml:8:10: measure: expected one of phases, steady, got 'fast'"});
  expect_error(kBase + "device: tpu\n", {"t.yaml:8:9: device: expected one of auto, cpu, gpu, got 'tpu'"});
  expect_error(kBase + "  allreduce: [overlap, sideways]\n",
               {"t.yaml:8:24: matrix.allreduce[1]: expected one of no-overlap, overlap, got 'sideways'"});
  expect_error(kBase + "  allreduce: [{dtype: int8}]\n",
               {"t.yaml:8:23: matrix.allreduce[0].dtype: expected one of bf16, compute, fp16, fp32, got 'int8'"});
}

// matrix.allreduce's dtype is train's --allreduce-dtype: a variant of its own in the run id and the
// arguments; an entry without one keeps the id and arguments it had before the key existed.
TEST(ExperimentSchema, AllreduceDtypeIsAVariantPassedToTrain) {
  const Experiment e = parse(kBase + "  allreduce: [overlap, {overlap: true, dtype: bf16}]\n");
  const auto runs = expand_runs(e);
  std::vector<std::string> labels;
  for (const auto& r : runs)
    if (r.ranks == 2 && r.batch == 8 && r.repeat == 1) labels.push_back(r.id.substr(0, r.id.find("-r1-")));
  EXPECT_EQ(labels, (std::vector<std::string>{"lenet-b8-g2-fp32-ov", "lenet-b8-g2-fp32-ov-bf16"}));
  for (const auto& r : runs) {
    if (r.ranks != 2) continue;
    const auto args = train_arguments(e, r, "/r");
    const auto flag = std::find(args.begin(), args.end(), "--allreduce-dtype");
    if (r.allreduce.dtype.empty()) {
      EXPECT_EQ(flag, args.end()) << r.id;
      EXPECT_FALSE(r.config["allreduce"].contains("dtype")) << r.id;
    } else {
      ASSERT_NE(flag, args.end()) << r.id;
      EXPECT_EQ(*(flag + 1), "bf16");
      EXPECT_EQ(r.config["allreduce"]["dtype"], "bf16");
    }
  }
  const OnlyFilter only = parse_only({"allreduce=ov-bf16"});
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [&](const RunSpec& r) { return r.ranks == 2 && only.matches(r); }),
            6);  // 2 batches x 3 repeats
  // The matrix owns the flag: extra_args cannot give a run a dtype its id does not name.
  expect_error(kBase + "extra_args: [--allreduce-dtype, bf16]\n",
               {"t.yaml:8:14: extra_args[0]: '--allreduce-dtype' is set by matrix.allreduce's dtype"});
}

// matrix.allreduce's max_ctas is train's --allreduce-max-ctas (NCCL_MAX_CTAS): a variant of its own
// in the run id, the configuration and the arguments, for GPU experiments only, owned by the matrix.
TEST(ExperimentSchema, AllreduceMaxCtasIsAVariantPassedToTrain) {
  const std::string gpu_tail = "device: gpu\n";
  const Experiment e = parse(kBase + "  allreduce: [overlap, {overlap: true, dtype: bf16, max_ctas: 8}]\n" + gpu_tail,
                             {}, gpu_host(2));
  const auto runs = expand_runs(e);
  std::vector<std::string> labels;
  for (const auto& r : runs)
    if (r.ranks == 2 && r.batch == 8 && r.repeat == 1) labels.push_back(r.id.substr(0, r.id.find("-r1-")));
  EXPECT_EQ(labels, (std::vector<std::string>{"lenet-b8-g2-fp32-ov", "lenet-b8-g2-fp32-ov-bf16-c8"}));
  for (const auto& r : runs) {
    if (r.ranks != 2) continue;
    const auto args = train_arguments(e, r, "/r");
    if (r.allreduce.max_ctas == 0) {
      EXPECT_EQ(std::find(args.begin(), args.end(), "--allreduce-max-ctas"), args.end()) << r.id;
      EXPECT_FALSE(r.config["allreduce"].contains("max_ctas")) << r.id;
    } else {
      EXPECT_EQ(testing::flag_value(args, "--allreduce-max-ctas"), "8") << r.id;
      EXPECT_EQ(r.config["allreduce"]["max_ctas"], 8);
    }
  }
  const OnlyFilter only = parse_only({"allreduce=overlap-bf16-c8"});
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [&](const RunSpec& r) { return r.ranks == 2 && only.matches(r); }),
            6);  // 2 batches x 3 repeats
  expect_error(kBase + "  allreduce: [{max_ctas: 0}]\n" + gpu_tail,
               {"t.yaml:8:26: matrix.allreduce[0].max_ctas: must be in [1, 64], got 0"}, {}, gpu_host(2));
  expect_error(kBase + "  allreduce: [{max_ctas: 8}]\n",
               {"t.yaml:8:26: matrix.allreduce[0].max_ctas: NCCL's CTAs apply to GPU ranks, and this experiment runs "
                "on the CPU"});
  expect_error(kBase + "extra_args: [--allreduce-max-ctas, 4]\n" + gpu_tail,
               {"t.yaml:8:14: extra_args[0]: '--allreduce-max-ctas' is set by matrix.allreduce's max_ctas"}, {},
               gpu_host(2));
}

// matrix.allreduce's cta_policy and priority are train's --allreduce-cta-policy and
// --allreduce-priority: variants of their own after the CTA cap in the run id, the configuration and
// the arguments; their defaults spelt out are the runs without them; GPU experiments only, owned by
// the matrix.
TEST(ExperimentSchema, AllreduceCtaPolicyAndPriorityAreVariantsPassedToTrain) {
  const std::string gpu_tail = "device: gpu\n";
  const Experiment e = parse(kBase +
                                 "  allreduce: [{cta_policy: default, priority: high}, {cta_policy: efficiency}, "
                                 "{max_ctas: 8, cta_policy: zero, priority: low}, {priority: low}]\n" +
                                 gpu_tail,
                             {}, gpu_host(2));
  const auto runs = expand_runs(e);
  std::vector<std::string> labels;
  for (const auto& r : runs)
    if (r.ranks == 2 && r.batch == 8 && r.repeat == 1) labels.push_back(r.id.substr(0, r.id.find("-r1-")));
  EXPECT_EQ(labels, (std::vector<std::string>{"lenet-b8-g2-fp32-ov", "lenet-b8-g2-fp32-ov-eff",
                                              "lenet-b8-g2-fp32-ov-c8-zero-lowp", "lenet-b8-g2-fp32-ov-lowp"}));
  for (const auto& r : runs) {
    if (r.ranks != 2) continue;
    const auto args = train_arguments(e, r, "/r");
    const nlohmann::json& ar = r.config["allreduce"];
    if (r.allreduce.cta_policy.empty()) {
      EXPECT_EQ(std::find(args.begin(), args.end(), "--allreduce-cta-policy"), args.end()) << r.id;
      EXPECT_FALSE(ar.contains("cta_policy")) << r.id;
    } else {
      EXPECT_EQ(testing::flag_value(args, "--allreduce-cta-policy"), r.allreduce.cta_policy) << r.id;
      EXPECT_EQ(ar["cta_policy"], r.allreduce.cta_policy) << r.id;
    }
    if (r.allreduce.priority.empty()) {
      EXPECT_EQ(std::find(args.begin(), args.end(), "--allreduce-priority"), args.end()) << r.id;
      EXPECT_FALSE(ar.contains("priority")) << r.id;
    } else {
      EXPECT_EQ(testing::flag_value(args, "--allreduce-priority"), "low") << r.id;
      EXPECT_EQ(ar["priority"], "low") << r.id;
    }
  }
  const OnlyFilter only = parse_only({"allreduce=overlap-eff"});
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [&](const RunSpec& r) { return r.ranks == 2 && only.matches(r); }),
            6);  // 2 batches x 3 repeats
  expect_error(kBase + "  allreduce: [{cta_policy: fast}]\n" + gpu_tail,
               {"t.yaml:8:28: matrix.allreduce[0].cta_policy: expected one of default, efficiency, zero, got 'fast'"},
               {}, gpu_host(2));
  expect_error(kBase + "  allreduce: [{priority: urgent}]\n" + gpu_tail,
               {"t.yaml:8:26: matrix.allreduce[0].priority: expected one of high, low, got 'urgent'"}, {}, gpu_host(2));
  expect_error(kBase + "  allreduce: [{cta_policy: efficiency}]\n",
               {"t.yaml:8:28: matrix.allreduce[0].cta_policy: NCCL's CTA policy applies to GPU ranks, and this "
                "experiment runs on the CPU"});
  expect_error(kBase + "  allreduce: [{priority: low}]\n",
               {"t.yaml:8:26: matrix.allreduce[0].priority: the priority of NCCL's stream applies to GPU ranks, and "
                "this experiment runs on the CPU"});
  parse(kBase + "  allreduce: [{cta_policy: default, priority: high}]\n");  // the defaults run on CPU ranks too
  expect_error(kBase + "extra_args: [--allreduce-cta-policy, zero]\n" + gpu_tail,
               {"t.yaml:8:14: extra_args[0]: '--allreduce-cta-policy' is set by matrix.allreduce's cta_policy"}, {},
               gpu_host(2));
  expect_error(kBase + "extra_args: [--allreduce-priority=low]\n" + gpu_tail,
               {"t.yaml:8:14: extra_args[0]: '--allreduce-priority' is set by matrix.allreduce's priority"}, {},
               gpu_host(2));
  // A sweep's 1-GPU runs are the baselines of its scaling tables: they never take the data-parallel path.
  expect_error(kBase + "extra_args: [--one-rank-exchange]\n" + gpu_tail,
               {"t.yaml:8:14: extra_args[0]: '--one-rank-exchange' would make the 1-GPU baselines measure the "
                "data-parallel path"},
               {}, gpu_host(2));
}

TEST(ExperimentSchema, PrecisionAxisRunsEachPrecisionOnGpus) {
  const std::string text = kBase + "  precision: [fp32, tf32, bf16, fp16]\n" + "device: gpu\n";
  const Experiment e = parse(text, {}, gpu_host(2));
  EXPECT_EQ(e.precisions, (std::vector<std::string>{"fp32", "tf32", "bf16", "fp16"}));
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u * 2u * 4u * 3u);  // batches x gpus x precisions x repeats
  std::map<std::string, int> by_precision;
  std::set<std::string> hashes;
  for (const auto& r : runs) {
    const auto args = train_arguments(e, r, "/r");
    EXPECT_EQ(testing::flag_value(args, "--precision"), r.precision) << r.id;
    EXPECT_NE(r.id.find("-" + r.precision + "-"), std::string::npos) << r.id;
    EXPECT_EQ(r.config.at("precision"), r.precision);
    ++by_precision[r.precision];
    if (r.repeat == 1) hashes.insert(r.config_hash);
  }
  EXPECT_EQ(by_precision, (std::map<std::string, int>{{"bf16", 12}, {"fp16", 12}, {"fp32", 12}, {"tf32", 12}}));
  EXPECT_EQ(hashes.size(), 16u) << "each precision is a configuration of its own";
  // --only picks one precision.
  const OnlyFilter only = parse_only({"precision=bf16"});
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [&](const RunSpec& r) { return only.matches(r); }), 12);
}

TEST(ExperimentSchema, Fp32IsTheDefaultAndIsPassedToTrain) {
  const Experiment e = parse(kBase);
  const auto runs = expand_runs(e);
  ASSERT_FALSE(runs.empty());
  for (const auto& r : runs) EXPECT_EQ(testing::flag_value(train_arguments(e, r, "/r"), "--precision"), "fp32");
}

TEST(ExperimentSchema, PrecisionErrorsNameTheKeyPath) {
  const std::string gpu_tail = "device: gpu\n";
  expect_error(kBase + "  precision: [fp32, fp64]\n" + gpu_tail,
               {"t.yaml:8:21: matrix.precision[1]: precision 'fp64': expected fp32, tf32, bf16 or fp16"}, {},
               gpu_host(2));
  expect_error(kBase + "  precision: [bf16, bf16]\n" + gpu_tail,
               {"t.yaml:8:21: matrix.precision[1]: 'bf16' is listed twice"}, {}, gpu_host(2));
  // The CPU backend computes in fp32 only: refused when the file is read, not when the sweep reaches the run.
  expect_error(kBase + "  precision: [fp32, bf16]\n",
               {"t.yaml:8:21: matrix.precision[1]: precision 'bf16' runs on GPUs only", "(device: cpu)"});
  expect_error(kBase + "  precision: [tf32]\n" + "device: auto\n",
               {"t.yaml:8:15: matrix.precision[0]: precision 'tf32' runs on GPUs only",
                "device: auto found too few GPUs"},
               {}, cpu_host());
  EXPECT_NO_THROW(parse(kBase + "  precision: [tf32]\n" + "device: auto\n", {}, gpu_host(2)));
  // The matrix owns the flag: extra_args cannot contradict a run's precision.
  expect_error(kBase + "extra_args: [--precision=bf16]\n",
               {"t.yaml:8:14: extra_args[0]: '--precision' is set by matrix.precision"});
}

TEST(ExperimentSchema, MoreRanksThanGpusOnOneNode) {
  const std::string gpu = kBase + "device: gpu\n";
  expect_error(std::regex_replace(gpu, std::regex(R"(\[1, 2\])"), "[1, 4]"),
               {"t.yaml:7:13: matrix.gpus[1]: 4 rank(s) need 4 GPU(s) on one node, but only 2 visible",
                "CUDA_VISIBLE_DEVICES=2"},
               {}, gpu_host(2));
  EXPECT_NO_THROW(parse(gpu, {}, gpu_host(2)));
  // Unknown GPU count (CPU-only build, no CUDA_VISIBLE_DEVICES): nothing to check against.
  EXPECT_NO_THROW(parse(std::regex_replace(gpu, std::regex(R"(\[1, 2\])"), "[8]"), {}, cpu_host()));
  // On the CPU the ranks are processes, not GPUs.
  EXPECT_NO_THROW(parse(std::regex_replace(kBase, std::regex(R"(\[1, 2\])"), "[1, 8]"), {}, gpu_host(2)));
  expect_error(kBase + "  gpu_mix: [[0, 3]]\ndevice: gpu\n",
               {"t.yaml:8:17: matrix.gpu_mix[0][1]: GPU 3 does not exist: 2 visible"}, {}, gpu_host(2));
  expect_error(kBase + "  gpu_mix: [[1, 1]]\ndevice: gpu\n", {"matrix.gpu_mix[0][1]: GPU 1 is listed twice"}, {},
               gpu_host(4));
  expect_error(kBase + "  gpu_mix: [[0, 1]]\n",
               {"t.yaml:8:12: matrix.gpu_mix: per-rank GPU selectors need device gpu"});
}

TEST(ExperimentSchema, ImpossibleCombinations) {
  expect_error(std::regex_replace(kBase, std::regex(R"(\[8, 16\])"), "[1, 16]"),
               {"t.yaml:7:13: matrix.gpus[1]: 2 ranks cannot split a global batch of 1"});
  expect_error(kBase + "epochs: 2\n", {"t.yaml:8:9: epochs: 'iterations' and 'epochs' are exclusive"});
  expect_error("name: t\ndataset: synthetic\nmatrix: {network: lenet, batch: 8}\n",
               {"t.yaml:1:1: network lenet: give iterations, epochs or iteration_scale"});
  expect_error(
      "name: t\ndataset: synthetic\niteration_scale: 0.001\nwhole_epochs: 2\nmatrix: {network: lenet, batch: 8}\n",
      {"network lenet: iteration_scale needs whole_samples"});
  expect_error(kBase + "network: lenet\n", {"t.yaml:5:12: matrix.network: the network is given twice"});
  expect_error("name: t\ndataset: {name: synthetic, data_dir: /x}\niterations: 1\nmatrix: {network: lenet, batch: 8}\n",
               {"t.yaml:2:38: dataset.data_dir: applies to fashion-mnist only"});
  expect_error(kBase + "extra_args: [--results, x]\n", {"t.yaml:8:14: extra_args[0]: '--results' is set by the sweep"});
}

TEST(ExperimentSchema, MissingAndBadValues) {
  expect_error("dataset: synthetic\niterations: 1\nmatrix: {network: lenet, batch: 8}\n",
               {"missing required key 'name'"});
  expect_error("name: a/b\n" + kBase.substr(8), {"t.yaml:1:7: name: 'a/b' is not a usable folder name"});
  expect_error("name: t\ndataset: synthetic\niterations: 1\nmatrix: {network: nonet, batch: 8}\n",
               {"t.yaml:4:19: matrix.network: network 'nonet' not found"});
  expect_error("name: t\nmatrix: [\n", {"t.yaml:", "YAML syntax error"});
  expect_error("name: t\ndataset: synthetic\niterations: 1\nmatrix: {network: lenet}\n",
               {"matrix: missing required key 'batch'"});
}

TEST(ExperimentSchema, NetworkFilesAreLookedUpBesideTheExperimentFile) {
  // "exp/t.yaml" does not exist: only its folder matters, as the base of relative paths.
  const std::string text = "name: t\ndataset: synthetic\niterations: 4\nmatrix: {network: [nets/x.yaml], batch: 8}\n";
  const std::string beside = (std::filesystem::current_path() / "exp" / "nets" / "x.yaml").string();
  try {
    parse_experiment_text(text, "exp/t.yaml", {}, cpu_host());
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exp/t.yaml:4:20: matrix.network[0]: network file " + beside +
                                         " not found (relative paths are read from the experiment file's folder)"),
              std::string::npos)
        << e.what();
  }
  // A name is a name: networks/lenet.yaml of the source tree, whatever the file's folder.
  Experiment e = parse_experiment_text(kBase, "/nowhere/t.yaml", {}, cpu_host());
  EXPECT_EQ(std::filesystem::path(e.network_paths.at("lenet")).filename(), "lenet.yaml");
  EXPECT_TRUE(std::filesystem::exists(e.network_paths.at("lenet")));
}

TEST(ExperimentOverrides, SetAnyFieldByDottedPath) {
  Experiment e = parse(kBase, {"matrix.batch=[32]", "solver.lr=0.05", "matrix.repeats=1", "name=other",
                               "matrix.network=[lenet, caffenet]", "networks.caffenet.iterations=2"});
  EXPECT_EQ(e.batches, std::vector<int64_t>{32});
  EXPECT_DOUBLE_EQ(e.solver["lr"].get<double>(), 0.05);
  EXPECT_EQ(e.repeats, 1);
  EXPECT_EQ(e.name, "other");
  EXPECT_EQ(e.networks, (std::vector<std::string>{"lenet", "caffenet"}));
  EXPECT_EQ(e.per_network.at("caffenet").iterations, 2);
}

TEST(ExperimentOverrides, ErrorsNameTheCommandLine) {
  expect_error(kBase, {"command line 'solver.lr=-1':1:1: solver.lr: must be in (0"}, {"solver.lr=-1"});
  expect_error(kBase, {"command line 'matrix.batch=[8,x]':1:4: matrix.batch[1]: expected an integer, got 'x'"},
               {"matrix.batch=[8,x]"});
  expect_error(kBase, {"command line 'solver.lrr=1': solver.lrr: unknown key 'lrr'"}, {"solver.lrr=1"});
  expect_error(kBase, {"override 'lr': expected key=value"}, {"lr"});
  expect_error(kBase, {"command line 'iterations.x=1': iterations: is not a mapping"}, {"iterations.x=1"});
  expect_error(kBase, {"command line 'matrix.batch=[8':1:1: YAML syntax error"}, {"matrix.batch=[8"});
}

TEST(ExperimentExpansion, CountsOrderAndCollapsedSingleRankAllreduce) {
  Experiment e = parse(kBase + "  allreduce: [overlap, no-overlap]\n");
  auto runs = expand_runs(e);
  // Per repeat: 2 batches x (1 rank: one run + 2 ranks: two allreduce modes) = 6.
  ASSERT_EQ(runs.size(), 18u);
  EXPECT_EQ(runs[0].repeat, 1);
  EXPECT_EQ(runs[5].repeat, 1);
  EXPECT_EQ(runs[6].repeat, 2);  // repeat outermost: a whole pass before the next repeat
  std::regex form(R"(lenet-b(8|16)-g(1|2)-fp32-(single|ov|noov)-r[123]-[0-9a-f]{8})");
  std::set<std::string> ids;
  for (const auto& r : runs) {
    EXPECT_TRUE(std::regex_match(r.id, form)) << r.id;
    ids.insert(r.id);
    EXPECT_EQ(r.iterations, 4);
  }
  EXPECT_EQ(ids.size(), runs.size());
}

// Weak scaling: per-GPU batches become global batches per rank count, and a point the global
// batches already hold (per-GPU 8 on 2 ranks = global 16 on 2 ranks) runs once.
TEST(ExperimentExpansion, PerGpuBatchesAddWeakScalingPoints) {
  Experiment e = parse(kBase + "  batch_per_gpu: [8, 32]\n  repeats: 1\n");
  EXPECT_EQ(e.batches_per_gpu, (std::vector<int64_t>{8, 32}));
  std::set<std::pair<int64_t, int64_t>> points;
  for (const RunSpec& r : expand_runs(e)) EXPECT_TRUE(points.insert({r.batch, r.ranks}).second) << r.id;
  const std::set<std::pair<int64_t, int64_t>> want = {{8, 1}, {8, 2}, {16, 1}, {16, 2}, {32, 1}, {64, 2}};
  EXPECT_EQ(points, want);
  // --only batch is the global batch; batch_per_gpu the global batch per rank, whichever axis made it.
  const auto count = [&](const std::string& only) {
    const OnlyFilter f = parse_only({only});
    std::set<std::pair<int64_t, int64_t>> got;
    for (const RunSpec& r : expand_runs(e))
      if (f.matches(r)) got.insert({r.batch, r.ranks});
    return got;
  };
  EXPECT_EQ(count("batch=16"), (std::set<std::pair<int64_t, int64_t>>{{16, 1}, {16, 2}}));
  EXPECT_EQ(count("batch_per_gpu=8"), (std::set<std::pair<int64_t, int64_t>>{{8, 1}, {16, 2}}));
  EXPECT_EQ(count("batch_per_gpu=32,gpus=2"), (std::set<std::pair<int64_t, int64_t>>{{64, 2}}));
  // Per-GPU batches alone are a matrix too; neither is an error naming both keys.
  Experiment weak = parse("name: t\ndataset: synthetic\niterations: 4\nmatrix:\n  network: [lenet]\n"
                          "  batch_per_gpu: [4]\n  gpus: [1, 2]\n  repeats: 1\n");
  EXPECT_TRUE(weak.batches.empty());
  EXPECT_EQ(expand_runs(weak).size(), 2u);
  expect_error("name: t\ndataset: synthetic\niterations: 4\nmatrix:\n  network: [lenet]\n  batch_per_gpu: [0]\n",
               {"t.yaml:6:19: matrix.batch_per_gpu[0]"});
}

TEST(ExperimentExpansion, IdsStableAcrossInvocationsAndNarrowedMatrices) {
  auto a = expand_runs(parse(kBase));
  auto b = expand_runs(parse(kBase));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].id, b[i].id);
  // Repeats share the config hash (the report groups them by it); ids differ by r<k> only.
  EXPECT_EQ(a[0].config_hash, a[4].config_hash);
  EXPECT_EQ(a[0].id.substr(0, a[0].id.size() - 12), a[4].id.substr(0, a[4].id.size() - 12));
  EXPECT_NE(a[0].id, a[4].id);
  // Narrowing the matrix selects the same runs (same ids), so a sweep may grow or shrink.
  auto narrow = expand_runs(parse(kBase, {"matrix.batch=[16]", "matrix.repeats=1"}));
  for (const auto& r : narrow)
    EXPECT_NE(std::find_if(a.begin(), a.end(), [&](const RunSpec& x) { return x.id == r.id; }), a.end()) << r.id;
  // A different configuration gives different hashes everywhere.
  auto changed = expand_runs(parse(kBase, {"solver.lr=0.5"}));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i].config_hash, changed[i].config_hash);
  EXPECT_NE(parse(kBase).fixed_hash(), parse(kBase, {"solver.lr=0.5"}).fixed_hash());
  EXPECT_EQ(parse(kBase).fixed_hash(), parse(kBase, {"matrix.batch=[16]"}).fixed_hash());
}

TEST(ExperimentExpansion, ScaledIterationsAndWholeTraining) {
  Experiment e = parse(kBase +
                       "networks: {lenet: {iteration_scale: 0.001, min_iterations: 5, whole_epochs: 90, "
                       "whole_samples: 1280000}}\n");
  auto runs = expand_runs(e);
  EXPECT_EQ(runs[0].batch, 8);
  EXPECT_EQ(runs[0].whole_iterations, 160000 * 90);
  EXPECT_EQ(runs[0].iterations, 14400);
  Experiment f = parse(kBase, {"matrix.batch=[64,128,256]", "iterations=~", "iteration_scale=0.0001", "whole_epochs=90",
                               "whole_samples=1280000"});
  auto r = expand_runs(f);
  EXPECT_EQ(r[0].whole_iterations, 1800000);  // Table 3 of the study
  EXPECT_EQ(r[2].whole_iterations, 900000);
  EXPECT_EQ(r[4].whole_iterations, 450000);
  EXPECT_EQ(r[0].iterations, 180);
  EXPECT_EQ(r[4].iterations, 45);
}

TEST(ExperimentExpansion, DeviceAutoFollowsTheGpus) {
  EXPECT_EQ(parse(kBase + "device: auto\n", {}, gpu_host(2)).device, "gpu");
  EXPECT_EQ(parse(kBase + "device: auto\n", {}, gpu_host(0)).device, "cpu");
  EXPECT_EQ(parse(kBase + "device: auto\n", {}, cpu_host()).device, "cpu");
  // Not enough GPUs for the 2-rank runs: the CPU backend rather than an error, but said, since the
  // 1-GPU points could have run on the GPU.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(parse(kBase + "device: auto\n", {}, gpu_host(1)).device, "cpu");
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("device: auto: this node has 1 GPU(s), the matrix needs 2: every run goes to the CPU"),
            std::string::npos)
      << said;
  ::testing::internal::CaptureStderr();
  parse(kBase + "device: auto\n", {}, gpu_host(0));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "no GPU: nothing to warn about";
}

TEST(ExperimentOnly, FiltersMatrixPoints) {
  auto runs = expand_runs(parse(kBase + "  allreduce: [overlap, no-overlap]\n"));
  auto count = [&](const std::vector<std::string>& exprs) {
    OnlyFilter f = parse_only(exprs);
    return std::count_if(runs.begin(), runs.end(), [&](const RunSpec& r) { return f.matches(r); });
  };
  EXPECT_EQ(count({}), 18);
  EXPECT_EQ(count({"network=lenet,batch=8"}), 9);
  EXPECT_EQ(count({"batch=8|16"}), 18);
  EXPECT_EQ(count({"gpus=2,repeat=1"}), 4);
  EXPECT_EQ(count({"allreduce=no-overlap,repeat=1"}), 4);  // the 1-rank runs have no allreduce: kept
  EXPECT_EQ(count({"batch=8", "gpus=1"}), 3);
  EXPECT_EQ(count({"batch=8", "batch=16"}), 0);
  EXPECT_THROW(parse_only({"size=8"}), ConfigError);
  EXPECT_THROW(parse_only({"batch"}), ConfigError);
}

}  // namespace
}  // namespace cnnscale
