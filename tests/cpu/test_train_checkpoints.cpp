// TrainCheckpoints on its own, without a Trainer: when a checkpoint is due, and a resume with
// nothing to resume from.
#include <gtest/gtest.h>

#include "solver/train_checkpoints.hpp"

namespace cnnscale {
namespace {

TEST(TrainCheckpoints, DueAtEpochEndsTheEndAndEveryNOnRankZeroOnly) {
  TrainOptions options;
  options.checkpoint_dir = "unused";
  options.checkpoint_every = 3;
  TrainJob job;
  const TrainCheckpoints checkpoints(options, job, /*iterations_per_epoch=*/5, /*total_iterations=*/11);
  std::vector<int64_t> due;
  for (int64_t done = 1; done <= 11; ++done)
    if (checkpoints.due(done)) due.push_back(done);
  EXPECT_EQ(due, (std::vector<int64_t>{3, 5, 6, 9, 10, 11}));
  job.parallel.rank = 1;  // read at each call: the weights are the same on every rank, rank 0 writes
  EXPECT_FALSE(checkpoints.due(5));
  job.parallel.rank = 0;
  options.checkpoint_dir.clear();
  EXPECT_FALSE(checkpoints.due(5)) << "no directory, no checkpoint";
}

}  // namespace
}  // namespace cnnscale
