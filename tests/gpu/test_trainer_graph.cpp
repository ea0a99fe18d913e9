// CUDA graphs in training: a Trainer whose steps replay a captured graph trains to exactly the
// weights of one that queues every op (deterministic algorithms on both sides), in fp32, bf16 and
// fp16 (whose loss scale moves on the device), with dropout and batch norm, and with a one-rank
// data-parallel exchange (bucketed, updated per bucket, bf16 sums in place).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"  // a deterministic backend for the bit-for-bit comparison
#include "backend/cuda/cuda_entry.hpp"    // a one-rank NCCL communicator
#include "backend/communicator.hpp"
#endif
#include "common/layer_harness.hpp"
#include "core/rng.hpp"
#include "data/synthetic_dataset.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"
#include "graph_test_util.hpp"

namespace cnnscale {
namespace {

using testing::fill_uniform;
using testing::to_host;

using namespace graph_test;

#if CNNSCALE_HAVE_CUDA
// Final master weights and momentum of a run.
struct RunOutcome {
  std::vector<float> weights;
  TrainResult result;
  bool per_bucket = false, in_place = false;  // Trainer::updates_per_bucket, exchanges_compute_grads
};

// Runs compared bit for bit share one deterministic backend: cuDNN's algorithms are chosen by
// timing the first time a shape is seen and kept per backend, so two backends may choose two
// (each deterministic) algorithms with different rounding.
std::unique_ptr<CudaBackend> deterministic_backend() {
  CudaBackendOptions opts;
  opts.deterministic = true;
  return std::make_unique<CudaBackend>(0, opts);
}

// With `comm`: data parallel over it, the one rank taking the whole batch, in gradient buckets small
// enough that several allreduces are issued during backward.
RunOutcome train_once(CudaBackend& backend, const std::string& net, Precision precision, bool graph,
                      Communicator* comm = nullptr, DType exchange = DType::F32, bool update_per_bucket = true,
                      bool in_place = false) {
  const NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/" + net);
  auto train = std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 256, SyntheticFill::Gaussian, 3);
  auto test = std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 64, SyntheticFill::Gaussian, 4);
  TrainOptions o;
  o.batch = 32;
  o.iterations = 12;
  o.display = 4;
  o.precision = precision;
  o.cuda_graph = graph;
  TrainJob job;
  if (comm) {
    job.parallel.comm = comm;
    job.parallel.rank_batches = {o.batch};
    job.parallel.bucket_bytes = int64_t{64} << 10;
    job.parallel.exchange_dtype = exchange;
    job.parallel.update_per_bucket = update_per_bucket;
    job.parallel.exchange_compute_grads = in_place;
  }
  SolverConfig solver;
  solver.policy = LrPolicy::Step;
  solver.step_epochs = 0.5;  // 8 iterations per epoch: the rate halves every 4, between replays
  solver.gamma = 0.5;
  Trainer trainer(spec, backend, train, test, solver, o, job);
  RunOutcome out;
  out.result = trainer.run();
  out.weights = to_host(backend, trainer.net().flat_params());
  out.per_bucket = trainer.updates_per_bucket();
  out.in_place = trainer.exchanges_compute_grads();
  return out;
}

// A graphed run of train_once against the same run queued op by op: the first step runs uncaptured
// (every algorithm choice and buffer made), the other 11 replay, and both train to the same bits;
// fp16's device-side loss scale skips the same steps and ends at the same scale.
void expect_replayed_as_queued(const RunOutcome& eager, const RunOutcome& graphed) {
  EXPECT_EQ(graphed.result.graph_note, "");
  EXPECT_EQ(graphed.result.graph_captures, 1);
  EXPECT_EQ(graphed.result.graph_replays, 11);
  EXPECT_TRUE(same_bits(eager.weights, graphed.weights));
  EXPECT_EQ(eager.result.final_loss, graphed.result.final_loss);
  EXPECT_EQ(eager.result.skipped_steps, graphed.result.skipped_steps);
  EXPECT_EQ(eager.result.final_grad_scale, graphed.result.final_grad_scale);
}

