// A matrix axis that lists one value twice is refused when the file is read, at the second entry's
// file:line:col, naming the value and the first entry: both would expand to runs of one run id, so
// the second finds the first's folder, or, as another array task, races it and fails.
#include <gtest/gtest.h>

#include <set>

#include "cpu/experiment_test_util.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

using testing::expect_error;
using testing::parse;

const std::string kLead =
    "name: t\n"             // 1
    "dataset: synthetic\n"  // 2
    "iterations: 4\n"       // 3
    "matrix:\n";            // 4

TEST(ExperimentAxisValues, AValueListedTwiceIsRefusedAtItsSecondEntry) {
  expect_error(testing::kBaseExperiment,
               {"command line 'matrix.batch=[16,16]':1:5: matrix.batch[1]: 16 is listed twice "
                "(also matrix.batch[0]): both would be one run, of one run id"},
               {"matrix.batch=[16,16]"});
  expect_error(kLead + "  network: [lenet, alexnet, lenet]\n  batch: [8]\n",  // line 5
               {"t.yaml:5:29: matrix.network[2]: lenet is listed twice (also matrix.network[0])"});
  // 0x10 is 16 as train reads it: the values are compared as read, not as written.
  expect_error(kLead + "  network: [lenet]\n  batch: [16, 8, 0x10]\n", {"matrix.batch[2]: 16 is listed twice"});
  expect_error(kLead + "  network: [lenet]\n  batch_per_gpu: [4, 4]\n", {"matrix.batch_per_gpu[1]: 4 is listed twice"});
  expect_error(kLead + "  network: [lenet]\n  batch: [8]\n  gpus: [2, 1, 2]\n", {"matrix.gpus[2]: 2 is listed twice"});
  expect_error(kLead + "  network: [lenet]\n  batch: [8]\n  cpu_mix: [[1, 3], [1, 3.0]]\n",
               {"matrix.cpu_mix[1]: [1, 3] is listed twice (also matrix.cpu_mix[0])"});
  expect_error(kLead + "  network: [lenet]\n  batch: [8]\n  gpus: [2]\n  allreduce: [overlap, no-overlap, overlap]\n",
               {"matrix.allreduce[2]: ", "is listed twice (also matrix.allreduce[0])"});
}

// Distinct values still expand to one run each, with distinct run ids.
TEST(ExperimentAxisValues, DistinctValuesExpandAsBefore) {
  const Experiment e = parse(kLead + "  network: [lenet]\n  batch: [8, 16]\n  gpus: [1, 2]\n  repeats: 2\n");
  const auto runs = expand_runs(e);
  EXPECT_EQ(runs.size(), 8u);
  std::set<std::string> ids;
  for (const auto& r : runs) ids.insert(r.id);
  EXPECT_EQ(ids.size(), runs.size());
}

}  // namespace
}  // namespace cnnscale
