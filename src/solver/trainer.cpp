// Trainer, setup and the step: options and the global batch checked once, every buffer the step
// touches allocated once, and the step itself (feed, forward, backward with the gradient exchange,
// update) with its pieces, which the phase loops and the window extension reuse.
#include "solver/trainer.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "backend/communicator.hpp"
#include "core/log.hpp"
#include "core/watchdog.hpp"
#include "net/fuse.hpp"
#include "solver/gradient_planning.hpp"
#include "solver/upload_slots.hpp"

namespace cnnscale {

namespace {

// Pinned input buffers on GPU: enough to reach the next display interval (where the loss read
// synchronises anyway) without forcing an extra sync, within a memory budget.
int gpu_slots(int64_t display, size_t batch_bytes) {
  constexpr size_t kBudget = size_t{256} << 20;
  int64_t by_memory = static_cast<int64_t>(kBudget / std::max<size_t>(batch_bytes, 1));
  return static_cast<int>(std::clamp<int64_t>(std::min(display + 2, by_memory), 3, 64));
}

}  // namespace

Trainer::Trainer(const NetSpec& spec, Backend& backend, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, const SolverConfig& solver, TrainOptions options, TrainJob job,
                 TrainMeasurement measurement, TrainFaults faults)
    : backend_(backend),
      train_(std::move(train)),
      test_(std::move(test)),
      options_(std::move(options)),
      job_(std::move(job)),
      measurement_(std::move(measurement)),
      faults_(faults) {
  split_ = plan_batch();
  check_options();
  if (options_.test_batch == 0) options_.test_batch = split_.local;
  if (!options_.device_pool) make_loader();
  iterations_per_epoch_ = loader_ ? loader_->batches_per_epoch() : train_->size() / split_.global;
  total_iterations_ = options_.iterations > 0 ? options_.iterations : options_.epochs * iterations_per_epoch_;

  const DataParallel& dp = job_.parallel;
  std::optional<FusedSpec> fused;
  if (options_.fuse_epilogues) fused.emplace(fuse_epilogues(spec));
  // How the gradient buffers are used, decided once (solver/gradient_planning.hpp): the net's
  // layout first, the update's part once the net is built.
  const GradientRequest request{dp, options_.precision, faults_.inject_nonfinite_at > 0};
  plan_ = plan_gradients(request, backend_);
  net_ = std::make_unique<Net>(fused ? fused->spec : spec, backend_, split_.local, options_.seed,
                               compute_dtype(options_.precision), NetUse::Training, plan_.sum_compute_grads);
  nonfinite_ = backend_.alloc(Shape{1}, DType::I32);
  if (plan_.loss_scaling) {
    overflow_ = backend_.alloc(Shape{1}, DType::I32);
    loss_scale_ = backend_.alloc(Shape{2});
    scale_state_ = backend_.alloc(Shape{3}, DType::I32);
    write_loss_scale({65536.0, 0, 0});  // PyTorch GradScaler's initial scale, 2^16
    net_->set_grad_scale_on_device(loss_scale_);
  }
  step_values_ = backend_.alloc(Shape{2}, DType::I32);
  step_iteration_ = step_values_.view(0, Shape{1});
  step_tag_ = step_values_.view(1, Shape{1});
  net_->set_iteration_on_device(&step_iteration_);
  display_loss_sum_ = backend_.alloc(Shape{1});
  epoch_loss_sum_ = backend_.alloc(Shape{1});
  last_loss_ = backend_.alloc(Shape{1});
  step_loss_ = backend_.alloc(Shape{1});
  backend_.fill(step_loss_, std::numeric_limits<float>::quiet_NaN());  // no step applied yet
  device_comm_ = dynamic_cast<DeviceCommunicator*>(dp.comm);  // null for MPI: busy time is host-measured
  if (dp.comm) {
    net_->set_loss_scale(split_.share);
    net_->set_rank_exchange(dp.exchange);
  }
  plan_update(plan_, request, *net_);
  net_->set_gradient_plan(plan_);  // after set_rank_exchange: plans the gathering layers
  // The exchange attaches to the step as its callback. Without a communicator timing its own
  // stream, the host time in its calls is the communication's busy time.
  if (dp.comm) exchange_ = std::make_unique<GradientExchange>(*net_, *dp.comm, plan_, /*host_timed=*/!device_comm_);
  // The linear scaling rule, applied to the global batch: the schedule starts from the scaled rate.
  SolverConfig scaled = solver;
  scaled.lr = solver.scaled_lr(split_.global);
  solver_ = std::make_unique<SgdSolver>(*net_, scaled, iterations_per_epoch_, total_iterations_);
  if (plan_.update_per_bucket) exchange_->update_per_bucket(*solver_, GradCheck{nonfinite_, step_tag_});
  step_callback_ = exchange_.get();

  const Shape in = net_->input().shape();
  if (in.sample_numel() != train_->sample_shape().numel())
    throw_config("network input {} per sample does not match the data {} ({})", in.with_batch(1).to_string(),
                 train_->sample_shape().to_string(), train_->name());
  if (test_)
    evaluator_ = std::make_unique<Evaluator>(backend_, *net_, spec.name(), test_, job_.parallel, options_.test_batch,
                                             decodes_on_device(*test_));
  checkpoints_ = std::make_unique<TrainCheckpoints>(options_, job_, iterations_per_epoch_, total_iterations_);
  if (options_.device_pool) fill_pool();
  graph_note_ = graph_blocker();
}

Trainer::~Trainer() = default;

// The step is captured only where every replay does what the uncaptured step would: its work only
// queues device ops whose changing inputs are read from device memory.
std::string Trainer::graph_blocker() const {
  if (!backend_.can_capture()) return fmt::format("{} backend: ops run as they are called", backend_.name());
  if (!options_.cuda_graph) return "turned off (--no-graph)";
  if (job_.parallel.comm && !device_comm_) return "the MPI exchange runs on the host";
  if (job_.parallel.size() > 1)
    for (const Layer* layer : net_->layers())
      if (layer->exchanges_on_host())
        return fmt::format("layer '{}' gathers the ranks' batch statistics through the host", layer->name());
  if (!solver_->capturable()) return "the update is one launch per parameter";
  if (faults_.inject_nonfinite_at > 0) return "fault injection";
  return "";
}

void Trainer::drop_graph() {
  graph_.reset();
  steps_since_change_ = 0;
}

// The job's split of the global batch (DataParallel::rank_batches), checked where it was made
// (train's ParallelRun): the global batch is derived from it, never compared with a second copy.
// Without one (a caller that builds a Trainer alone) the global batch is TrainOptions::batch,
// checked here. Either way the training set must hold at least one global batch (device pool or
// loader alike).
Trainer::BatchSplit Trainer::plan_batch() const {
  const DataParallel& dp = job_.parallel;
  BatchSplit split;
  if (dp.rank_batches.empty()) {
    check_global_batch(options_.batch);
    split.global = split.local = options_.batch;
  } else {
    CNNSCALE_CHECK(dp.rank >= 0 && dp.rank < dp.size(), "rank {} of {}", dp.rank, dp.size());
    CNNSCALE_CHECK(dp.size() == 1 || dp.comm, "{} ranks without a communicator", dp.size());
    CNNSCALE_CHECK(!dp.comm || dp.comm->size() == dp.size(), "{} rank batches for {} ranks", dp.size(),
                   dp.comm->size());
    for (size_t r = 0; r < dp.rank_batches.size(); ++r) {
      if (dp.rank_batches[r] < 1)
        throw_config("rank {} was given {} samples per batch: needs >= 1", r, dp.rank_batches[r]);
      if (static_cast<int>(r) < dp.rank) split.shard_begin += dp.rank_batches[r];
      split.global += dp.rank_batches[r];
    }
    split.local = dp.rank_batches[static_cast<size_t>(dp.rank)];
  }
  if (train_->size() < split.global)
    throw_config("batch size {} is larger than {} ({} samples)", split.global, train_->name(), train_->size());
  split.share = static_cast<double>(split.local) / static_cast<double>(split.global);
  split.loss_weight = static_cast<float>(split.share);
  return split;
}

void Trainer::check_options() const {
  // The backend computes in the precision it was made for: a run in another would pair, say, TF32
  // math with fp32's layout and tolerances.
  if (job_.backend_precision)
    CNNSCALE_CHECK(*job_.backend_precision == options_.precision,
                   "the backend was made for {} but the run trains in {}", precision_name(*job_.backend_precision),
                   precision_name(options_.precision));
  if (options_.test_batch < 0) throw_config("--test-batch must be >= 1, got {}", options_.test_batch);
  if ((options_.epochs > 0) == (options_.iterations > 0))
    throw_config("give exactly one of --epochs and --iterations (> 0)");
  if (options_.display < 1) throw_config("--display must be >= 1, got {}", options_.display);
  if (options_.checkpoint_every < 0) throw_config("--checkpoint-every must be >= 0");
  measurement_.check();
  if (options_.graph_copies < 1 || options_.graph_copies > TrainOptions::kMaxGraphCopies)
    throw_config("--graph-copies must be in [1, {}], got {}", TrainOptions::kMaxGraphCopies, options_.graph_copies);
  check_slowdown(job_.parallel.rank, options_.slowdown);
  check_input_decode(options_.input_decode, backend_.device().is_cpu());
  if (options_.slowdown > 1.0 && !backend_.device().is_cpu())
    throw_config("--slowdown emulates a slower CPU rank; GPU ranks are made unequal with --sm-counts");
  check_rebalance_every(options_.rebalance_every);
  check_probe_seconds(options_.probe_seconds);
  if (!(options_.rebalance_hysteresis >= 0 && options_.rebalance_hysteresis < 1))
    throw_config("rebalance hysteresis must be in [0, 1), got {}", options_.rebalance_hysteresis);
  if (!options_.resume.empty() && options_.resume == "auto" && options_.checkpoint_dir.empty())
    throw_config("--resume auto needs --checkpoint-dir");
}

void Trainer::make_loader() {
  LoaderOptions lo;
  lo.batch = split_.global;
  lo.shard_begin = split_.shard_begin;
  lo.shard_count = split_.local;
  lo.seed = options_.seed;
  lo.threads = options_.data_threads;
  lo.augment = options_.augment;
  lo.bytes = decodes_on_device(*train_);
  const auto batch_bytes =
      static_cast<size_t>(split_.local * train_->sample_shape().numel()) * (lo.bytes ? 1 : sizeof(float));
  lo.slots = backend_.device().is_cpu() ? 3 : gpu_slots(options_.display, batch_bytes);
  loader_ = std::make_unique<Loader>(train_, lo, [this](size_t bytes) { return backend_.alloc_host(bytes); });
  train_slots_ = std::make_unique<UploadSlots>(backend_, *loader_, "host sync (input buffers)");
}

bool Trainer::decodes_on_device(const Dataset& d) const {
  using Decode = TrainOptions::InputDecode;
  const bool wanted = options_.input_decode == Decode::Backend ||
                      (options_.input_decode == Decode::Auto && !backend_.device().is_cpu());
  return wanted && d.byte_affine().has_value();
}

void Trainer::fill_pool() {
  const int64_t local = split_.local;
  // Pool batches take consecutive samples: deterministic and independent of any shuffle; a rank
  // takes its slice of each.
  const int64_t pool = std::min<int64_t>(options_.pool_batches, iterations_per_epoch_);
  const Shape data_shape = net_->input().shape();
  std::vector<float> host_data(static_cast<size_t>(data_shape.numel()));
  std::vector<int32_t> host_labels(static_cast<size_t>(local));
  std::vector<int64_t> indices(static_cast<size_t>(local));
  for (int64_t p = 0; p < pool; ++p) {
    for (int64_t i = 0; i < local; ++i) indices[static_cast<size_t>(i)] = p * split_.global + split_.shard_begin + i;
    train_->fill(indices, host_data.data(), host_labels.data());
    pool_data_.push_back(backend_.alloc(data_shape));
    pool_labels_.push_back(backend_.alloc(Shape{local}, DType::I32));
    backend_.upload(host_data.data(), pool_data_.back());
    backend_.upload(host_labels.data(), pool_labels_.back());
    backend_.synchronize();  // the host vectors are refilled next round
  }
}

Trainer::StepScalars Trainer::step_scalars(int64_t t, int64_t solver_iteration, bool warmup) const {
  StepScalars s;
  s.iteration = t;
  s.dropout_seed = static_cast<uint64_t>(t);
  s.solver_iteration = solver_iteration;
  if (options_.device_pool) s.pool_slot = t % static_cast<int64_t>(pool_data_.size());
  s.nonfinite_tag = static_cast<int32_t>(std::min<int64_t>(t + 1, std::numeric_limits<int32_t>::max()));
  s.warmup = warmup;
  return s;
}

// One training step of iteration `s.iteration`, top to bottom. The order is fixed and every random
// choice is a function of the seed and the iteration, which is what makes a resumed CPU run
// bit-identical to an uninterrupted one. Queues work only; the marks split it into timeline phases.
// From forward to update the work is the same every step, its changing values read from device
// memory (write_step_values): where it can be, it is captured once as a CUDA graph, after an
// uncaptured step has made every algorithm choice and buffer, and replayed from then on.
void Trainer::step(const StepScalars& s, double& wait_seconds) {
  PhaseTimer& timer = *phase_timer_;
  set_watchdog_iteration(s.iteration);
  timer.begin(s.iteration, s.warmup);
  begin_comm_busy(s.iteration);
  feed(s, wait_seconds);
  write_step_values(s);
  if (net_->generation() != graph_generation_ || (graph_ && !graph_->valid())) {
    drop_graph();
    graph_generation_ = net_->generation();
  }
  if (graph_note_.empty() && !graph_ && steps_since_change_ >= 1) {
    CaptureOptions how;
    if (step_callback_) how = CaptureOptions{CaptureOptions::Points::Nodes, options_.graph_copies};
    // Capturing enqueues nothing, but the communicator counts the collectives it is handed
    // (note_collective_arrival): they stand for this step's replay; later replays count as many.
    const int64_t arrivals = collective_arrivals();
    try {
      graph_ = backend_.capture(
          [&] {
            graph_phases_.clear();
            graph_brackets_.clear();
            if (device_comm_) device_comm_->begin_captured_brackets();
            step_work(s, nullptr);
            if (device_comm_) graph_brackets_ = device_comm_->captured_brackets();
          },
          how);
      CNNSCALE_CHECK(graph_->timing_points() == graph_phases_.size() + 2 * graph_brackets_.size(),
                     "captured step: {} timing points, {} phases and {} brackets", graph_->timing_points(),
                     graph_phases_.size(), graph_brackets_.size());
      ++graph_captures_;
      graph_collectives_ = collective_arrivals() - arrivals;
      graph_counted_ = true;
    } catch (const Error& e) {
      // Nothing of a failed capture ran and the stream is usable: the run goes on op by op, and
      // says so (results' cuda_graph) rather than ending.
      graph_.reset();
      graph_note_ = fmt::format("capture failed: {}", e.what());
      log::warn("CUDA graph: {}; every step is queued op by op", graph_note_);
    }
  }
  if (graph_) {
    // A copy whose events an unread earlier replay still holds: read the oldest steps until it is
    // free. That waits for the step graph_copies before (with one copy, the previous step) to end on
    // the device, its collectives included: the watchdog watches the wait.
    if (!graph_->ready()) {
      BlockingOp mark("host sync (a captured step's copy)");
      while (!graph_->ready()) {
        CNNSCALE_CHECK(timer.resolve_oldest(), "captured step: no copy free and no step left to read");
        take_resolved_comm_busy();
      }
    }
    const std::vector<std::shared_ptr<TimingEvent>> points = graph_->launch();
    if (!std::exchange(graph_counted_, false)) note_collective_arrivals(graph_collectives_);
    for (const auto& [index, phase] : graph_phases_) timer.mark_at(phase, points.at(index));
    for (const auto& [start, end] : graph_brackets_)
      device_comm_->add_busy_bracket(s.iteration, points.at(start), points.at(end));
    // The last segment (the update) ends with the capture, not at a timing point: its closing mark
    // is recorded behind the replay, as an op-by-op step records it.
    timer.mark(TimelinePhase::Update);
    ++graph_replays_;
  } else {
    step_work(s, &timer);
    ++steps_since_change_;
  }
  end_comm_busy();
  timer.end();
  timer.resolve_ready();  // event queries only: keeps the pending ring short without a sync
  if (graph_) take_resolved_comm_busy();  // lets the replays' copies go as soon as they are read
}

// The step as it reads: forward -> backward (the attached exchange, if any, sending the gradients
// as they are final) -> the job's gradients ready -> update. The marks between the phases are the
// measurement's, handed in (mark_phase), not the step's own.
void Trainer::step_work(const StepScalars& s, PhaseTimer* timer) {
  forward(s);
  mark_phase(TimelinePhase::Forward, timer);
  backward(s, /*exchange=*/true);
  mark_phase(TimelinePhase::Backward, timer);
  if (step_callback_) {
    gradients_ready();
    mark_phase(TimelinePhase::Allreduce, timer);  // the exposed part of the exchange
  }
  inject_fault(s);
  flag_divergence();
  update(s);
  mark_phase(TimelinePhase::Update, timer);
}

// Into `timer`, or (null, while capturing) as the captured work's own timing points.
void Trainer::mark_phase(TimelinePhase phase, PhaseTimer* timer) {
  if (!options_.phase_marks && phase != TimelinePhase::Update) return;
  if (timer) return timer->mark(phase);
  if (phase == TimelinePhase::Update) return;  // closed after each replay, on the stream (step())
  graph_phases_.emplace_back(backend_.capture_timing_point(), phase);
}

// As kernel arguments (fills), never copies from host memory, which may wait for the stream.
void Trainer::write_step_values(const StepScalars& s) {
  CNNSCALE_CHECK(s.iteration >= 0 && s.iteration <= std::numeric_limits<int32_t>::max(),
                 "iteration {} does not fit the device step counter", s.iteration);
  backend_.fill_i32(step_iteration_, static_cast<int32_t>(s.iteration));
  backend_.fill_i32(step_tag_, s.nonfinite_tag);
  solver_->set_rate(s.solver_iteration);
}

void Trainer::feed(const StepScalars& s, double& wait_seconds) {
  PhaseTimer& timer = *phase_timer_;
  if (s.pool_slot >= 0) {
    timer.mark(TimelinePhase::Data);  // no host wait: the batches are on the device
    const auto p = static_cast<size_t>(s.pool_slot);
    backend_.copy(pool_data_[p], net_->input());
    backend_.copy(pool_labels_[p], net_->labels());
    timer.mark(TimelinePhase::H2D);
    return;
  }
  double waited = 0;
  const HostBatch& b = train_slots_->next(waited);
  wait_seconds += waited;
  timer.add_seconds(TimelinePhase::Data, waited);
  timer.mark(TimelinePhase::Data);
  CNNSCALE_CHECK(b.count == split_.local, "training batch of {} samples, expected {}", b.count, split_.local);
  train_slots_->upload(b, *net_);
  timer.mark(TimelinePhase::H2D);
}

void Trainer::forward(const StepScalars& s) {
  const auto t0 = Clock::now();
  net_->forward(Phase::Train, s.dropout_seed);
  slow_down(t0, /*flush=*/true);
}

// With `exchange`, each gradient bucket's allreduce starts as soon as backward has produced it.
// --slowdown: each layer's backward is followed by (slowdown - 1) times its own time idle, so an
// emulated slower rank hands its buckets to the exchange as late as a slower device would.
void Trainer::backward(const StepScalars& s, bool exchange) {
  StepCallback* callback = exchange ? step_callback_ : nullptr;
  update_queued_ = callback && callback->queues_update();
  const bool slowed = options_.slowdown > 1.0;
  if (!callback && !slowed) return net_->backward(s.dropout_seed);
  const BackwardPass pass = callback ? BackwardPass::Exchanged : BackwardPass::Local;
  auto since = Clock::now();
  if (callback) callback->on_backward_begin();
  if (!slowed) {
    net_->backward(s.dropout_seed, callback->after_layer(), pass);
  } else {
    net_->backward(
        s.dropout_seed,
        [&](size_t layer) {
          slow_down(since);
          if (callback) callback->after_layer()(layer);
          since = Clock::now();
        },
        pass);
    slow_down(Clock::now(), /*flush=*/true);
  }
  if (callback) callback->on_backward_end();
}

// The compute stream may go on with the update after this: it sees the job's gradients.
void Trainer::gradients_ready() {
  if (step_callback_) step_callback_->on_gradients_ready();
}

// Divergence check on the device, before the update: every (reduced) gradient, one kernel over
// the flat gradient buffer; or, where the plan's update_checks_gradients, inside the update, over every
// gradient it applies (a frozen parameter's is not read). The loss needs no check of its own: it
// is finite by construction (log of max(p, FLT_MIN)) unless a probability is NaN, and then that
// row's dx = p - onehot and with it the gradients are NaN too. Nothing waits for the flag;
// check_finite() reads it at the next host read.
//
// fp16 dynamic loss scaling, PyTorch GradScaler's rule (backend/loss_scale_rule.hpp), on the
// device: a step whose (exchanged, unscaled) gradients hold an inf or NaN is skipped by the update
// and the scale halved; 2000 clean steps in a row double it. Nothing is read on the host, so the
// step can be captured like the others. Every rank reads the same exchanged gradients, so every
// rank skips the same steps. A step that is not skipped has finite gradients, or overflowed with
// no scale left to halve, which the rule flags as divergence: no other check is needed then.
void Trainer::flag_divergence() {
  if (plan_.update_checks_gradients || update_queued_) return;  // the update checks them as it reads them
  if (!overflow_.defined()) return backend_.flag_nonfinite_at(net_->flat_grads(), step_tag_, nonfinite_);
  constexpr int64_t kGrowthInterval = 2000;
  constexpr float kMaxScale = 16777216.0f;  // 2^24
  backend_.fill_i32(overflow_, 0);
  backend_.flag_nonfinite(net_->flat_grads(), 1, overflow_);
  backend_.update_loss_scale(overflow_, loss_scale_, scale_state_, step_tag_, nonfinite_, kGrowthInterval, kMaxScale);
}

// --inject-nonfinite: the step's loss and every gradient NaN, as a diverging step leaves them.
void Trainer::inject_fault(const StepScalars& s) {
  if (faults_.inject_nonfinite_at != s.iteration + 1) return;
  backend_.fill(net_->loss(), std::numeric_limits<float>::quiet_NaN());
  backend_.fill(net_->flat_grads(), std::numeric_limits<float>::quiet_NaN());
  if (net_->update_reads_mirror_grads())
    backend_.fill(net_->flat_mirror_grads(), std::numeric_limits<float>::quiet_NaN());
}

LossScaleFigures Trainer::read_loss_scale() {
  if (!overflow_.defined()) return {};
  float scale[2];
  int32_t state[3];
  BlockingOp mark("loss scale download");
  backend_.download(loss_scale_, scale);
  backend_.download(scale_state_, state);
  return {scale[0], state[0], state[1]};
}

void Trainer::write_loss_scale(const LossScaleFigures& f) {
  const float scale[2] = {static_cast<float>(f.scale), static_cast<float>(1.0 / f.scale)};
  const int32_t state[3] = {static_cast<int32_t>(f.clean_steps), static_cast<int32_t>(f.skipped_steps), 0};
  backend_.upload(scale, loss_scale_);
  backend_.upload(state, scale_state_);
}

void Trainer::update(const StepScalars&) {
  if (std::exchange(update_queued_, false)) return solver_->parts_applied();
  // At the rate write_step_values set; fp16: not at all in a step the loss scale skips.
  solver_->apply(overflow_.defined() ? scale_state_.view(2, Shape{1}) : Tensor(),
                 plan_.update_checks_gradients ? GradCheck{nonfinite_, step_tag_} : GradCheck());
}

void Trainer::host_sync(const char* operation) {
  BlockingOp mark(operation);
  backend_.synchronize();
}

float Trainer::read_scalar(const Tensor& t, const char* operation) {
  if (job_.parallel.comm) job_.parallel.comm->allreduce_sum(t);
  BlockingOp mark(operation);
  float value = 0;
  backend_.download(t, &value);
  return value;
}

double Trainer::read_last_loss() {
  // A single process reads its loss as it is (its share is exactly 1).
  if (!job_.parallel.comm) return read_scalar(step_loss_, "loss download");
  backend_.fill(last_loss_, 0.0f);
  backend_.axpby(split_.loss_weight, step_loss_, 1.0f, last_loss_);
  return read_scalar(last_loss_, "loss download");
}

void Trainer::check_finite() {
  int32_t first = 0;
  {
    BlockingOp mark("divergence flag download");
    backend_.download(nonfinite_, &first);
  }
  if (first != 0)
    throw_runtime(
        "training diverged: non-finite loss or gradient at iteration {} (nothing was saved from it; the newest "
        "checkpoint, if any, is from before; try a lower --lr)",
        first);
}

}  // namespace cnnscale
