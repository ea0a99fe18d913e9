// Identities that must not move when infer's settings come from their table: an inference sweep's
// run ids, each run's recorded configuration and its `cnnscale infer` command line, each pinned as
// the code before the table computed them.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale::testing {
namespace {

const std::string kPinnedInfer = R"(name: inf
mode: infer
device: gpu
seed: 3
infer:
  batch: [1, 8, max]
  seconds: 2
  latency_seconds: 0.5
  fold: false
  graph: false
  calibration: synthetic
matrix:
  network: [lenet]
  precision: [fp32, int8]
  gpus: [1, 2]
  repeats: 2
)";

// Every infer setting at its default: the pins below are computed from this text.
const std::string kPlainInfer = "name: plain\nmode: infer\n" + kOneInferRunMatrix;

// A run's `cnnscale infer` words after --net and its file (a path of this checkout).
std::string words_after_net(const Experiment& e, const RunSpec& r) {
  const std::vector<std::string> args = infer_arguments(e, r, "/r");
  EXPECT_GE(args.size(), 3u);
  EXPECT_EQ(args[1], "--net");
  return fmt::format("{}", fmt::join(args.begin() + 3, args.end(), " "));
}

// As the sweep computed them before infer's table (its --dry-run).
TEST(InferSettingsPinned, RunIdsConfigurationsAndCommandLinesAreThoseOfBeforeTheTable) {
  const Experiment e = parse(kPinnedInfer, {}, gpu_host(2));
  EXPECT_EQ(e.fixed_hash(), "4381a320f5252e2e");
  const std::vector<RunSpec> runs = expand_runs(e);
  const std::vector<std::string> ids = {"lenet-infer-g1-fp32-r1-314c18a3", "lenet-infer-g1-int8-r1-b2b2adc3",
                                        "lenet-infer-g2-fp32-r1-c10ef1de", "lenet-infer-g2-int8-r1-b26eb5d0",
                                        "lenet-infer-g1-fp32-r2-314c18a3", "lenet-infer-g1-int8-r2-b2b2adc3",
                                        "lenet-infer-g2-fp32-r2-c10ef1de", "lenet-infer-g2-int8-r2-b26eb5d0"};
  ASSERT_EQ(runs.size(), ids.size());
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].id, ids[i]);
  const std::string infer_fp32 =
      R"j("infer":{"batch":["1","8","max"],"fill":"constant","fold":false,"fuse":true,"graph":false,)j"
      R"j("latency_seconds":0.5,"seconds":2.0})j";
  EXPECT_EQ(runs[0].config.dump(), R"j({"device":"gpu","extra_args":[],"gpu_mix":[],)j" + infer_fp32 +
                                       R"j(,"mode":"infer","network":"lenet","precision":"fp32","ranks":1,"seed":3})j");
  EXPECT_EQ(runs[3].config.dump(),
            R"j({"device":"gpu","extra_args":[],"gpu_mix":[],"infer":{"batch":["1","8","max"],)j"
            R"j("calibration":"synthetic","fill":"constant","fold":false,"fuse":true,"graph":false,)j"
            R"j("latency_seconds":0.5,"seconds":2.0},"mode":"infer","network":"lenet","precision":"int8","ranks":2,)j"
            R"j("seed":3})j");
  EXPECT_EQ(words_after_net(e, runs[0]),
            "--batch 1,8,max --device gpu --precision fp32 --seed 3 --fill constant --seconds 2 --latency-seconds 0.5 "
            "--no-fold --no-graph --results /r --experiment inf --run-id lenet-infer-g1-fp32-r1-314c18a3");
  EXPECT_EQ(words_after_net(e, runs[3]),
            "--batch 1,8,max --device gpu --precision int8 --calibration synthetic --seed 3 --fill constant --seconds 2 "
            "--latency-seconds 0.5 --no-fold --no-graph --results /r --experiment inf --run-id "
            "lenet-infer-g2-int8-r1-b26eb5d0");

  const Experiment plain = parse(kPlainInfer, {}, gpu_host(2));
  EXPECT_EQ(plain.fixed_hash(), "9756ae29dc1a8d14");
  const std::vector<RunSpec> one = expand_runs(plain);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, "lenet-infer-g1-fp32-r1-75d5599a");
  EXPECT_EQ(one[0].config.dump(),
            R"j({"device":"cpu","extra_args":[],"gpu_mix":[],"infer":{"batch":["1","8","64"],"fill":"constant",)j"
            R"j("fold":true,"fuse":true,"graph":true,"latency_seconds":1.0,"seconds":3.0},"mode":"infer",)j"
            R"j("network":"lenet","precision":"fp32","ranks":1,"seed":1})j");
  EXPECT_EQ(words_after_net(plain, one[0]),
            "--batch 1,8,64 --device cpu --precision fp32 --seed 1 --fill constant --seconds 3 --latency-seconds 1 "
            "--results /r --experiment plain --run-id lenet-infer-g1-fp32-r1-75d5599a");
}

}  // namespace
}  // namespace cnnscale::testing