TEST(TrainerGraph, GraphedStepsTrainExactlyAsStepsQueuedOpByOp) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  for (const char* net : {"train_lenet_dropout.yaml", "dist_convnet_bn.yaml"})
    for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16}) {
      SCOPED_TRACE(std::string(net) + " " + precision_name(p));
      auto backend = deterministic_backend();
      const RunOutcome eager = train_once(*backend, net, p, false);
      const RunOutcome graphed = train_once(*backend, net, p, true);
      EXPECT_EQ(eager.result.graph_replays, 0);
      EXPECT_EQ(eager.result.graph_note, "turned off (--no-graph)");
      expect_replayed_as_queued(eager, graphed);
      if (p == Precision::FP16)
        std::printf("%s fp16: %lld skipped steps, final scale %g\n", net,
                    static_cast<long long>(graphed.result.skipped_steps), graphed.result.final_grad_scale);
      ASSERT_TRUE(graphed.result.test.has_value());
      EXPECT_EQ(eager.result.test->top1, graphed.result.test->top1);
      // The phases inside the graph are still timed per iteration.
      const PhaseSummary& ps = graphed.result.phase_summary;
      EXPECT_GT(ps.mean_seconds[static_cast<size_t>(TimelinePhase::Forward)], 0.0);
      EXPECT_GT(ps.mean_seconds[static_cast<size_t>(TimelinePhase::Backward)], 0.0);
      EXPECT_GT(ps.mean_seconds[static_cast<size_t>(TimelinePhase::Update)], 0.0);
      EXPECT_EQ(graphed.result.phases.size(), eager.result.phases.size());
    }
}

// Forwards to a real communicator and counts the busy brackets replays hand it.
class CountingCommunicator final : public DeviceCommunicator {
 public:
  explicit CountingCommunicator(DeviceCommunicator& c) : c_(c) {}
  std::string name() const override { return c_.name(); }
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void allreduce_sum_async(const Tensor& t) override { c_.allreduce_sum_async(t); }
  void allgather_async(const Tensor& mine, const Tensor& all) override { c_.allgather_async(mine, all); }
  void wait() override { c_.wait(); }
  void wait_collectives() override { c_.wait_collectives(); }
  void after_collectives(const std::function<void()>& work) override { c_.after_collectives(work); }
  void synchronize_host() override { c_.synchronize_host(); }
  void abort() override { c_.abort(); }
  int record_timestamp() override { return c_.record_timestamp(); }
  double elapsed_ms(int from, int to) override { return c_.elapsed_ms(from, to); }
  void clear_timestamps() override { c_.clear_timestamps(); }
  void set_busy_tag(std::int64_t tag) override { c_.set_busy_tag(tag); }
  using DeviceCommunicator::take_busy_ms;
  std::vector<std::pair<std::int64_t, double>> take_busy_ms(std::int64_t up_to) override {
    return c_.take_busy_ms(up_to);
  }
  void begin_captured_brackets() override { c_.begin_captured_brackets(); }
  std::vector<std::pair<size_t, size_t>> captured_brackets() const override { return c_.captured_brackets(); }
  void add_busy_bracket(std::int64_t tag, std::shared_ptr<TimingEvent> a, std::shared_ptr<TimingEvent> b) override {
    ++added;
    c_.add_busy_bracket(tag, std::move(a), std::move(b));
  }
  int added = 0;

 private:
  DeviceCommunicator& c_;
};

// Data parallel on NCCL, one rank: its collectives run on the communication stream as in a job of
// several. The bucketed allreduces are captured with the step (event-node timing points), and the
// replays train to the same bits as steps queued op by op, with every phase, the exposed exchange
// and the communication stream's busy time still timed per step.
TEST(TrainerGraph, DataParallelStepsAreCapturedWithTheirBucketedExchange) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const std::pair<Precision, DType> cases[] = {{Precision::FP32, DType::F32},
                                               {Precision::BF16, DType::F32},
                                               {Precision::BF16, DType::BF16},
                                               {Precision::FP16, DType::F16}};
  for (auto [p, exchange] : cases) {
    SCOPED_TRACE(std::string(precision_name(p)) + ", exchange " + dtype_name(exchange));
    auto backend = deterministic_backend();
    std::unique_ptr<DeviceCommunicator> nccl =
        make_nccl_communicator(*backend, 0, 1, nccl_unique_id(), AllreduceAlgo::Auto, 60.0);
    CountingCommunicator comm(*nccl);
    const RunOutcome eager = train_once(*backend, "dist_convnet_bn.yaml", p, false, &comm, exchange);
    EXPECT_EQ(comm.added, 0);
    const RunOutcome graphed = train_once(*backend, "dist_convnet_bn.yaml", p, true, &comm, exchange);
    expect_replayed_as_queued(eager, graphed);
    // Each replay handed its own events of every captured bucket's busy bracket to the
    // communicator, and the trainer read them all (a one-rank in-place sum is no kernel, so the
    // busy time itself may read 0 here; tests/gpu/multigpu times real ones).
    const size_t brackets = comm.captured_brackets().size();
    EXPECT_GE(brackets, 2u) << "several buckets per step";
    EXPECT_EQ(comm.added, static_cast<int>(11 * brackets));
    EXPECT_TRUE(comm.take_busy_ms().empty()) << "every bracket was read during the run";
    ASSERT_EQ(graphed.result.phases.size(), eager.result.phases.size());
    // fp16 updates after the exchange; the others bucket by bucket on the communicator's side
    // stream, which leaves the update phase nothing but the join (it may read 0).
    const bool per_bucket = p != Precision::FP16;
    for (const IterationPhases& it : graphed.result.phases) {
      SCOPED_TRACE(it.iteration);
      EXPECT_GT(it.seconds[static_cast<size_t>(TimelinePhase::Forward)], 0.0);
      EXPECT_GT(it.seconds[static_cast<size_t>(TimelinePhase::Backward)], 0.0);
      if (per_bucket)
        EXPECT_GE(it.seconds[static_cast<size_t>(TimelinePhase::Update)], 0.0);
      else
        EXPECT_GT(it.seconds[static_cast<size_t>(TimelinePhase::Update)], 0.0);
      EXPECT_GT(it.total, 0.0);
    }
  }
}

