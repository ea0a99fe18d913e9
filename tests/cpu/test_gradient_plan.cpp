// The gradient plan (net/gradient_plan.hpp, solver/gradient_planning.hpp): decided in one place
// from the job, the precision and what the update can do, and refused where a combination cannot
// work; the net, the buckets and the solver follow it.
#include <gtest/gtest.h>

#include "backend/backend.hpp"
#include "net/gradient_plan.hpp"
#include "net/net.hpp"
#include "parallel/gradient_buckets.hpp"
#include "solver/gradient_planning.hpp"
#include "solver/sgd_solver.hpp"

namespace cnnscale {
namespace {

const char* kPlanNet = R"(name: plan
input: {shape: [1, 8, 8], classes: 3}
layers:
  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 4, kernel: 3, weight_filler: {type: xavier}}
  - {name: fc1, type: InnerProduct, bottom: conv1, top: fc1, num_output: 3, weight_filler: {type: xavier}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc1, label], top: loss}
)";

// A communicator that is only ever asked who it is: the plan needs one to exist.
class IdleCommunicator final : public Communicator {
 public:
  std::string name() const override { return "idle"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum_async(const Tensor&) override {}
  void allgather_async(const Tensor&, const Tensor&) override {}
  void wait() override {}
  void synchronize_host() override {}
  void abort() override {}
};

struct Planned {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  NetSpec spec = NetSpec::load_string(kPlanNet, "plan.yaml");
  std::unique_ptr<Net> net;
  GradientPlan plan;
  // Both steps, as the Trainer takes them, with the net built between.
  Planned(const DataParallel& dp, Precision precision, bool faults = false) {
    const GradientRequest request{dp, precision, faults};
    plan = plan_gradients(request, *backend);
    net = std::make_unique<Net>(spec, *backend, 4, 1, DType::F32, NetUse::Training, plan.sum_compute_grads);
    plan_update(plan, request, *net);
  }
};

TEST(GradientPlan, ASingleProcessUpdateChecksItsGradientsAsItReadsThem) {
  const Planned p(DataParallel{}, Precision::FP32);
  EXPECT_FALSE(p.plan.exchange);
  EXPECT_TRUE(p.plan.update_checks_gradients);
  EXPECT_FALSE(p.plan.update_per_bucket);
  EXPECT_EQ(p.plan.update_reads_mirror_grads, SgdSolver::abilities(*p.net).reads_mirror_grads);
}

TEST(GradientPlan, AnExchangeOfF32GradientsUpdatesPerBucketUnlessLossScalingOrFaults) {
  IdleCommunicator comm;
  DataParallel dp;
  dp.comm = &comm;
  dp.rank_batches = {2, 2};
  dp.bucket_bytes = 1000;
  dp.overlap = false;
  const Planned f32(dp, Precision::FP32);
  EXPECT_TRUE(f32.plan.exchange);
  EXPECT_EQ(f32.plan.bucket_bytes, 1000);
  EXPECT_FALSE(f32.plan.overlap);
  EXPECT_TRUE(f32.plan.update_per_bucket);
  EXPECT_FALSE(f32.plan.update_checks_gradients) << "the exchange reads the f32 gradients first";
  EXPECT_FALSE(f32.plan.update_reads_mirror_grads);
  EXPECT_FALSE(f32.plan.sum_compute_grads) << "only where the exchange sums bf16 compute gradients";
  // fp16's skip is decided from every gradient: one update after the whole exchange.
  const Planned f16(dp, Precision::FP16);
  EXPECT_TRUE(f16.plan.loss_scaling);
  EXPECT_FALSE(f16.plan.update_per_bucket);
  EXPECT_FALSE(f16.plan.update_checks_gradients);
  // Fault injection poisons the gradients after the exchange, where a part already applied them.
  EXPECT_FALSE(Planned(dp, Precision::FP32, /*faults=*/true).plan.update_per_bucket);
  dp.update_per_bucket = false;
  EXPECT_FALSE(Planned(dp, Precision::FP32).plan.update_per_bucket);
}

TEST(GradientPlan, GatheringIsPlannedAtTheLargestShare) {
  IdleCommunicator comm;
  DataParallel dp;
  dp.comm = &comm;
  dp.rank_batches = {3, 5};
  dp.gather_gradients = true;
  const Planned p(dp, Precision::FP32);
  EXPECT_TRUE(p.plan.gather_gradients);
  EXPECT_EQ(p.plan.gather_rows, 5);
  dp.rank_batches = {4};  // one rank: nothing to gather from
  EXPECT_FALSE(Planned(dp, Precision::FP32).plan.gather_gradients);
}

TEST(GradientPlan, IllegalCombinationsAreRefused) {
  GradientPlan ok;
  EXPECT_NO_THROW(ok.check());
  auto refused = [](auto change) {
    GradientPlan p;
    change(p);
    EXPECT_THROW(p.check(), Error);
  };
  refused([](GradientPlan& p) { p.update_per_bucket = true; });  // no exchange
  refused([](GradientPlan& p) { p.gather_gradients = true; });   // no exchange
  refused([](GradientPlan& p) {  // summed in place in f32
    p.exchange = true;
    p.sum_compute_grads = true;
    p.update_reads_mirror_grads = true;
  });
  refused([](GradientPlan& p) {  // the skip is decided after the update checked the gradients
    p.loss_scaling = true;
    p.update_checks_gradients = true;
  });
  refused([](GradientPlan& p) {  // the exchange reads the f32 gradients after the update did
    p.exchange = true;
    p.update_reads_mirror_grads = true;
  });
  refused([](GradientPlan& p) {
    p.exchange = true;
    p.exchange_dtype = DType::I32;
  });
}

TEST(GradientPlan, TheNetTakesItOnceAndTheBucketsNeedAnExchange) {
  auto backend = make_backend("cpu");
  const NetSpec spec = NetSpec::load_string(kPlanNet, "plan.yaml");
  Net net(spec, *backend, 4, 1);
  GradientPlan plan;
  net.set_gradient_plan(plan);
  EXPECT_THROW(net.set_gradient_plan(plan), Error);
  IdleCommunicator comm;
  EXPECT_THROW(GradientBuckets(net, comm, plan), Error);
  GradientPlan in_place;  // the net keeps no copies at its masters' offsets
  in_place.exchange = true;
  in_place.exchange_dtype = DType::BF16;
  in_place.sum_compute_grads = true;
  in_place.update_reads_mirror_grads = true;
  Net other(spec, *backend, 4, 1);
  EXPECT_THROW(other.set_gradient_plan(in_place), Error);
}

}  // namespace
}  // namespace cnnscale
