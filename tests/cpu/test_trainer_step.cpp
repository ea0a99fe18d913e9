// The training step's shared definitions: the one phase enum behind the timer and the results
// files, and the global batch checked once, with one message for both input paths.
#include <gtest/gtest.h>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "data/synthetic_dataset.hpp"
#include "measure/phase_timer.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {
namespace {

TEST(StepPhases, AreTheTimelinePhasesBeforeTotal) {
  EXPECT_EQ(kStepPhases + 1, kTimelinePhaseCount);
  for (int p = 0; p < kStepPhases; ++p) EXPECT_EQ(step_phase_name(p), kTimelinePhaseNames[static_cast<size_t>(p)]);
  EXPECT_STREQ(step_phase_name(TimelinePhase::CommBusy), "comm_busy");
  EXPECT_THROW(step_phase_name(TimelinePhase::Total), Error) << "total is the whole iteration, not a phase";
}

struct SmallData {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml");
  std::shared_ptr<const Dataset> data =
      std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 16, SyntheticFill::Gaussian, 3);
};

std::string config_error(const SmallData& d, TrainOptions o) {
  try {
    Trainer trainer(d.spec, *d.backend, d.data, nullptr, SolverConfig{}, o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerBatch, LargerThanTheDataIsOneErrorForBothInputPaths) {
  SmallData d;
  TrainOptions o;
  o.batch = 17;
  o.iterations = 1;
  const std::string loader = config_error(d, o);
  o.device_pool = true;
  const std::string pool = config_error(d, o);
  EXPECT_NE(loader.find("batch size 17 is larger than"), std::string::npos) << loader;
  EXPECT_EQ(loader, pool);
  o.batch = 0;
  EXPECT_NE(config_error(d, o).find("--batch must be >= 1"), std::string::npos);
  o.batch = 16;
  EXPECT_EQ(config_error(d, o), "") << "one batch fits";
}

// A caller that builds a Trainer directly gets the range `train --graph-copies` checks.
TEST(TrainerOptions, GraphCopiesOutsideOneToSixteenAreRefused) {
  SmallData d;
  TrainOptions o;
  o.batch = 16;
  o.iterations = 1;
  for (int copies : {0, -1, 17}) {
    o.graph_copies = copies;
    EXPECT_NE(config_error(d, o).find("--graph-copies must be in [1, 16]"), std::string::npos) << copies;
  }
  for (int copies : {1, 16}) {
    o.graph_copies = copies;
    EXPECT_EQ(config_error(d, o), "") << copies;
  }
}

}  // namespace
}  // namespace cnnscale