// The update per bucket (DataParallel::update_per_bucket) on NCCL: each bucket's part of the update
// queued on the communicator's side stream as its allreduce ends, beside the rest of backward,
// widening a 16-bit exchange's sums there too. Queued op by op and replayed from a graph (the side
// stream forked into the capture and joined back), it trains to the bits of the one update after
// the exchange.
TEST(TrainerGraph, UpdatePerBucketTrainsAsTheUpdateAfterTheExchange) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const std::pair<Precision, DType> cases[] = {
      {Precision::FP32, DType::F32}, {Precision::BF16, DType::F32}, {Precision::BF16, DType::BF16}};
  for (auto [p, exchange] : cases) {
    SCOPED_TRACE(std::string(precision_name(p)) + ", exchange " + dtype_name(exchange));
    auto backend = deterministic_backend();
    std::unique_ptr<DeviceCommunicator> comm =
        make_nccl_communicator(*backend, 0, 1, nccl_unique_id(), AllreduceAlgo::Auto, 60.0);
    const RunOutcome after = train_once(*backend, "dist_convnet_bn.yaml", p, false, comm.get(), exchange, false);
    const RunOutcome per = train_once(*backend, "dist_convnet_bn.yaml", p, false, comm.get(), exchange, true);
    const RunOutcome per_graphed = train_once(*backend, "dist_convnet_bn.yaml", p, true, comm.get(), exchange, true);
    EXPECT_FALSE(after.per_bucket);
    EXPECT_TRUE(per.per_bucket && per_graphed.per_bucket);
    EXPECT_TRUE(same_bits(after.weights, per.weights));
    EXPECT_EQ(after.result.final_loss, per.result.final_loss);
    expect_replayed_as_queued(per, per_graphed);
  }
}

// --allreduce-dtype compute in bf16: the net keeps its compute copies at the masters' offsets and
// the exchange sums backward's bf16 gradients where they lie (batch norm's f32 ones rounded into
// their slots), the update reading them there. The sums are those of the bf16 exchange of the f32
// gradients (backward's bf16 values widened, then rounded back), so it trains to the same bits,
// with one update after the exchange or one per bucket, queued op by op or replayed.
TEST(TrainerGraph, ComputeGradientsSummedInPlaceTrainAsTheBf16Exchange) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto backend = deterministic_backend();
  std::unique_ptr<DeviceCommunicator> comm =
      make_nccl_communicator(*backend, 0, 1, nccl_unique_id(), AllreduceAlgo::Auto, 60.0);
  const char* net = "dist_convnet_bn.yaml";
  const RunOutcome f32_path = train_once(*backend, net, Precision::BF16, false, comm.get(), DType::BF16, false, false);
  const RunOutcome after = train_once(*backend, net, Precision::BF16, false, comm.get(), DType::BF16, false, true);
  const RunOutcome per = train_once(*backend, net, Precision::BF16, false, comm.get(), DType::BF16, true, true);
  const RunOutcome graphed = train_once(*backend, net, Precision::BF16, true, comm.get(), DType::BF16, true, true);
  EXPECT_FALSE(f32_path.in_place);
  EXPECT_TRUE(after.in_place && !after.per_bucket);
  EXPECT_TRUE(per.in_place && per.per_bucket && graphed.in_place);
  EXPECT_TRUE(same_bits(f32_path.weights, after.weights));
  EXPECT_TRUE(same_bits(f32_path.weights, per.weights));
  EXPECT_EQ(f32_path.result.final_loss, per.result.final_loss);
  expect_replayed_as_queued(per, graphed);
  ASSERT_TRUE(per.result.test.has_value() && f32_path.result.test.has_value());
  EXPECT_EQ(per.result.test->top1, f32_path.result.test->top1);
}

#endif  // CNNSCALE_HAVE_CUDA

}  // namespace
}  // namespace cnnscale
