// The Trainer in every GPU precision, end to end: steps, evaluation of 16-bit scores, the fp16 loss
// scale and the peak-memory figure. The per-op and per-net numerics are in the parity tests; this
// checks that a whole run in bf16/fp16 produces the same kind of results an fp32 run does.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "data/synthetic_dataset.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {
namespace {

const NetSpec& small_net() {
  static const NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml");
  return spec;
}

std::shared_ptr<SyntheticDataset> small_train_set() {
  return std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 64, SyntheticFill::Gaussian, 3);
}

// 8 steps of batch 16 in precision `p`.
TrainOptions short_run(Precision p) {
  TrainOptions o;
  o.batch = 16;
  o.iterations = 8;
  o.precision = p;
  return o;
}

TEST(TrainerPrecision, EveryPrecisionTrainsAndEvaluates) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NetSpec& spec = small_net();
  auto train = small_train_set();
  auto test = std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 40, SyntheticFill::Gaussian, 4);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    auto backend = make_backend("gpu:0", 0, p);
    Trainer trainer(spec, *backend, train, test, SolverConfig{}, short_run(p));
    EXPECT_EQ(trainer.net().compute_dtype(), compute_dtype(p));
    const TrainResult r = trainer.run();
    EXPECT_EQ(r.iterations, 8);
    EXPECT_TRUE(std::isfinite(r.final_loss)) << r.final_loss;
    ASSERT_TRUE(r.test.has_value());
    EXPECT_EQ(r.test->samples, 40);
    EXPECT_GE(r.test->top1, 0.0);
    EXPECT_LE(r.test->top1, r.test->top5);
    EXPECT_TRUE(std::isfinite(r.test->loss));
    EXPECT_GT(r.peak_memory_bytes, 0);
    // fp16 starts at 2^16 and halves once per skipped step (growth takes 2000 clean steps); the
    // others neither scale nor skip.
    if (p == Precision::FP16) {
      EXPECT_LT(r.skipped_steps, 8);
      EXPECT_EQ(r.final_grad_scale * std::ldexp(1.0, static_cast<int>(r.skipped_steps)), 65536.0);
    } else {
      EXPECT_EQ(r.final_grad_scale, 1.0);
      EXPECT_EQ(r.skipped_steps, 0);
    }
  }
}

// The divergence check in every precision on the GPU: fp32, tf32 and bf16 check the gradients inside
// the update (which in tf32 and bf16 reads the mirrored ones where backward left them), fp16 in its
// loss-scaling pass. A NaN injected into every gradient of step 4 must stop fp32, tf32 and bf16 with
// the iteration named; fp16 skips that step and halves its scale instead, and leaves the step's NaN
// loss out of the displayed and epoch means (a skipped step is not divergence).
TEST(TrainerPrecision, InjectedNonFiniteGradientsAreCaughtInEveryPrecision) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NetSpec& spec = small_net();
  auto train = small_train_set();
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    auto backend = make_backend("gpu:0", 0, p);
    Trainer trainer(spec, *backend, train, nullptr, SolverConfig{}, short_run(p), {}, {}, TrainFaults{4});
    if (p == Precision::FP16) {
      const TrainResult r = trainer.run();
      EXPECT_GE(r.skipped_steps, 1);
      continue;
    }
    try {
      trainer.run();
      ADD_FAILURE() << "the injected non-finite step went unnoticed";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("at iteration 4"), std::string::npos) << e.what();
    }
  }
}

// What fp16 shows of a skipped step's loss, with the loss read every step (display 1) over 16
// steps (4 epochs of 4) and a NaN injected into step 10 or into the last, step 16: a skipped step
// shows none (NaN) and is not divergence; each epoch's loss is the mean of its kept steps, summed in
// f32 on the device as the shown values add up, and NaN for an epoch whose every step was skipped;
// the final loss is the last kept step's. The scale skips steps on its own while it falls from
// 2^16 to what the gradients allow (3 or 4 on an H200 for this net), so the skips are taken from
// what was shown, which must agree with the run's count; by step 9 the scale has long settled, so
// the epoch holding the injected step keeps some steps and tests a mean over kept steps beside a
// skipped one.
TEST(TrainerPrecision, Fp16LeavesSkippedStepsOutOfTheLossItShows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  constexpr int kSteps = 16, kPerEpoch = 4;
  for (int64_t inject : {10, 16}) {
    SCOPED_TRACE(inject);
    auto backend = make_backend("gpu:0", 0, Precision::FP16);
    TrainOptions o = short_run(Precision::FP16);
    o.iterations = kSteps;
    o.display = 1;
    Trainer trainer(small_net(), *backend, small_train_set(), nullptr, SolverConfig{}, o, {}, {}, TrainFaults{inject});
    std::vector<double> shown, epochs;
    TrainCallbacks cb;
    cb.on_display = [&](const DisplayInfo& d) { shown.push_back(d.loss); };
    cb.on_epoch = [&](const EpochInfo& e) { epochs.push_back(e.train_loss); };
    const TrainResult r = trainer.run(cb);
    ASSERT_EQ(shown.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(epochs.size(), static_cast<size_t>(kSteps / kPerEpoch));
    EXPECT_TRUE(std::isnan(shown[inject - 1]));
    int64_t skipped = 0;
    for (double v : shown) skipped += std::isnan(v) ? 1 : 0;
    EXPECT_EQ(skipped, r.skipped_steps);
    double last_kept = std::numeric_limits<double>::quiet_NaN();
    const int injected_epoch = static_cast<int>((inject - 1) / kPerEpoch);
    for (int e = 0; e < kSteps / kPerEpoch; ++e) {
      SCOPED_TRACE("epoch " + std::to_string(e + 1));
      float sum = 0.0f;
      int kept = 0;
      for (int i = kPerEpoch * e; i < kPerEpoch * (e + 1); ++i) {
        if (std::isnan(shown[i])) continue;
        EXPECT_TRUE(std::isfinite(shown[i])) << i;
        sum += static_cast<float>(shown[i]);  // exact: a shown value is one step's f32 loss
        ++kept;
        last_kept = shown[i];
      }
      if (e == injected_epoch) {
        ASSERT_GT(kept, 0) << "the scale was still skipping steps on its own";
      }
      if (kept == 0) {
        EXPECT_TRUE(std::isnan(epochs[e])) << epochs[e];
      } else {
        EXPECT_EQ(epochs[e], static_cast<double>(sum) / kept);
      }
    }
    EXPECT_EQ(r.final_loss, last_kept);
  }
}

}  // namespace
}  // namespace cnnscale
