// Trainer implementation. The order of work in one iteration is fixed (feed, forward, backward,
// update, loss accumulation on the device), and every random choice is a function of the seed and
// the iteration, which is what makes a resumed CPU run bit-identical to an uninterrupted one.
#include "solver/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "parallel/stop_vote.hpp"
#include "core/watchdog.hpp"
#include "measure/energy_window.hpp"
#include "backend/communicator.hpp"

namespace cnnscale {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Pinned input buffers on GPU: enough to reach the next display interval (where the loss read
// synchronises anyway) without forcing an extra sync, within a memory budget.
int gpu_slots(int64_t display, size_t batch_bytes) {
  constexpr size_t kBudget = size_t{256} << 20;
  int64_t by_memory = static_cast<int64_t>(kBudget / std::max<size_t>(batch_bytes, 1));
  return static_cast<int>(std::clamp<int64_t>(std::min(display + 2, by_memory), 3, 64));
}

}  // namespace

Trainer::Trainer(const NetSpec& spec, Backend& backend, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, const SolverConfig& solver, TrainOptions options)
    : backend_(backend), train_(std::move(train)), test_(std::move(test)), options_(std::move(options)) {
  if (options_.batch < 1) throw_config("--batch must be >= 1, got {}", options_.batch);
  if (options_.test_batch < 0) throw_config("--test-batch must be >= 1, got {}", options_.test_batch);
  const DataParallel& dp = options_.parallel;
  local_batch_ = options_.batch;
  if (!dp.rank_batches.empty()) {
    CNNSCALE_CHECK(dp.rank >= 0 && dp.rank < dp.size(), "rank {} of {}", dp.rank, dp.size());
    CNNSCALE_CHECK(dp.size() == 1 || dp.comm, "{} ranks without a communicator", dp.size());
    CNNSCALE_CHECK(!dp.comm || dp.comm->size() == dp.size(), "{} rank batches for {} ranks", dp.size(),
                   dp.comm->size());
    int64_t sum = 0;
    for (size_t r = 0; r < dp.rank_batches.size(); ++r) {
      if (dp.rank_batches[r] < 1)
        throw_config("rank {} was given {} samples per batch: needs >= 1", r, dp.rank_batches[r]);
      if (static_cast<int>(r) < dp.rank) shard_begin_ += dp.rank_batches[r];
      sum += dp.rank_batches[r];
    }
    if (sum != options_.batch)
      throw_config("the per-rank batches add up to {}, not to the global batch {}", sum, options_.batch);
    local_batch_ = dp.rank_batches[static_cast<size_t>(dp.rank)];
  }
  // Exactly 1.0f in a single process, so its arithmetic is unchanged.
  loss_share_ = static_cast<float>(static_cast<double>(local_batch_) / static_cast<double>(options_.batch));
  if (options_.test_batch == 0) options_.test_batch = local_batch_;
  if ((options_.epochs > 0) == (options_.iterations > 0))
    throw_config("give exactly one of --epochs and --iterations (> 0)");
  if (options_.display < 1) throw_config("--display must be >= 1, got {}", options_.display);
  if (options_.checkpoint_every < 0) throw_config("--checkpoint-every must be >= 0");
  if (!(options_.min_window_seconds >= 0)) throw_config("--min-window must be >= 0 seconds");
  if (!(options_.phase_window_seconds > 0)) throw_config("--phase-window must be > 0 seconds");
  if (options_.phase_repeats < 1) throw_config("--phase-repeats must be >= 1, got {}", options_.phase_repeats);
  if (!options_.resume.empty() && options_.resume == "auto" && options_.checkpoint_dir.empty())
    throw_config("--resume auto needs --checkpoint-dir");

  const int64_t batch_bytes = local_batch_ * train_->sample_shape().numel() * 4;
  if (options_.device_pool) {
    iterations_per_epoch_ = train_->size() / options_.batch;
    if (iterations_per_epoch_ < 1)
      throw_config("batch size {} is larger than {} ({} samples)", options_.batch, train_->name(), train_->size());
  } else {
    LoaderOptions lo;
    lo.batch = options_.batch;
    lo.shard_begin = shard_begin_;
    lo.shard_count = local_batch_;
    lo.seed = options_.seed;
    lo.slots = backend_.device().is_cpu() ? 3 : gpu_slots(options_.display, static_cast<size_t>(batch_bytes));
    loader_ = std::make_unique<Loader>(train_, lo, [this](size_t bytes) { return backend_.alloc_host(bytes); });
    iterations_per_epoch_ = loader_->batches_per_epoch();
  }
  total_iterations_ = options_.iterations > 0 ? options_.iterations : options_.epochs * iterations_per_epoch_;

  net_ = std::make_unique<Net>(spec, backend_, local_batch_, options_.seed);
  nonfinite_ = backend_.alloc(Shape{1}, DType::I32);
  device_comm_ = dynamic_cast<DeviceCommunicator*>(dp.comm);  // null for MPI: busy time is host-measured
  if (dp.comm) {
    net_->set_loss_scale(static_cast<double>(local_batch_) / static_cast<double>(options_.batch));
    net_->set_rank_exchange(dp.exchange);
    buckets_ = std::make_unique<GradientBuckets>(*net_, *dp.comm, dp.bucket_bytes, dp.overlap);
  }
  solver_ = std::make_unique<SgdSolver>(*net_, solver, iterations_per_epoch_, total_iterations_);

  const Shape in = net_->input().shape();
  if (in.sample_numel() != train_->sample_shape().numel())
    throw_config("network input {} per sample does not match the data {} ({})", in.with_batch(1).to_string(),
                 train_->sample_shape().to_string(), train_->name());
  for (Layer* layer : net_->layers())
    if (layer->type() == "SoftmaxWithLoss" && !layer->bottoms().empty()) scores_blob_ = layer->bottoms()[0];
  if (test_ && scores_blob_.empty())
    throw_config("network '{}' has no SoftmaxWithLoss layer: cannot evaluate top-1/top-5", spec.name());

  if (options_.device_pool) {
    // Pool batches take consecutive samples: deterministic and independent of any shuffle; a
    // rank takes its slice of each.
    const int64_t pool = std::min<int64_t>(options_.pool_batches, iterations_per_epoch_);
    const Shape data_shape = net_->input().shape();
    std::vector<float> host_data(static_cast<size_t>(data_shape.numel()));
    std::vector<int32_t> host_labels(static_cast<size_t>(local_batch_));
    std::vector<int64_t> indices(static_cast<size_t>(local_batch_));
    for (int64_t p = 0; p < pool; ++p) {
      for (int64_t i = 0; i < local_batch_; ++i)
        indices[static_cast<size_t>(i)] = p * options_.batch + shard_begin_ + i;
      train_->fill(indices, host_data.data(), host_labels.data());
      pool_data_.push_back(backend_.alloc(data_shape));
      pool_labels_.push_back(backend_.alloc(Shape{local_batch_}, DType::I32));
      backend_.upload(host_data.data(), pool_data_.back());
      backend_.upload(host_labels.data(), pool_labels_.back());
      backend_.synchronize();  // the host vectors are refilled next round
    }
  }
}

Trainer::~Trainer() = default;

void Trainer::release_uploaded() {
  for (int slot : uploaded_slots_) loader_->release(slot);
  uploaded_slots_.clear();
}

void Trainer::feed(int64_t iteration, double& wait_seconds) {
  PhaseTimer& timer = *phase_timer_;
  if (options_.device_pool) {
    timer.mark(StepPhase::Data);  // no host wait: the batches are on the device
    const size_t p = static_cast<size_t>(iteration % static_cast<int64_t>(pool_data_.size()));
    backend_.copy(pool_data_[p], net_->input());
    backend_.copy(pool_labels_[p], net_->labels());
    timer.mark(StepPhase::H2D);
    return;
  }
  const bool async_upload = !backend_.device().is_cpu();
  // Every buffer but one waits for its upload: sync so the loader can refill them.
  if (async_upload && static_cast<int>(uploaded_slots_.size()) >= loader_->options().slots - 1) {
    host_sync("host sync (input buffers)");
    release_uploaded();
  }
  auto t0 = Clock::now();
  const HostBatch& b = loader_->next();
  const double waited = seconds_since(t0);
  wait_seconds += waited;
  timer.add_seconds(StepPhase::Data, waited);
  timer.mark(StepPhase::Data);
  CNNSCALE_CHECK(b.count == local_batch_, "training batch of {} samples, expected {}", b.count, local_batch_);
  backend_.upload(b.data, net_->input());
  backend_.upload(b.labels, net_->labels());
  timer.mark(StepPhase::H2D);
  if (async_upload)
    uploaded_slots_.push_back(b.slot);
  else
    loader_->release(b.slot);  // the CPU copy is complete when upload returns
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

void Trainer::host_sync(const char* operation) {
  BlockingOp mark(operation);
  backend_.synchronize();
}

double Trainer::read_last_loss() {
  // A single process reads its loss as it is (its share is exactly 1).
  if (!options_.parallel.comm) return read_scalar(net_->loss(), "loss download");
  Tensor last = backend_.alloc(Shape{1});
  backend_.axpby(loss_share_, net_->loss(), 1.0f, last);
  return read_scalar(last, "loss download");
}

float Trainer::read_scalar(const Tensor& t, const char* operation) {
  if (options_.parallel.comm) options_.parallel.comm->allreduce_sum(t);
  BlockingOp mark(operation);
  float value = 0;
  backend_.download(t, &value);
  return value;
}

// Backward with the gradient exchange: each bucket's allreduce starts as soon as backward has
// produced it; the solver's update is queued behind wait(), so it sees the job's gradients.
// Marks the end of backward and of the exposed allreduce: after wait() the compute stream may go on
// with the update. On CPU (MPI) the host time inside the communication calls is the comm_busy phase.
void Trainer::exchange_gradients_backward(int64_t iteration) {
  PhaseTimer& timer = *phase_timer_;
  const bool host_busy = device_comm_ == nullptr;
  double busy = 0;
  auto timed = [&](auto&& call) {
    if (!host_busy) return call();
    const auto t0 = Clock::now();
    call();
    busy += seconds_since(t0);
  };
  timed([&] { buckets_->begin_backward(); });
  net_->backward(static_cast<uint64_t>(iteration), [&](size_t layer) { timed([&] { buckets_->layer_done(layer); }); });
  timed([&] { buckets_->end_backward(); });
  timer.mark(StepPhase::Backward);
  timed([&] { options_.parallel.comm->wait(); });
  timer.mark(StepPhase::Allreduce);
  if (host_busy) timer.add_seconds(StepPhase::CommBusy, busy);
}

void Trainer::resolve_phases() {
  // Only after a synchronisation: the communication stream has passed every bracket then.
  phase_timer_->resolve_all();
  if (device_comm_)
    for (auto [iteration, ms] : device_comm_->take_busy_ms()) phase_timer_->add_comm_busy(iteration, ms / 1e3);
}

void Trainer::step(int64_t t, int64_t solver_iteration, bool warmup, double& wait_seconds) {
  PhaseTimer& timer = *phase_timer_;
  set_watchdog_iteration(t);
  timer.begin(t, warmup);
  // Bracket only the step's collectives, not the loss reads and evaluation between steps.
  if (device_comm_) device_comm_->set_busy_tag(t);
  feed(t, wait_seconds);
  net_->forward(Phase::Train, static_cast<uint64_t>(t));
  timer.mark(StepPhase::Forward);
  if (buckets_) {
    exchange_gradients_backward(t);
  } else {
    net_->backward(static_cast<uint64_t>(t));
    timer.mark(StepPhase::Backward);
  }
  // Divergence check on the device, before the update: every (reduced) gradient, one kernel over
  // the flat gradient buffer. The loss needs no check of its own: it is finite by construction
  // (log of max(p, FLT_MIN)) unless a probability is NaN, and then that row's dx = p - onehot and
  // with it the gradients are NaN too. Nothing waits for the flag; check_finite() reads it at the
  // next host read. With loss scaling (fp16) this is where an overflowing step would be skipped.
  const int32_t tag = static_cast<int32_t>(std::min<int64_t>(t + 1, std::numeric_limits<int32_t>::max()));
  if (options_.inject_nonfinite_at == t + 1) {
    backend_.fill(net_->loss(), std::numeric_limits<float>::quiet_NaN());
    backend_.fill(net_->flat_grads(), std::numeric_limits<float>::quiet_NaN());
  }
  backend_.flag_nonfinite(net_->flat_grads(), tag, nonfinite_);
  solver_->step(solver_iteration);
  timer.mark(StepPhase::Update);
  timer.end();
  if (device_comm_) device_comm_->set_busy_tag(-1);
  timer.resolve_ready();  // event queries only: keeps the pending ring short without a sync
}

int64_t Trainer::agree_max(int64_t value) {
  const DataParallel& dp = options_.parallel;
  if (!dp.comm || dp.size() == 1) return value;
  // Every rank contributes its value at its own index: the sum is an allgather (exact below 2^24).
  CNNSCALE_CHECK(value >= 0 && value < (int64_t{1} << 24), "agree_max: {} out of range", value);
  std::vector<float> slots(static_cast<size_t>(dp.size()), 0.0f);
  slots[static_cast<size_t>(dp.rank)] = static_cast<float>(value);
  int64_t best = 0;
  for (float v : allreduce_sum_host(*dp.comm, backend_, slots)) best = std::max(best, static_cast<int64_t>(v));
  return best;
}

// The steady window must span several NVML counter periods; a short run gets extra steps inside
// the same window. Every rank runs the same number (the largest any rank needs), since the steps
// contain collectives; rounds repeat until every rank's window is long enough. Returns the number
// of steps run.
int64_t Trainer::extend_window(int64_t total, int64_t window_iterations) {
  measure::EnergyMonitor* energy = options_.energy;
  const int64_t solver_iteration = std::max<int64_t>(total - 1, 0);
  double unused = 0;
  int64_t done = 0;
  for (int round = 0; round < 20; ++round) {
    host_sync("host sync");
    const double elapsed = energy->elapsed_seconds();
    int64_t extra = 0;
    if (elapsed < options_.min_window_seconds) {
      // The window's own pace so far, plus one step of margin.
      const double per_step = elapsed / static_cast<double>(std::max<int64_t>(window_iterations + done, 1));
      extra = measure::extra_iterations_needed(0, std::max(per_step, 1e-6), options_.min_window_seconds - elapsed) + 1;
    }
    extra = agree_max(std::min<int64_t>(extra, (int64_t{1} << 23)));
    if (extra == 0) break;
    for (int64_t k = 0; k < extra; ++k, ++done) step(total + done, solver_iteration, false, unused);
  }
  return done;
}

// measure: phases. After training, with the last batch in place: a forward-only loop, a
// forward+backward loop (no gradient exchange, no update) and a full step, each long enough for
// the energy counter (>= phase_window_seconds), repeated; joules and seconds per phase follow by
// difference (measure/energy_window.hpp). No data loading inside the loops.
void Trainer::run_phase_loops(TrainResult& result) {
  measure::EnergyMonitor* energy = options_.energy;
  const DataParallel& dp = options_.parallel;
  const auto it = static_cast<uint64_t>(std::max<int64_t>(total_iterations_ - 1, 0));
  const char* kinds[] = {"forward", "forward_backward", "full_step"};
  auto one = [&](int kind) {
    net_->forward(Phase::Train, it);
    if (kind == 0) return;
    if (kind == 1 || !buckets_) {
      net_->backward(it);
    } else {
      buckets_->begin_backward();
      net_->backward(it, [&](size_t layer) { buckets_->layer_done(layer); });
      buckets_->end_backward();
      dp.comm->wait();
    }
    if (kind == 2) solver_->step(static_cast<int64_t>(it));
  };
  // Calibration: a few synchronised iterations give each loop's length; every rank then runs the
  // largest count any rank needs (the full step has collectives).
  int64_t count[3];
  for (int k = 0; k < 3; ++k) {
    one(k);
    host_sync("host sync (phase loop calibration)");
    const auto t0 = Clock::now();
    for (int i = 0; i < 3; ++i) one(k);
    host_sync("host sync (phase loop calibration)");
    const double per = std::max(seconds_since(t0) / 3, 1e-6);
    count[k] =
        agree_max(std::max<int64_t>(3, static_cast<int64_t>(std::ceil(1.2 * options_.phase_window_seconds / per))));
  }
  for (int r = 0; r < options_.phase_repeats; ++r) {
    for (int k = 0; k < 3; ++k) {
      for (int attempt = 0;; ++attempt) {
        host_sync("host sync (phase loop)");
        agree_max(0);  // a barrier: the ranks' windows start together
        energy->begin(std::string(kinds[k]) + " loop");
        for (int64_t i = 0; i < count[k]; ++i) one(k);
        host_sync("host sync (phase loop)");
        measure::EnergyReading reading = energy->end(count[k]);
        // Too short on any rank (a clock boost, a slow calibration): lengthen and redo on all.
        const bool short_here = reading.seconds < options_.phase_window_seconds;
        if (agree_max(short_here ? 1 : 0) == 0 || attempt == 4) {
          result.phase_loops.push_back({r, kinds[k], std::move(reading)});
          break;
        }
        count[k] *= 2;
      }
    }
  }
}

EvalResult Trainer::evaluate(int64_t iteration) {
  CNNSCALE_CHECK(test_ != nullptr, "no test set");
  auto t0 = Clock::now();
  EvalResult r;
  r.top5_k = static_cast<int>(std::min<int64_t>(5, test_->classes()));
  const bool async_upload = !backend_.device().is_cpu();
  const DataParallel& dp = options_.parallel;

  // Data parallel: each rank evaluates a contiguous shard; the sums are reduced below.
  std::shared_ptr<const Dataset> test = test_;
  if (dp.comm && dp.size() > 1) {
    const int64_t size = test_->size(), ranks = dp.size();
    const int64_t begin = size * dp.rank / ranks, end = size * (dp.rank + 1) / ranks;
    test = end > begin ? std::make_shared<SubsetDataset>(test_, end - begin, begin) : nullptr;
  }

  LoaderOptions lo;
  lo.batch = options_.test_batch;
  lo.shuffle = false;
  lo.drop_last = false;  // every test sample counts; the last partial batch runs at its own size
  lo.slots = 4;
  std::unique_ptr<Loader> test_loader;
  if (test)
    test_loader = std::make_unique<Loader>(test, lo, [this](size_t bytes) { return backend_.alloc_host(bytes); });
  std::vector<int> pending;

  Tensor topk = backend_.alloc(Shape{2});
  Tensor sums = backend_.alloc(Shape{2});  // per-sample sums of top-1 and top-k hits
  Tensor loss_sum = backend_.alloc(Shape{1});
  const int64_t train_batch = net_->batch();
  const int64_t batches = test_loader ? test_loader->batches_per_epoch() : 0;
  Loader* loader = test_loader.get();
  for (int64_t i = 0; i < batches; ++i) {
    if (async_upload && static_cast<int>(pending.size()) >= lo.slots - 1) {
      host_sync("host sync (test input buffers)");
      for (int s : pending) loader->release(s);
      pending.clear();
    }
    const HostBatch& b = loader->next();
    const int64_t count = b.count;  // `b` may be refilled as soon as it is released
    if (net_->batch() != count) net_->reshape(count);
    backend_.upload(b.data, net_->input());
    backend_.upload(b.labels, net_->labels());
    if (async_upload)
      pending.push_back(b.slot);
    else
      loader->release(b.slot);
    net_->forward(Phase::Test, static_cast<uint64_t>(iteration));
    backend_.accuracy_topk(net_->blob(scores_blob_), net_->labels(), {1, r.top5_k}, topk);
    // The accuracies are per-batch fractions: weight them by the batch size.
    backend_.axpby(static_cast<float>(count), topk, 1.0f, sums);
    backend_.axpby(static_cast<float>(count), net_->loss(), 1.0f, loss_sum);
    r.samples += count;
  }
  float host_sums[2], host_loss;
  {
    BlockingOp mark("download of test results");
    backend_.download(sums, host_sums);
    backend_.download(loss_sum, &host_loss);
  }
  for (int s : pending) loader->release(s);
  if (net_->batch() != train_batch) net_->reshape(train_batch);
  if (dp.comm && dp.size() > 1) {
    // Sample counts travel as floats: exact below 2^24 samples per test set.
    CNNSCALE_CHECK(test_->size() < (int64_t{1} << 24), "test set of {} samples", test_->size());
    std::vector<float> job =
        allreduce_sum_host(*dp.comm, backend_, {host_sums[0], host_sums[1], host_loss, static_cast<float>(r.samples)});
    host_sums[0] = job[0];
    host_sums[1] = job[1];
    host_loss = job[2];
    r.samples = static_cast<int64_t>(job[3]);
  }
  r.top1 = host_sums[0] / static_cast<double>(r.samples);
  r.top5 = host_sums[1] / static_cast<double>(r.samples);
  r.loss = host_loss / static_cast<double>(r.samples);
  r.seconds = seconds_since(t0);
  return r;
}

TrainResult Trainer::run(const TrainCallbacks& cb) {
  const auto t_start = Clock::now();
  TrainResult result;
  result.iterations_per_epoch = iterations_per_epoch_;
  set_watchdog_iteration(-1);
  const int64_t start = resume_from_checkpoint(cb, result.resumed_from);
  check_resume_consistent(start);
  result.start_iteration = start;
  const int64_t total = total_iterations_;

  Tensor loss_sum = backend_.alloc(Shape{1});
  int64_t loss_count = 0;
  // Too short a run to leave anything out: time it all.
  const int64_t warmup = total - start > 2 * options_.timing_warmup ? options_.timing_warmup : 0;
  bool timing = false;
  Clock::time_point timing_since{}, display_since = Clock::now();
  int64_t display_iterations = 0;
  double display_paused = 0;  // evaluation and checkpoint time inside the display window
  measure::EnergyMonitor* energy = options_.energy;
  auto start_timing = [&] {  // call after a synchronisation
    timing = true;
    timing_since = Clock::now();
    if (energy) energy->open() ? energy->resume() : energy->begin("steady window");
  };
  auto stop_timing = [&] {  // call after a synchronisation
    if (timing) result.timed_seconds += seconds_since(timing_since);
    if (timing && energy) energy->pause();
    timing = false;
  };
  if (warmup == 0) start_timing();
  std::optional<EvalResult> last_test;
  bool evaluated_at_end = false;

  const bool rank0 = options_.parallel.rank == 0;
  phase_timer_ = std::make_unique<PhaseTimer>(backend_);
  PhaseTimer& timer = *phase_timer_;
  if (device_comm_) device_comm_->take_busy_ms();  // forget brackets from before this run
  Tensor epoch_loss_sum = backend_.alloc(Shape{1});
  int64_t epoch_loss_count = 0;
  StopVote stop_vote;   // collective: every rank constructs it here
  int64_t end = total;  // where training stops: total, or the boundary agreed after a stop signal
  int64_t last_checkpoint = -1;
  for (int64_t t = start; t < total; ++t) {
    step(t, t, t - start < warmup, result.data_wait_seconds);
    // Weighted by this rank's share, the job-wide sum at display time is the global-batch mean.
    backend_.axpby(loss_share_, net_->loss(), 1.0f, loss_sum);
    backend_.axpby(loss_share_, net_->loss(), 1.0f, epoch_loss_sum);
    ++epoch_loss_count;
    ++loss_count;
    ++display_iterations;
    const int64_t done = t + 1;
    if (timing) ++result.timed_iterations;
    if (cb.on_iteration) cb.on_iteration(done, total);

    if (!timing && warmup > 0 && done - start == warmup) {
      host_sync("host sync");
      start_timing();
    }
    if (done % options_.display == 0 || done == total) {
      // Waits for the step: every upload has completed.
      const float host_sum = read_scalar(loss_sum, "loss download");
      check_finite();
      if (loader_) release_uploaded();
      resolve_phases();
      const double mean = host_sum / static_cast<double>(loss_count);
      if (!std::isfinite(mean))
        throw_runtime("training diverged: loss is {} at iteration {} (try a lower --lr)", mean, done);
      if (done == total) result.final_loss = read_last_loss();
      DisplayInfo d;
      d.iteration = done;
      d.total = total;
      d.epoch = static_cast<double>(done) / iterations_per_epoch_;
      d.loss = mean;
      d.lr = solver_->lr(t);
      d.samples_per_s =
          display_iterations * options_.batch / std::max(seconds_since(display_since) - display_paused, 1e-9);
      if (cb.on_display) cb.on_display(d);
      backend_.fill(loss_sum, 0.0f);
      loss_count = 0;
      display_iterations = 0;
      display_paused = 0;
      display_since = Clock::now();
    }

    const bool epoch_end = done % iterations_per_epoch_ == 0;
    const bool want_test = test_ && (epoch_end || done == total);
    // Weights are identical on every rank: rank 0 alone writes.
    const bool want_checkpoint =
        !options_.checkpoint_dir.empty() && rank0 &&
        (epoch_end || done == total || (options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0));
    if (want_test || want_checkpoint || epoch_end) {
      const bool was_timing = timing;
      Clock::time_point pause_start = Clock::now();
      if (want_test || want_checkpoint) {
        host_sync("host sync");
        check_finite();  // never a checkpoint (or a test result) from a diverged state
        stop_timing();
        if (loader_) release_uploaded();
        pause_start = Clock::now();
      }
      if (want_test) {
        last_test = evaluate(t);
        evaluated_at_end = done == total;
      }
      if (epoch_end) {
        EpochInfo info{done / iterations_per_epoch_, done, 0.0, solver_->lr(t), want_test ? last_test : std::nullopt};
        info.train_loss = read_scalar(epoch_loss_sum, "loss download") / static_cast<double>(epoch_loss_count);
        backend_.fill(epoch_loss_sum, 0.0f);
        epoch_loss_count = 0;
        if (cb.on_epoch) cb.on_epoch(info);
      }
      if (want_checkpoint) {
        std::string path = save_checkpoint(done);
        last_checkpoint = done;
        if (cb.on_checkpoint) cb.on_checkpoint(path, done);
      }
      if (was_timing && !timing) start_timing();
      display_paused += seconds_since(pause_start);
    }

    // A stop signal: every rank stops at the boundary the vote agrees on, with a checkpoint.
    if (done < total && stop_vote.exchange(stop_signal() != 0)) {
      end = done;
      result.interrupted = true;
      result.stop_signal = stop_signal();
      host_sync("host sync");
      check_finite();
      stop_timing();
      result.final_loss = read_last_loss();
      if (!options_.checkpoint_dir.empty() && rank0 && last_checkpoint != done) {
        std::string path = save_checkpoint(done);
        if (cb.on_checkpoint) cb.on_checkpoint(path, done);
      }
      if (cb.on_message)
        cb.on_message(fmt::format(
            "stopped by {} at iteration {} of {}{}",
            result.stop_signal ? stop_signal_name(result.stop_signal) : "a signal on another rank", done, total,
            options_.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing to resume from)" : ""));
      break;
    }
  }
  stop_vote.finish();
  // An interrupted run (every rank alike) gets no extension window, final test or phase loops: a
  // pre-empted job has little time left.
  const bool finished = !result.interrupted;
  // Collective decision: on CPU ranks only one per host reads RAPL, yet the extension steps
  // contain collectives that every rank must join.
  if (finished && energy && total > start && agree_max(timing && energy->measures_energy() ? 1 : 0) > 0) {
    result.extension_iterations = extend_window(total, result.timed_iterations);
    result.timed_iterations += result.extension_iterations;
  }
  host_sync("host sync");
  check_finite();
  stop_timing();
  if (energy && energy->open()) result.window = energy->end(result.timed_iterations);
  if (loader_) release_uploaded();
  resolve_phases();
  result.phases = timer.timeline();
  result.phase_summary = timer.summary();

  // A run resumed at its end still reports its accuracy.
  if (finished && test_ && !evaluated_at_end) last_test = evaluate(total);
  if (finished && energy && options_.measure == MeasureMode::Phases) run_phase_loops(result);
  result.test = last_test;
  result.iterations = end;
  result.epochs = static_cast<double>(end) / iterations_per_epoch_;
  result.final_lr = solver_->lr(std::max<int64_t>(end - 1, 0));
  if (start == end) result.final_loss = std::nan("");  // nothing trained in this process
  if (result.timed_seconds > 0) result.samples_per_s = result.timed_iterations * options_.batch / result.timed_seconds;
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace cnnscale
